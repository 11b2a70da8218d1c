"""The real embedded model: exactness of greedy speculation on Gemma 3 270M (F16 and Q4_K_M)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import DraftChoice, EngineConfig
from engine.events import Finished
from engine.session import Engine
from tests.engine.test_speculative import assert_same_or_near_tie

pytestmark = pytest.mark.gemma

PROMPTS = [
    "Original text:\nThe committee met on Tuesday to review the proposed changes to the city's recycling "
    "program. After a long discussion, members agreed that the current schedule confuses many residents."
    "\n\nThe same text, copied exactly:\n",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Question: Why is the sky blue?\nAnswer:",
]


def generate(engine: Engine, prompt: str, speculate: bool) -> Finished:
    engine.reset_cache()
    final = list(engine.generate(prompt, max_tokens=96, speculate=speculate))[-1]
    assert isinstance(final, Finished)
    return final


def f16_engine(gemma_f16: Path, draft: str) -> Engine:
    config = EngineConfig(
        str(gemma_f16),
        draft=DraftChoice.parse(draft),
        n_ctx=1024,
        draft_max=8,
        adaptive=draft == "ngram",
    )
    return Engine(config)


@pytest.fixture(scope="module")
def f16_plain(gemma_f16: Path) -> list[tuple[int, ...]]:
    """The F16 target's plain greedy replies to PROMPTS: made once, for both drafts' tests."""
    engine = f16_engine(gemma_f16, "ngram")
    try:
        return [generate(engine, prompt, speculate=False).token_ids for prompt in PROMPTS]
    finally:
        engine.close()


@pytest.mark.parametrize("draft", ["ngram", "q4-model"])
def test_f16_target_greedy_output_is_identical(
    gemma_f16: Path, gemma_q4: Path, f16_plain: list[tuple[int, ...]], draft: str
) -> None:
    engine = f16_engine(gemma_f16, "ngram" if draft == "ngram" else str(gemma_q4))
    try:
        n_accepted = 0
        for prompt, plain in zip(PROMPTS, f16_plain, strict=True):
            fast = generate(engine, prompt, speculate=True)
            n_accepted += fast.stats.n_accepted
            assert fast.token_ids == plain, prompt
    finally:
        engine.close()
    assert n_accepted > 20


def test_q4_target_flips_only_at_near_ties(gemma_q4: Path) -> None:
    engine = Engine(EngineConfig(str(gemma_q4), draft=DraftChoice.parse("ngram"), n_ctx=1024))
    try:
        for prompt in PROMPTS:
            plain = generate(engine, prompt, speculate=False)
            fast = generate(engine, prompt, speculate=True)
            assert_same_or_near_tie(gemma_q4, engine.tokenize(prompt), plain.token_ids, fast.token_ids)
    finally:
        engine.close()


def test_a_request_asked_again_starts_as_it_did(gemma_q4: Path) -> None:
    # The held-out chat copy on the quantized model: its reply's opening is a near-tie ("\n" and
    # " Write" within 0.13 of each other on the Intel Xeon's AVX-512 build), which the prompt's last
    # token read in a batch with an earlier reply's draft turned (the same request, served twice,
    # answered "Write one sentence about rain." the second time, its memory draft rejected). A reply
    # given again keeps the earlier reply's tokens within batch rounding of the target's best.
    from app.cli.bench import load_prompts
    from engine.chat import ChatPrompt, generate_reply, tokenize_chat

    text = next(p.prompt for p in load_prompts(None, None) if p.name == "held-copy-prose")
    engine = Engine(EngineConfig(str(gemma_q4), draft=DraftChoice.parse("ngram"), n_ctx=1024))
    try:
        prompt_text, tokens = tokenize_chat(engine, [{"role": "user", "content": text}])
        prompt = ChatPrompt(prompt_text, tuple(tokens), 0)

        def reply(speculate: bool) -> Finished:
            final = list(generate_reply(engine, prompt, max_tokens=24, speculate=speculate))[-1]
            assert isinstance(final, Finished)
            return final

        plain = reply(speculate=False)
        first, again = reply(speculate=True), reply(speculate=True)
    finally:
        engine.close()
    # (A base model's reply ends at its next speaker line, found in the text: a step that drafted
    # past it may hold a token more than plain decoding did, which the text leaves out.)
    n = len(plain.token_ids)
    assert first.text == plain.text and first.token_ids[:n] == plain.token_ids
    assert again.text == plain.text and again.token_ids[:n] == plain.token_ids
    assert again.stats.n_accepted_memory >= n // 2  # the earlier reply, drafted
