"""What each report of a prompt's reading gives a display to move on with between reports (issue
51): where the chunk in flight ends (n_next), and the time left at once where the model has read
before (its last reading's speed), not only after this reading's first chunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig, SamplingParams
from engine.events import Finished, Reading
from engine.reading import watch_reading
from tests.tiny import write_tiny_model

LONG = " ".join(f"line {i}: the cat sat on the mat." for i in range(60))  # ~1,400 tokens
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def reading_target(models_dir: Path) -> Path:
    return write_tiny_model(models_dir / "reading-target.gguf", seed=1, n_layers=4, n_embd=256, n_ff=512)


def test_each_report_says_where_the_chunk_in_flight_ends_and_a_second_reading_knows_its_speed(
    reading_target: Path,
) -> None:
    from engine.session import Engine

    engine = Engine(EngineConfig(str(reading_target), n_threads=1, n_ctx=2048))
    try:
        runner = engine.target
        chunk, prompt = runner.read_chunk, engine.tokenize(LONG)
        end = len(prompt) - 1
        seen: list[Reading] = []
        first = list(
            watch_reading(runner, prompt, engine.generate(prompt, GREEDY, max_tokens=2), seen.append)
        )
        assert isinstance(first[-1], Finished)
        assert [r.n_next for r in seen] == [min(r.n_processed + chunk, end) for r in seen]
        assert seen[0].n_next == chunk and seen[-1].n_next == seen[-1].n_processed == end
        assert seen[0].seconds_left is None  # a model's first reading: no speed before a chunk

        # Another prompt on the same model: the time left is said at once, from the last reading.
        other = engine.tokenize("Another start. " + LONG)
        seen.clear()
        list(watch_reading(runner, other, engine.generate(other, GREEDY, max_tokens=2), seen.append))
        assert seen[0].n_processed < chunk and seen[0].seconds_left is not None
        assert seen[0].seconds_left > 0
    finally:
        engine.close()
