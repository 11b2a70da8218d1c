"""A prompt's reading, watched: its progress as it goes, and what the reply reused of the cache.

`watch_reading` wraps a reply's events (Engine.generate's): it sees what the model's cache holds
against the new prompt (what is reused, and why more than the new part is read again:
engine.events.Reread), reports a Reading at once and after each chunk the runner decodes
(LlamaRunner.on_read; with the time left from the chunks so far, or from the model's last
reading), and writes the reuse and the time to the first text into every Stats. The hook is set
only while the prompt is read, and only when a caller asks for progress.
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from engine.events import Event, Finished, Reading, Reread, Stats, TextPiece


class _Runner(Protocol):
    tokens: list[int]
    can_roll_back: bool
    read_chunk: int
    on_read: Callable[[int, int], None] | None

    def common_prefix(self, tokens: Sequence[int]) -> int: ...


def cache_use(runner: _Runner, prompt: Sequence[int], on_change: Reread) -> tuple[int, Reread]:
    """What a prompt reuses of the cache, seen before it is read, as the engine's prefill will
    (engine.speculative): the tokens that stay (the rest of the prompt is read), and why more than
    the new part is read again. on_change: the reason to give where the cache held text the prompt
    does not continue (the caller knows what changed)."""
    n_cached = len(runner.tokens)
    n_common = runner.common_prefix(prompt[:-1])
    if n_common >= n_cached:  # the cache is a prefix of the prompt: only what is new is read
        return n_common, Reread.FIRST if n_cached == 0 else Reread.NONE
    if not runner.can_roll_back:
        return 0, Reread.CANNOT_TRIM
    return n_common, on_change


# Each runner's seconds a token (a, b of _line) at its last reading of at least one whole chunk:
# the time left said at once, before this reading's first chunk is timed (a 7B model's takes
# seconds on a CPU). Weak: a runner closed and dropped takes its entry with it.
_last_costs: weakref.WeakKeyDictionary[_Runner, tuple[float, float]] = weakref.WeakKeyDictionary()


class _Watch:
    """The progress of one prompt's reading, reported through `report`."""

    def __init__(
        self, runner: _Runner, prompt_len: int, use: tuple[int, Reread], report: Callable[[Reading], None]
    ) -> None:
        self.runner = runner
        self.n_prompt = prompt_len
        self.n_kept, self.reread = use  # (cache_use)
        self.report = report
        self.end = prompt_len - 1  # the last token is read with the reply's first step
        self.started = time.perf_counter()
        self.last = (self.n_kept, self.started)  # (tokens in the cache, when) at the last chunk
        # Each chunk's (middle position, seconds a token, tokens): a token costs more the more the
        # cache holds (attention reads all of it), so the time left is fitted as a + b * position.
        self.chunks: list[tuple[float, float, int]] = []

    def seconds_left(self, n_processed: int) -> float | None:
        costs = _line(self.chunks) if self.chunks else _last_costs.get(self.runner)
        if costs is None:
            return None
        n_left = max(0, self.end - n_processed)
        a, b = costs
        return n_left * max(a + b * (n_processed + self.end) / 2, 0.0)

    def reading(self, n_processed: int) -> Reading:
        left = self.seconds_left(n_processed)
        return Reading(
            self.n_prompt,
            self.n_kept,
            n_processed,
            time.perf_counter() - self.started,
            left,
            self.reread,
            min(n_processed + self.runner.read_chunk, self.end),
        )

    def on_chunk(self, n_processed: int) -> None:
        now = time.perf_counter()
        n0, t0 = self.last
        if n_processed > n0 and now > t0:
            n = n_processed - n0
            self.chunks.append(((n0 + n_processed) / 2, (now - t0) / n, n))
            if n >= self.runner.read_chunk:  # a whole chunk: what this model reads at, for next time
                _last_costs[self.runner] = _line(self.chunks)
        self.last = (n_processed, now)
        self.report(self.reading(n_processed))


# Chunks timed before the time left leans on a slope: from two or three, a busy machine's noise
# said 226 s left where 60 s were (tools/lab/reading_progress.py).
SLOPE_MIN_CHUNKS = 4


def _line(points: list[tuple[float, float, int]]) -> tuple[float, float]:
    """Seconds a token as a + b * position, least squares weighted by each chunk's tokens, b at
    least 0 (0 before SLOPE_MIN_CHUNKS chunks: their mean); the first chunk (costlier a token:
    its decode's first use of buffers) left out once there are others."""
    if len(points) > 2:
        points = points[1:]
    w = sum(n for _, _, n in points)
    mx = sum(x * n for x, _, n in points) / w
    my = sum(y * n for _, y, n in points) / w
    if len(points) < SLOPE_MIN_CHUNKS:
        return my, 0.0
    sxx = sum(n * (x - mx) ** 2 for x, _, n in points)
    b = max(0.0, sum(n * (x - mx) * (y - my) for x, y, n in points) / sxx) if sxx > 0 else 0.0
    return my - b * mx, b


def watch_reading(
    runner: _Runner,
    prompt: Sequence[int],
    events: Iterator[Event],
    report: Callable[[Reading], None] | None = None,
    on_change: Reread = Reread.CHANGED,
) -> Iterator[Event]:
    """`events` (a reply to `prompt` on `runner`, not started yet) with the reuse and the time
    to the first text in every Stats, and the reading reported to `report` as it goes."""
    started = time.perf_counter()
    n_kept, reread = cache_use(runner, prompt, on_change)
    if report is not None:
        watch = _Watch(runner, len(prompt), (n_kept, reread), report)
        watch.report(watch.reading(n_kept))

        def on_read(n_done: int, n_total: int) -> None:
            n_processed = len(runner.tokens)
            if n_processed > watch.end:  # not the prompt's reading (a timing batch after it)
                runner.on_read = None
                return
            watch.on_chunk(n_processed)
            if n_processed == watch.end:
                runner.on_read = None

        runner.on_read = on_read
    first_token_s = 0.0
    try:
        for event in events:
            if first_token_s == 0.0 and isinstance(event, TextPiece):
                first_token_s = time.perf_counter() - started
            if isinstance(event, Stats):
                event = dataclasses.replace(event, reread=reread, first_token_s=first_token_s)
            elif isinstance(event, Finished):
                stats = dataclasses.replace(event.stats, reread=reread, first_token_s=first_token_s)
                event = dataclasses.replace(event, stats=stats)
            runner.on_read = None
            yield event
    finally:
        runner.on_read = None
