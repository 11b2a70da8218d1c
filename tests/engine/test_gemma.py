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


@pytest.mark.parametrize("draft", ["ngram", "q4-model"])
def test_f16_target_greedy_output_is_identical(gemma_f16: Path, gemma_q4: Path, draft: str) -> None:
    spec = "ngram" if draft == "ngram" else str(gemma_q4)
    engine = Engine(
        EngineConfig(
            str(gemma_f16),
            draft=DraftChoice.parse(spec),
            n_ctx=1024,
            draft_max=8,
            adaptive=draft == "ngram",
            n_threads=2,
        )
    )
    try:
        n_accepted = 0
        for prompt in PROMPTS:
            plain = generate(engine, prompt, speculate=False)
            fast = generate(engine, prompt, speculate=True)
            n_accepted += fast.stats.n_accepted
            assert fast.token_ids == plain.token_ids, prompt
    finally:
        engine.close()
    assert n_accepted > 20


def test_q4_target_flips_only_at_near_ties(gemma_q4: Path) -> None:
    engine = Engine(EngineConfig(str(gemma_q4), draft=DraftChoice.parse("ngram"), n_ctx=1024, n_threads=2))
    try:
        for prompt in PROMPTS:
            plain = generate(engine, prompt, speculate=False)
            fast = generate(engine, prompt, speculate=True)
            assert_same_or_near_tie(gemma_q4, engine.tokenize(prompt), plain.token_ids, fast.token_ids)
    finally:
        engine.close()
