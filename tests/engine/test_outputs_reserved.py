"""llama.cpp's logits buffer grown once per process while the window is idle, not by a reply's first
long verify batch (issue 48, Why 4: +30-45 ms at 26-64 rows with a 262k vocabulary). The real
Engine on a tiny generated model, the real cost cache."""

from __future__ import annotations

from pathlib import Path

from engine.config import PLAIN_DECODING, DraftChoice, EngineConfig, SamplingParams
from engine.events import Finished
from engine.session import Engine

NGRAM = DraftChoice.parse("ngram")


def config(target: Path, cache: Path, draft: DraftChoice = NGRAM) -> EngineConfig:
    return EngineConfig(str(target), draft=draft, cost_cache_dir=str(cache), n_ctx=512, n_threads=1)


def reply(engine: Engine) -> tuple[int, ...]:
    prompt = engine.tokenize("one two three four five six seven eight nine ten. one two three four")
    events = list(engine.generate(prompt, SamplingParams(), max_tokens=24))
    finished = events[-1]
    assert isinstance(finished, Finished)
    return finished.token_ids


def test_idle_time_grows_the_buffer_a_reply_would_grow_and_the_reply_is_the_same(
    tiny_target: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "costs"
    first = Engine(config(tiny_target, cache))
    try:
        assert first.calibrate()  # every size timed (largest first: this process's buffer grew)
        assert not first.outputs_due
        plain_text = reply(first)
    finally:
        first.close()
    engine = Engine(config(tiny_target, cache))  # the next process: nothing left to time...
    try:
        assert not engine.calibration_due
        assert engine.outputs_due  # ...but its buffer is as small as a load leaves it
        cached = list(engine.target.tokens)
        assert engine.grow_outputs()
        assert not engine.outputs_due and engine.target.tokens == cached
        filler = engine.tokenize("one", add_special=False) * 64
        engine.target.decode(filler, n_logits=64)  # a reply's longest verify batch
        assert not engine.target.outputs_grew  # ...no longer grows it
        engine.target.truncate(len(cached))
        assert reply(engine) == plain_text
    finally:
        engine.close()


def test_plain_decoding_has_nothing_to_grow(tiny_target: Path, tmp_path: Path) -> None:
    engine = Engine(config(tiny_target, tmp_path / "costs", PLAIN_DECODING))
    try:
        assert not engine.outputs_due and engine.grow_outputs()
    finally:
        engine.close()


def test_timed_batches_start_with_the_largest_then_keep_the_order_given(tiny_target: Path) -> None:
    # Measure (app/library/measure_run.py) times a plain step again after each size, so that on a
    # machine whose speed swings every figure is in the units of its moment; the largest goes first
    # (only its first timing grows llama.cpp's logits buffer), and a size timed again keeps its fastest.
    from engine.backend import LlamaRunner

    runner = LlamaRunner(str(tiny_target), n_ctx=256, n_threads=1)
    try:
        timed: list[tuple[int, float]] = []
        costs = runner.time_batches(
            [1, 2, 1, 4, 1, 8, 1], runner.tokenize("one two three"), repeats=1,
            on_timed=lambda n, s: timed.append((n, s)),
        )  # fmt: skip
    finally:
        runner.close()
    assert [n for n, _ in timed] == [8, 1, 2, 1, 4, 1, 1]
    assert costs[1] == min(s for n, s in timed if n == 1) and sorted(costs) == [1, 2, 4, 8]
