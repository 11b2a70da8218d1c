"""Chat on a base model: the transcript (engine/chat.py), the speaker-line stop rule
(engine/speaker_stop.py: whole text and streamed), and replies of the real embedded Gemma 3 270M that end by themselves."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.chat import CHAT_SAMPLING, DEFAULT_PREAMBLE, EXAMPLE_EXCHANGE, generate_reply, transcript
from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.events import Finished, Stats, TextPiece
from engine.speaker_stop import FENCE, SpeakerStop, ends_reply, is_speaker_line, transcript_marker


# The rule of a whole text: what SpeakerStop, streaming, must agree with.
def find_speaker_line(text: str, marker: str = "") -> int | None:
    """Where a base model's reply ends: the start of its first speaker line (or one starting with
    `marker`) after the first line, which continues "Assistant:", outside fenced code; or None."""
    in_fence = False
    start = text.find("\n") + 1
    if start == 0:
        return None
    while True:
        end = text.find("\n", start)
        line = text[start:] if end < 0 else text[start:end]
        if not in_fence and ends_reply(line, marker):
            return start
        if FENCE.match(line):
            in_fence = not in_fence
        if end < 0:
            return None
        start = end + 1


def cut_reply(text: str, marker: str = "") -> str:
    """A base model's finished reply: up to its first speaker line, whitespace trimmed."""
    end = find_speaker_line(text, marker)
    return (text if end is None else text[:end]).strip()


# ---------------------------------------------------------------------------------------------
# The transcript


def test_transcript_has_a_preamble_one_example_and_ends_where_the_reply_starts() -> None:
    prompt = transcript("", [{"role": "user", "content": "  What is the capital of France? "}])
    (example_user, example_reply) = (c for _, c in EXAMPLE_EXCHANGE)
    assert prompt == (
        f"{DEFAULT_PREAMBLE}\n\nUser: {example_user}\nAssistant: {example_reply}\n"
        "User: What is the capital of France?\nAssistant:"
    )


def test_a_system_prompt_replaces_the_preamble_and_turns_keep_their_order() -> None:
    class Turn:  # the worker's ChatTurn has .role and .content
        def __init__(self, role: str, content: str) -> None:
            self.role, self.content = role, content

    turns = [Turn("user", "Hi"), Turn("assistant", "Hello!"), Turn("user", "How are you?")]
    prompt = transcript("Answer like a pirate.", turns)
    assert prompt.startswith("Answer like a pirate.\n\nUser: ") and DEFAULT_PREAMBLE not in prompt
    assert prompt.endswith("\nUser: Hi\nAssistant: Hello!\nUser: How are you?\nAssistant:")
    assert prompt.count("Assistant:") == 3  # the example's, the old reply's, the new one's


# ---------------------------------------------------------------------------------------------
# The stop rule on whole texts


@pytest.mark.parametrize(
    "line, is_speaker",
    [
        ("User: hi", True),
        ("Student: Write three sentences", True),
        ("Mrs Smith: yes", True),
        ("Q:", True),
        ("Répondeur: oui", True),
        ("Assistant:", True),
        ("  User: indented", False),
        ("10:30 is when we meet", False),
        ("http://example.com", False),
        ("The answer: 42 is wrong", True),  # a name of words and spaces, then a colon: by design
        ("This is a line of words far too long for a name: x", False),
        ("- User: in a list", False),
        ("**Note:** bold", False),
    ],
)
def test_speaker_lines_are_any_name_and_a_colon_at_line_start(line: str, is_speaker: bool) -> None:
    assert is_speaker_line(line) is is_speaker


def test_the_reply_ends_at_its_first_speaker_line_and_is_trimmed() -> None:
    assert cut_reply(" Paris.\nUser: What is the capital of Spain?\nAssistant: Madrid.") == "Paris."
    assert cut_reply(" Mountains are tall.\n\nStudent: Write two sentences") == "Mountains are tall."
    assert cut_reply("  Nothing else here.  \n\n") == "Nothing else here."
    # The first line continues "Assistant:" and is never a speaker line.
    assert cut_reply("Answer: 42.\nTeacher: good") == "Answer: 42."


def test_speaker_lines_inside_code_blocks_do_not_end_the_reply() -> None:
    text = " Here:\n```python\nUser: str = 'x'\nprint(User)\n```\nThat is all.\nUser: thanks"
    assert find_speaker_line(text) == text.index("\nUser: thanks") + 1
    assert cut_reply(text) == "Here:\n```python\nUser: str = 'x'\nprint(User)\n```\nThat is all."
    unclosed = " Code:\n~~~\nKey: value\n"
    assert cut_reply(unclosed) == "Code:\n~~~\nKey: value"


# ---------------------------------------------------------------------------------------------
# The stop rule while streaming

TEXTS = [
    " Paris.\nUser: What is the capital of Spain?",
    " Mountains rise above the clouds. Their peaks are cold.\nStudent: Write two sentences about",
    " Here:\n```\nUser: inside code\n```\nDone.\nTeacher: next",
    " A line\nhttp://example.com\n10:30 now\nUser:",
    "\nUser: at once",
    " A reply with no speaker line at all, and trailing space.  \n\n",
    " Steps:\n\n1. one\n2. two\n",
]


def stream(text: str, chunk: int) -> tuple[list[TextPiece], SpeakerStop]:
    rule = SpeakerStop()
    shown: list[TextPiece] = []
    for n, i in enumerate(range(0, len(text), chunk)):
        shown += rule.feed(text[i : i + chunk], is_draft=n % 3 == 1, n_tokens=1)
        # What was shown so far is always the start of the final reply: nothing is taken back.
        assert cut_reply(text).startswith("".join(p.text for p in shown))
    shown += rule.finish()
    return shown, rule


@pytest.mark.parametrize("text", TEXTS)
def test_streaming_never_shows_a_speaker_line_whatever_the_piece_sizes(text: str) -> None:
    for chunk in (1, 2, 3, 5, 8, 13, 1000):
        shown, rule = stream(text, chunk)
        assert "".join(p.text for p in shown) == cut_reply(text) == rule.text, chunk
        assert rule.stopped == (find_speaker_line(text) is not None or text.rstrip().endswith(":"))


def test_a_long_reply_streams_whole_and_still_stops() -> None:
    """Past the first few kB the rule keeps only the current line's text at hand: same result."""
    body = "".join(f"Line {i} of a long answer, with words: {'x' * (i % 50)}\n" for i in range(600))
    long_line = "word " * 3000  # one line of 15 kB
    text = f" Start.\n{body}```\nKey: inside code\n```\n{long_line}\nStudent: the end"
    for chunk in (7, 300):
        rule = SpeakerStop()
        shown = [p for i in range(0, len(text), chunk) for p in rule.feed(text[i : i + chunk])]
        shown += rule.finish()
        assert "".join(p.text for p in shown) == cut_reply(text) == rule.text
        assert rule.text.endswith(long_line.rstrip()) and rule.stopped


def test_streamed_pieces_keep_their_draft_flags_and_tokens() -> None:
    rule = SpeakerStop()
    shown = rule.feed(" The sea", False, 2)
    shown += rule.feed(" is wide and", True, 3)
    shown += rule.feed(" deep.\nUs", False, 3)
    shown += rule.feed("er: more", True, 2)
    shown += rule.finish()
    assert [(p.text, p.is_draft) for p in shown] == [
        ("The sea", False),
        (" is wide and", True),
        (" deep.", False),
    ]
    assert rule.stopped and rule.text == "The sea is wide and deep."
    assert sum(p.n_tokens for p in shown) == 5  # the last two pieces' tokens were never shown


def test_a_line_that_could_become_a_speaker_line_is_held_back_until_it_cannot() -> None:
    rule = SpeakerStop()
    assert "".join(p.text for p in rule.feed(" First line.\nThe")) == "First line."
    assert rule.feed(" sea") == []  # "The sea" could still be "The sea: ..."
    assert "".join(p.text for p in rule.feed(", calm.")) == "\nThe sea, calm."


def test_a_line_that_starts_the_transcript_over_ends_the_reply_too() -> None:
    prompt = transcript("", [{"role": "user", "content": "Tell me a joke."}])
    marker = transcript_marker(prompt)
    assert DEFAULT_PREAMBLE.startswith(marker) and len(marker) >= 12
    text = f" A joke about cats.\n\n{DEFAULT_PREAMBLE}\n\nUser: more"
    assert cut_reply(text, marker) == "A joke about cats."
    for chunk in (1, 4, 1000):
        rule = SpeakerStop(marker)
        shown = []
        for i in range(0, len(text), chunk):
            shown += rule.feed(text[i : i + chunk])
        shown += rule.finish()
        assert "".join(p.text for p in shown) == "A joke about cats." and rule.stopped
    assert transcript_marker("Be brief.\n\nUser: hi") == ""  # too short to tell from a reply


# ---------------------------------------------------------------------------------------------
# Through a real engine


def test_a_tiny_base_model_chats_through_generate_reply(tiny_base: Path) -> None:
    from engine.session import Engine

    engine = Engine(EngineConfig(str(tiny_base), n_threads=1, n_ctx=512, draft=DraftChoice.parse("ngram")))
    try:
        events = list(
            generate_reply(engine, transcript("", [{"role": "user", "content": "Hi"}]), max_tokens=40)
        )
    finally:
        engine.close()
    finished = events[-1]
    assert isinstance(finished, Finished) and isinstance(events[-2], Stats)
    shown = "".join(e.text for e in events if isinstance(e, TextPiece))
    assert shown == finished.text == cut_reply(finished.text)


def test_cli_chat_on_a_base_model_uses_the_transcript(tiny_base: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli.cli",
            "generate",
            "--model",
            str(tiny_base),
            "--prompt",
            "Hi",
            "--chat",
            "--max-tokens",
            "8",
            "--threads",
            "1",
            "--json",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["n_prompt_tokens"] > len(DEFAULT_PREAMBLE) // 8  # the preamble and example are in
    assert result["text"] == cut_reply(result["text"])


# ---------------------------------------------------------------------------------------------
# The real embedded model: replies that answer, end by themselves and do not loop

REQUESTS = (
    "What is the capital of France?",
    "Write two sentences about mountains.",
    "Describe a cat.",
)


def repeated_phrase(text: str, n_words: int = 6) -> str | None:
    """A run of n_words words that occurs twice: the mark of a loop."""
    words = re.findall(r"\w+", text.lower())
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - n_words + 1):
        gram = tuple(words[i : i + n_words])
        if gram in seen:
            return " ".join(gram)
        seen.add(gram)
    return None


@pytest.mark.gemma
@pytest.mark.parametrize(
    "params",
    [
        CHAT_SAMPLING,
        SamplingParams(**{**CHAT_SAMPLING.__dict__, "seed": 7}),
        SamplingParams(),
        # The window's Greedy box: temperature 0, the chat defaults' repetition penalty kept. A
        # penalty on line breaks and speaker names kept the model from starting "User:" and it
        # wrote the preamble again instead (seen in the first-run screenshot).
        SamplingParams(**{**CHAT_SAMPLING.__dict__, "temperature": 0.0}),
    ],
    ids=["chat-defaults", "chat-defaults-seed-7", "greedy", "greedy-with-penalty"],
)
def test_the_embedded_model_answers_a_conversation_and_stops(gemma_q4: Path, params: SamplingParams) -> None:
    from app.host.messages import ChatTurn
    from engine.chat import build_chat_prompt
    from engine.session import Engine

    if params.seed is None and not params.is_greedy:
        params = SamplingParams(**{**params.__dict__, "seed": 1})
    engine = Engine(EngineConfig(str(gemma_q4), draft=DraftChoice.parse("ngram"), n_ctx=2048))
    turns: tuple[ChatTurn, ...] = ()
    try:
        for request in REQUESTS:
            turns = (*turns, ChatTurn("user", request))
            prompt = build_chat_prompt(engine, turns, max_tokens=160)  # as the worker builds it
            events = list(generate_reply(engine, prompt, params, max_tokens=160))
            finished = events[-1]
            assert isinstance(finished, Finished)
            reply = finished.text
            shown = "".join(e.text for e in events if isinstance(e, TextPiece))
            context = f"{request!r} -> {reply!r} ({finished.stop_reason})"
            assert finished.stop_reason in ("stop", "eos"), f"did not end by itself: {context}"
            assert shown == reply and reply.strip(), context
            assert find_speaker_line(reply) is None and not reply.startswith(("User:", "Assistant:")), context
            assert request.lower().rstrip(".?") not in reply.lower(), f"repeated the request: {context}"
            assert repeated_phrase(reply) is None, f"loops on {repeated_phrase(reply)!r}: {context}"
            for sentence in DEFAULT_PREAMBLE.split(". "):
                assert sentence.strip(". ").lower() not in reply.lower(), f"wrote the preamble: {context}"
            turns = (*turns, ChatTurn("assistant", reply))
    finally:
        engine.close()
    assert "paris" in turns[1].content.lower()
