"""What a verify batch of n rows costs on this machine: the draft-length controller's cost model.

Every step's wall time is a sample of its batch size (rows verified); Engine.calibrate and a
first reply on a machine never timed add samples of their own (add_timed). A size is priced at
the lowest of its last few samples (a busy machine only ever slows a step down), the throughput
guard reads the median (what a step usually costs). Between sizes: linear interpolation; past the
largest: the measured cost of one more row. Runs behind each choice: docs/design-engine.md ("The
controller's constants").

A step costs more as the text grows (attention reads all of it), and only a plain step is timed
every few steps: a size is priced from its timing and how much the plain step's price moved since
(`prices`): in proportion to its cost; where the text grew over TEXT_JUMP tokens since and the
plain step with it (GROWTH_MIN), by GROWTH_EXPONENT of its rows times the plain step's growth if
that is dearer. (SmolLM2 on the Xeon, 256 to 4,096 tokens: a plain step +22.6 ms, 2 rows 1.8 times
that, 4 rows 2.9, 16 rows 9.1, where the proportion said 1.28, 1.96 and 5.75.) `low` keeps the
timings as they were.
"""

from __future__ import annotations

import bisect
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

PRIOR_SLOPE = 0.05  # extra cost of one more unmeasured row in a verify batch, relative
SLOPE_MIN_ROWS = 4  # batches this large or larger tell what one more row costs (smaller: other kernels)
COST_SAMPLES = 5  # a batch size is priced at the lowest of its last few timings (noise only slows)
SLOPE_FLOOR = 0.25  # a measured slope past the largest size is at least this share of a row's mean cost
# Drafts go at most this many times past the largest batch measured: twice where nothing says
# what one more row costs, four times where a slope is measured (see explore_limit).
EXPLORE_FACTOR, EXPLORE_FACTOR_SLOPE = 2, 4
_CURVE_ROWS = 128  # costs() computes at least this far (longer drafts are sliced from it)
TRUSTED_SAMPLES = 3  # a size's median is its usual cost (the guard's cap) once timed this often
CALIBRATION_SIZES = (*range(1, 9), *range(16, 65, 8))  # verify batches timed while idle (Engine.calibrate)
FIRST_REPLY_SIZES = (1, 4, 16, 64)  # timed once by a first reply on a machine never timed...
FIRST_REPLY_MIN_TOKENS = 128  # ...where the reply may run this long (shorter ones cannot repay it)
GROWTH_EXPONENT = 0.75  # n rows gain n ** this times a plain step's growth with the text (at least)
TEXT_JUMP = 256  # tokens: a plain price timed after a text this much longer or shorter is stale
GROWTH_MIN = 0.1  # ...and sizes grow by their rows where the plain step grew at least this much


@dataclass
class VerifyCosts:
    samples: dict[int, deque[float]] = field(default_factory=dict)  # rows -> step seconds
    median: dict[int, float] = field(default_factory=dict)  # rows -> median of samples (the guard)
    low: dict[int, float] = field(default_factory=dict)  # rows -> lowest of samples (as timed)
    live: set[int] = field(default_factory=set)  # sizes measured by steps of this process
    # Per size but 1, per sample: the plain step's price when it was timed (None: timed before
    # any step of a reply; the first plain step's is taken, add_timed), and the tokens of text
    # before its reply (None: not known); the lowest sample's three: (low, plain, text).
    _beside: dict[int, deque[float | None]] = field(default_factory=dict)
    _texts: dict[int, deque[int | None]] = field(default_factory=dict)
    _lowest: dict[int, tuple[float, float | None, int | None]] = field(default_factory=dict)
    _timed_plain: bool = False  # the plain price is a timing outside a reply (a first use's)
    text: int = 0  # tokens of text before this reply (note_text)
    plain_text: int | None = None  # ...before the reply whose plain steps price a plain step now
    plain_stale: bool = False  # that text is over TEXT_JUMP tokens away from this reply's
    _prices: dict[int, float] | None = None  # each size's price now (cache)
    _sizes: list[int] | None = None  # the sizes in `low`, sorted (cache: a new size is rare)
    _arrays: tuple[np.ndarray, np.ndarray] | None = None  # the prices as sorted arrays (cache)
    _curve: np.ndarray | None = field(default=None, compare=False, repr=False)  # costs() while prices hold

    def note_text(self, tokens: int) -> None:
        """A reply begins after `tokens` of text: a plain price timed after a text over TEXT_JUMP
        tokens longer or shorter is stale until this reply's first plain step replaces it."""
        if tokens != self.text:
            self.text = tokens
            self._changed()  # (a size grows by its rows only past a jump in the text)
        self.plain_stale = self.plain_text is not None and abs(tokens - self.plain_text) > TEXT_JUMP

    def add(self, n_rows: int, seconds: float) -> None:
        """A step of a reply that verified n_rows (or a price from the cost cache)."""
        if n_rows == 1 and self.plain_stale:  # the first plain step of this text prices it alone
            self.plain_stale = False
            self.samples[1].clear()
        if n_rows == 1 and self._timed_plain:  # a reply's first plain step after a first use's timing
            self._timed_plain = False
            self.samples[1].clear()
            for n, beside in self._beside.items():
                for i, then in enumerate(beside):
                    beside[i] = seconds if then is None else then
                self._lowest[n] = self._lowest_of(n)
            self._changed()
        self._add(n_rows, seconds, None if self._timed_plain else self.low.get(1))

    def add_timed(self, timed: dict[int, float]) -> None:
        """Batches timed outside a reply (Engine.calibrate, a first reply's timing): priced beside
        the plain step's price now; on a first use, beside the reply's first plain step (the plain
        batch timed with them is the plain price until then: timed batches lack a step's own work)."""
        plain = None if self._timed_plain else self.low.get(1)
        for n, seconds in sorted(timed.items()):
            if n != 1:
                self._add(n, seconds, plain)
            elif 1 not in self.low:
                self._add(1, seconds, None)
                self._timed_plain = True

    def _add(self, n_rows: int, seconds: float, plain_s: float | None) -> None:
        if n_rows not in self.low:
            self._sizes = None
        samples = self.samples.setdefault(n_rows, deque(maxlen=COST_SAMPLES))
        samples.append(seconds)
        self.median[n_rows] = statistics.median(samples)
        low = min(samples)
        if n_rows == 1:
            self.plain_text = self.text or None  # (0: no reply yet, a calibration)
            if self.low.get(1) != low:  # every size's price moves with the plain step's
                self.low[1] = low
                self._changed()
            return
        self._beside.setdefault(n_rows, deque(maxlen=COST_SAMPLES)).append(plain_s)
        self._texts.setdefault(n_rows, deque(maxlen=COST_SAMPLES)).append(self.text or None)
        lowest = self._lowest_of(n_rows)
        if self._lowest.get(n_rows) != lowest:  # (most steps leave it as it was)
            self.low[n_rows], self._lowest[n_rows] = lowest[0], lowest
            self._changed()

    def _lowest_of(self, n_rows: int) -> tuple[float, float | None, int | None]:
        """A size's lowest timing, the plain step's price beside it and the text it followed."""
        samples = self.samples[n_rows]
        i = min(range(len(samples)), key=samples.__getitem__)
        return samples[i], self._beside[n_rows][i], self._texts[n_rows][i]

    def _changed(self) -> None:
        self._prices = self._arrays = self._curve = None

    def prices(self) -> dict[int, float]:
        """Each measured size's price now: its lowest timing, moved as the plain step's price moved
        since (a step costs more as the text grows): in proportion; where the text has grown over
        TEXT_JUMP tokens since and the plain step over GROWTH_MIN with it, by GROWTH_EXPONENT of its
        rows if that is dearer (a plain price moved by anything else, Gemma 3 270M's barely growing
        with the text, is not multiplied)."""
        if self._prices is not None:
            return self._prices
        prices = dict(self.low)
        plain = self.low.get(1)
        if plain is not None:
            for n, (low, then, text) in self._lowest.items():
                if then is not None and then != plain:
                    prices[n] = low * (plain / then)
                    if text is not None and self.text - text > TEXT_JUMP and plain > then * (1 + GROWTH_MIN):
                        prices[n] = max(prices[n], low + n**GROWTH_EXPONENT * (plain - then))
        self._prices = prices
        return prices

    @property
    def plain_s(self) -> float | None:
        """A plain step as usually timed (the median), None until one is."""
        return self.median.get(1)

    def usual(self, n_rows: int) -> float | None:
        """What an n_rows step usually costs: the median of its timings, once trusted."""
        return self.median[n_rows] if len(self.samples.get(n_rows, ())) >= TRUSTED_SAMPLES else None

    @property
    def plain_tokens_per_s(self) -> float | None:
        """Plain decoding's speed on this machine now: one token per 1-row step, as measured."""
        s = self.median.get(1)
        return 1.0 / s if s else None

    def untimed(self, sizes: Iterable[int]) -> list[int]:
        """Those of these sizes with no timing yet (none in this process, none from the cache)."""
        return [n for n in sizes if n not in self.low]

    def first_reply_sizes(self, largest: int, max_tokens: int) -> list[int]:
        """FIRST_REPLY_SIZES up to `largest` rows not timed, where nothing beyond a plain step is
        timed and the reply may run long enough to repay the timing (FIRST_REPLY_MIN_TOKENS)."""
        if max_tokens < FIRST_REPLY_MIN_TOKENS or any(n > 1 for n in self.low):
            return []
        return self.untimed(n for n in FIRST_REPLY_SIZES if n <= largest)

    def cost(self, n_rows: int) -> float:
        """Seconds for a step that verifies n_rows. Small batches are far from linear on real
        hardware, so below the largest size measured nothing assumes a shape: linear between
        measured sizes, no cheaper than the smallest known below it."""
        if not self.low:
            return 1.0 + PRIOR_SLOPE * (n_rows - 1)
        measured = self.prices()
        if n_rows in measured:
            return measured[n_rows]
        sizes = self._sizes
        if sizes is None:
            sizes = self._sizes = sorted(measured)
        i = bisect.bisect_left(sizes, n_rows)  # sizes[i - 1] < n_rows < sizes[i]
        if 0 < i < len(sizes):
            lo, hi = sizes[i - 1], sizes[i]
            w = (n_rows - lo) / (hi - lo)
            return measured[lo] * (1 - w) + measured[hi] * w
        if i == 0:
            return measured[sizes[0]] / (1 + PRIOR_SLOPE * (sizes[0] - n_rows))
        top = sizes[-1]
        return measured[top] + self.row_cost_beyond() * (n_rows - top)

    def row_cost_beyond(self) -> float:
        """Seconds one more row adds beyond the largest size measured: past a few rows a CPU batch
        costs a fixed part (reading the weights) plus a part per row, so the slope between the
        largest size and one at most half as large (SLOPE_MIN_ROWS or more) says it, at least
        SLOPE_FLOOR of a row's mean cost at the largest size (a slope from two noisy timings may
        come out too low); with no such pair, PRIOR_SLOPE of the largest batch a row."""
        measured = self.prices()
        top = max(measured)
        top_s = measured[top]
        lower = [n for n in measured if SLOPE_MIN_ROWS <= n <= top // 2]
        if not lower:
            return PRIOR_SLOPE * top_s
        base = max(lower)
        slope = (top_s - measured[base]) / (top - base)
        return max(slope, SLOPE_FLOOR * top_s / top)

    def costs(self, n_max: int) -> np.ndarray:
        """cost(n) for n = 0..n_max in one go (index 0 unused): the hot path asks for a whole
        range every step, where a Python loop over it cost ~0.4 ms a step. Kept until `low`
        changes, at least _CURVE_ROWS long (read-only: the controller asks for it 3-5 times a
        step, for different lengths)."""
        cached = self._curve
        if cached is not None and len(cached) > n_max:
            return cached[: n_max + 1]
        ns = np.arange(max(n_max, _CURVE_ROWS) + 1, dtype=np.float64)
        if not self.low:
            prior: np.ndarray = 1.0 + PRIOR_SLOPE * (ns[: n_max + 1] - 1)
            return prior
        if self._arrays is None:
            prices = self.prices()
            sizes = np.array(sorted(prices), dtype=np.float64)
            self._arrays = sizes, np.array([prices[int(n)] for n in sizes])
        sizes, costs = self._arrays
        out: np.ndarray = np.interp(ns, sizes, costs)
        lo, hi = sizes[0], sizes[-1]
        below, above = ns < lo, ns > hi
        out[below] = costs[0] / (1 + PRIOR_SLOPE * (lo - ns[below]))
        out[above] = costs[-1] + self.row_cost_beyond() * (ns[above] - hi)
        out.setflags(write=False)
        self._curve = out
        return out[: n_max + 1]

    def explore_limit(self) -> int:
        """The longest draft worth its batch's guess: an unmeasured size is a guess, and a guess
        at 64 rows can cost 20 plain steps on a CPU, so at most EXPLORE_FACTOR times the largest
        size measured, EXPLORE_FACTOR_SLOPE times where what one more row costs is measured."""
        if not self.median:
            return 1
        top = max(self.median)
        slope_known = any(SLOPE_MIN_ROWS <= n <= top // 2 for n in self.median)
        return (EXPLORE_FACTOR_SLOPE if slope_known else EXPLORE_FACTOR) * top

    def export(self) -> dict[str, float]:
        """The prices now (seed() adds the plain step's first: each keeps its ratio to it)."""
        return {str(n): s for n, s in sorted(self.prices().items())}

    def seed(self, step_s: dict[str, float], plain_text: int | None = None) -> None:
        """A cost cache's prices, its plain step's timed after plain_text tokens (None: not known)."""
        self.text = plain_text or 0
        for n, s in sorted(step_s.items(), key=lambda item: int(item[0])):
            self.add(int(n), float(s))
        self.plain_text = plain_text
