"""A Stop while a prompt is read ends the chunk in flight (llama.cpp's abort callback, set by
LlamaRunner.decode), not after it: on a CPU a chunk of a 7B model takes seconds (issue 51:
Stop during reading returns within 0.5 s). What the chunk had written is gone from the cache, so
the next request reuses exactly what was read whole and answers as a fresh engine does."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engine.config import EngineConfig, SamplingParams
from engine.events import Finished, Reading, TextPiece
from engine.reading import watch_reading
from tests.tiny import write_tiny_model
from tests.waiting import wait_until

LONG = " ".join(f"line {i}: the cat sat on the mat." for i in range(100))  # ~2,400 tokens
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def wide_target(models_dir: Path) -> Path:
    """Wide enough that a 256-row chunk takes a good part of a second on one core (a 7B model's
    128-row chunk takes ~6 s on two), small enough to write in a second."""
    return write_tiny_model(
        models_dir / "wide-target.gguf", seed=1, n_layers=8, n_embd=512, n_head=8, n_ff=2048, n_ctx=8192
    )


def _cached_positions(runner) -> int:  # type: ignore[no-untyped-def]
    """How many positions llama.cpp's cache holds for the sequence (its largest position + 1)."""
    return int(runner._llama.llama_memory_seq_pos_max(runner.memory, 0)) + 1


@pytest.mark.slow  # a wide model's chunks, seconds each
def test_stop_inside_a_chunk_returns_at_once_and_the_next_answer_is_a_fresh_ones(wide_target: Path) -> None:
    from engine.session import Engine

    engine = Engine(EngineConfig(str(wide_target), n_threads=1, n_ctx=4096))
    try:
        runner = engine.target
        prompt = engine.tokenize(LONG)
        chunk = runner.read_chunk
        assert len(prompt) > 8 * chunk
        cancel = threading.Event()
        seen: list[Reading] = []
        ended: list[Finished] = []
        ended_at: list[float] = []

        def reply() -> None:
            events = engine.generate(prompt, GREEDY, max_tokens=8, cancel=cancel)
            for event in watch_reading(runner, prompt, events, seen.append):
                assert not isinstance(event, TextPiece)
                if isinstance(event, Finished):
                    ended.append(event)
            ended_at.append(time.perf_counter())

        thread = threading.Thread(target=reply)
        thread.start()
        # The Stop comes while the second chunk is being decoded (a llama call in flight).
        wait_until(lambda: len(runner.tokens) >= chunk and runner.call_started > 0, 60, interval_s=0.002)
        n_read_whole = len(runner.tokens)
        stopped_at = time.perf_counter()
        cancel.set()
        thread.join(timeout=60)
        latency = ended_at[0] - stopped_at
        chunk_s = seen[1].elapsed_s  # the first chunk's time (seen[0]: at once, nothing read)

        assert ended[0].stop_reason == "cancelled" and ended[0].text == ""
        # Nothing of the chunk that was stopped is kept; the chunks read whole are.
        assert len(runner.tokens) == n_read_whole == _cached_positions(runner)
        assert ended[0].stats.n_prefilled == n_read_whole
        # Before the abort callback, the Stop waited for the chunk's end (its whole time, less
        # the few ms it had run): here it returns within a small part of it.
        assert latency < 0.5, f"Stop took {latency:.3f} s (a chunk: {chunk_s:.3f} s)"

        # The next request reads only the rest, and answers as an engine that never stopped.
        cancel.clear()
        again = list(watch_reading(runner, prompt, engine.generate(prompt, GREEDY, max_tokens=8)))[-1]
        assert isinstance(again, Finished) and again.stop_reason != "cancelled"
        assert again.stats.n_prefilled == len(prompt) - n_read_whole
        runner.clear()
        fresh = list(engine.generate(prompt, GREEDY, max_tokens=8))[-1]
        assert isinstance(fresh, Finished) and fresh.stats.n_prefilled == len(prompt)
        assert again.token_ids == fresh.token_ids and len(fresh.token_ids) == 8
    finally:
        engine.close()


def test_a_steps_batch_is_never_stopped_midway(wide_target: Path) -> None:
    """Only a prompt's reading asks llama.cpp to stop: a Stop during the reply is seen between
    steps, and no step's batch is cut (the callback is off outside a reading)."""
    from engine.session import Engine

    engine = Engine(EngineConfig(str(wide_target), n_threads=1, n_ctx=1024))
    try:
        runner = engine.target
        prompt = engine.tokenize("the cat sat on the mat.")
        looks_in_a_step: list[bool] = []

        class Watched(threading.Event):
            def is_set(self) -> bool:
                if len(runner.tokens) >= len(prompt) - 1:  # the prompt is read: the reply's steps
                    looks_in_a_step.append(runner.call_started > 0)
                return False

        finished = list(engine.generate(prompt, GREEDY, max_tokens=6, cancel=Watched()))[-1]
        assert isinstance(finished, Finished) and finished.stats.n_generated == 6
        assert looks_in_a_step and not any(looks_in_a_step)
    finally:
        engine.close()


class _StopInTheDraftsReading(threading.Event):
    """Set from its second look once the target has read the prompt: the first is the prefill's,
    before the draft model reads it; the second is llama.cpp's, inside the draft's first chunk."""

    def __init__(self, target, n_read: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.target, self.n_read, self.looks = target, n_read, 0

    def is_set(self) -> bool:
        if len(self.target.tokens) < self.n_read:
            return False
        self.looks += 1
        return self.looks >= 2


def test_stop_while_the_draft_model_reads_the_prompt_is_seen_inside_its_reading(
    models_dir: Path, wide_target: Path
) -> None:
    """A draft model reads the prompt after the target (engine.policy.read_prompt): a Stop then
    is seen inside the draft's reading as inside the target's, not after all of it (a 0.5B draft
    of a 7B target reads a long prompt for seconds on a CPU)."""
    from engine.config import DraftChoice
    from engine.session import Engine

    small = write_tiny_model(
        models_dir / "small-target.gguf", seed=1, n_layers=2, n_embd=128, n_ff=256, n_ctx=8192
    )
    config = EngineConfig(
        str(small), draft=DraftChoice.parse(str(wide_target)), n_threads=1, n_ctx=4096, draft_lookup=False
    )
    engine = Engine(config)
    try:
        prompt = engine.tokenize(LONG)
        stop = _StopInTheDraftsReading(engine.target, len(prompt) - 1)
        finished = list(engine.generate(prompt, GREEDY, max_tokens=400, cancel=stop))[-1]
        assert isinstance(finished, Finished) and finished.stop_reason == "cancelled"
        assert finished.stats.n_generated == 0 and stop.looks >= 2
        # The draft's whole reading of this prompt takes seconds here (wide_target's chunks):
        # stopped inside its first chunk, the reply spent a small part of it.
        assert finished.stats.draft_catch_up_s < 0.5, finished.stats.draft_catch_up_s
    finally:
        engine.close()
