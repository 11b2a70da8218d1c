"""A reply's prompt, built in engine/chat.py (build_chat_prompt) and tokenized once: in-process on
a real engine (tiny generated models). Moved here from the worker's tests with the code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.host.messages import ChatTurn, ReplyRequest
from engine.chat import ChatPrompt, build_chat_prompt, generate_reply
from engine.config import EngineConfig
from engine.events import Finished
from engine.session import Engine


def config(target: str, **kw: object) -> EngineConfig:
    return EngineConfig(target, n_threads=1, **kw)  # type: ignore[arg-type]


def build_prompt(engine: Engine, request: ReplyRequest, n_dropped_before: int) -> ChatPrompt:
    """What the worker builds for a ReplyRequest."""
    return build_chat_prompt(
        engine, request.turns, request.system_prompt, request.max_tokens, n_dropped_before
    )


@pytest.fixture(scope="module")
def small_engine(tiny_target: Path):  # type: ignore[no-untyped-def]
    engine = Engine(config(str(tiny_target), n_ctx=512))
    yield engine
    engine.close()


def _conversation(n_pairs: int, words: int = 30) -> tuple[ChatTurn, ...]:
    turns = []
    for i in range(n_pairs):
        turns.append(ChatTurn("user", f"question {i}: " + "lorem " * words))
        turns.append(ChatTurn("assistant", f"answer {i}: " + "ipsum " * words))
    return tuple(turns)


def test_a_short_conversation_is_sent_whole_with_its_system_prompt(small_engine) -> None:
    turns = (*_conversation(1, words=3), ChatTurn("user", "and now?"))
    request = ReplyRequest(1, turns, system_prompt="Be brief.", max_tokens=64)
    built = build_prompt(small_engine, request, 0)
    prompt, n_dropped, n_prompt = built.text, built.n_dropped, built.n_tokens
    assert n_dropped == 0
    assert (
        prompt.startswith("<|system|>Be brief.")
        and "question 0" in prompt
        and prompt.endswith("<|assistant|>")
    )
    assert n_prompt == len(small_engine.tokenize(prompt))
    assert built.tokens == tuple(small_engine.tokenize(prompt))  # the very tokens decoded


def test_the_oldest_turns_go_first_and_the_system_prompt_stays(small_engine) -> None:
    turns = (*_conversation(8), ChatTurn("user", "the newest question"))
    request = ReplyRequest(1, turns, system_prompt="SYSTEM RULES", max_tokens=64)
    built = build_prompt(small_engine, request, 0)
    prompt, n_dropped, n_prompt = built.text, built.n_dropped, built.n_tokens
    assert n_dropped > 0 and n_dropped % 2 == 0  # whole user/assistant pairs
    assert "SYSTEM RULES" in prompt and "the newest question" in prompt
    assert "question 0:" not in prompt
    assert n_prompt + 64 <= small_engine.n_ctx
    # One more exchange later, the same turns are still left out (the cached prefix stays valid),
    # unless more must go.
    later = (*turns, ChatTurn("assistant", "short"), ChatTurn("user", "next"))
    built2 = build_prompt(small_engine, ReplyRequest(2, later, "SYSTEM RULES", max_tokens=64), n_dropped)
    prompt2, n_dropped2 = built2.text, built2.n_dropped
    assert n_dropped2 == n_dropped
    shared = prompt.removesuffix("<|assistant|>")
    assert prompt2.startswith(shared)


def test_base_models_get_a_plain_text_transcript(tiny_base: Path) -> None:
    engine = Engine(config(str(tiny_base), n_ctx=512))
    try:
        assert not engine.has_chat_template
        turns = (ChatTurn("user", "Hi"), ChatTurn("assistant", "Hello!"), ChatTurn("user", "How are you?"))
        prompt = build_prompt(engine, ReplyRequest(1, turns, system_prompt="Be kind.", max_tokens=32), 0).text
        # The system prompt, engine.chat's example exchange, the conversation, the reply's start.
        assert prompt.startswith("Be kind.\n\nUser: ")
        assert prompt.endswith("\nUser: Hi\nAssistant: Hello!\nUser: How are you?\nAssistant:")
        # (No stop strings: the reply ends at any new speaker line, engine.chat.generate_reply.)
    finally:
        engine.close()


@pytest.mark.parametrize("model", ["tiny_target", "tiny_base"])
def test_a_reply_decodes_the_prompts_tokens_without_tokenizing_it_again(
    request: pytest.FixtureRequest, model: str
) -> None:
    engine = Engine(config(str(request.getfixturevalue(model)), n_ctx=512))
    try:
        turns = (ChatTurn("user", "Say something about rain."),)
        built = build_chat_prompt(engine, turns, "Be brief.", max_tokens=24)
        tokenized: list[str] = []
        tokenize = engine.tokenize

        def counting(text: str, add_special: bool = True) -> list[int]:
            tokenized.append(text)
            return tokenize(text, add_special)

        engine.tokenize = counting  # type: ignore[method-assign]
        from_tokens = list(generate_reply(engine, built, max_tokens=24))
        assert built.text not in tokenized  # decoded from built.tokens
        from_text = list(generate_reply(engine, built.text, max_tokens=24))
        assert built.text in tokenized  # (the counter sees a text prompt being tokenized)
        # The same reply either way (greedy), a base model's speaker rule included.
        first, second = from_tokens[-1], from_text[-1]
        assert isinstance(first, Finished) and isinstance(second, Finished)
        assert (first.text, first.stop_reason) == (second.text, second.stop_reason)
        assert first.stats.n_prompt_tokens == built.n_tokens
    finally:
        engine.close()


def test_a_templates_bos_and_eos_are_the_model_files_texts(tiny_target: Path) -> None:
    # The target's header is read without its vocabulary's texts (0.1-0.2 s of every start with a
    # 262k vocabulary); a chat template's bos_token and eos_token come from the loaded model.
    engine = Engine(config(str(tiny_target), n_ctx=512))
    try:
        assert engine.info_target.tokens == ()  # not read
        template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}"
        engine.info_target = dataclasses.replace(
            engine.info_target, metadata={**engine.info_target.metadata, "tokenizer.chat_template": template}
        )
        # BOS is the tokenizer's to add (add_bos_token): the template's own is dropped, EOS kept.
        assert engine.format_chat([{"role": "user", "content": "hi"}]) == "hi<|eos|>"
    finally:
        engine.close()
