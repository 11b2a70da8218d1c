"""A short copy on the real model is drafted even where a busy moment priced its batches (issue 48,
Why 2: a reply that copies one sentence of its prompt drafted 3 and kept 0 through `tandem generate`,
0 through `tandem serve`). A verify batch size is priced at the lowest of its timings; a size a reply
drafted once is timed once, and a step slowed by another program (on a shared machine: the lab's noisy replay)
then priced it out for good, as an idle calibration timed while another program ran prices every
size: the copy was observed right at every step and never drafted, in that process nor in the next
ones seeded from its cost cache. The real Gemma 3 270M Q4_K_M, the real
Engine and cost cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import NGRAM_LOOKUP, EngineConfig, SamplingParams
from engine.events import Finished
from engine.session import Engine

pytestmark = pytest.mark.gemma

SENTENCE = "He repainted the white tower every third summer, oiled the brass fittings of the great lens."
# A base model's plain completion that copies one sentence (20 tokens) and stops at the line's end.
PROMPT = (
    "Sentence: The harbour committee met on Tuesday evening to discuss the new moorings.\n"
    "Same sentence: The harbour committee met on Tuesday evening to discuss the new moorings.\n\n"
    f"Sentence: {SENTENCE}\nSame sentence:"
)


def reply(engine: Engine, speculate: bool = True) -> Finished:
    final = list(engine.generate(PROMPT, SamplingParams(), max_tokens=64, stop=["\n"], speculate=speculate))[
        -1
    ]
    assert isinstance(final, Finished)
    return final


def test_a_short_copy_is_drafted_where_a_busy_moment_priced_its_batches(
    gemma_q4: Path, tmp_path: Path
) -> None:
    config = EngineConfig(str(gemma_q4), draft=NGRAM_LOOKUP, cost_cache_dir=str(tmp_path))
    engine = Engine(config)
    try:
        plain = reply(engine, speculate=False)  # (its steps time a plain step: the cost cache keeps it)
    finally:
        engine.close()
    assert plain.text.strip() == SENTENCE  # the model does copy the sentence
    (path,) = (p for p in tmp_path.glob("*.json") if "step_s" in json.loads(p.read_text()))
    data = json.loads(path.read_text())
    # Every batch as an idle calibration timed it once while another program ran: each dearer than
    # the plain steps its draft could save, so no draft of any length can pay at those prices.
    plain_s = data["step_s"]["1"]
    data["step_s"].update({str(n): (n + 1) * plain_s for n in range(2, 65)})
    path.write_text(json.dumps(data))

    engine = Engine(config)  # the next process, seeded from that cache
    try:
        copied = reply(engine)
    finally:
        engine.close()
    assert copied.text == plain.text
    # 0 drafted before: the copy was right at every step and priced out at every one; now its first
    # draft's batch is timed again (DraftLengthController._retime_copy) and found cheaper.
    assert copied.stats.n_accepted >= 7, (copied.stats.n_drafted, copied.stats.n_accepted)
