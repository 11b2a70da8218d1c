"""Choose the draft length each step to maximise expected tokens per second.

With per-token acceptance probability a, a draft of k tokens yields on average
E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens (the accepted prefix plus the
target's own token) and costs T(k) = k * t_draft + t_verify(k + 1). k = 0 is plain decoding.
Both a and the costs are measured as the run goes. When no k > 0 beats plain decoding,
plain decoding it is, with a short probe now and then so the estimates can recover: that
keeps speculation from ever running much slower than having it off.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

_EMA = 0.85  # weight of history in every running estimate
# Before anything is measured: a draft model is usually right; an n-gram match is as good as it
# is long (bucket = NgramDrafter.bucket(match length)). Optimistic on purpose: one rejected
# draft corrects the estimate, while a pessimistic prior would never try.
_PRIOR_ACCEPT = {0: 0.7, 1: 0.3, 2: 0.5, 3: 0.7, 4: 0.9}
_PRIOR_WEIGHT = 2.0
_PRIOR_SLOPE = 0.05  # extra cost of one more unmeasured row in a verify batch, relative
_PRIOR_DRAFT_COST = 0.2  # a draft model's decode, relative to the target's, until measured
_PROBE_FIRST = 8
_PROBE_MAX = 64
# A draft model must promise at least this much over plain decoding, at 100% acceptance, before
# it is run: its estimates leave out catching up on the tokens it missed (the whole prompt, the
# first time), and acceptance is never perfect. Measured: a pair promising 1.17x at 100% ran
# 0.82x plain (F16 Gemma 3 270M target, Q4_K_M draft, 2 AVX-512 cores).
_MIN_GAIN_DRAFT_MODEL = 1.3
_COST_SAMPLES = 5  # verify costs: the median of the last few timings of each batch size
_EXPLORE_EVERY = 8  # speculative steps between tries of a longer draft than the best known


@dataclass
class _Acceptance:
    prior: float
    accepted: float = 0.0
    trials: float = 0.0

    def rate(self) -> float:
        return (self.accepted + self.prior * _PRIOR_WEIGHT) / (self.trials + _PRIOR_WEIGHT)


@dataclass
class DraftLengthController:
    k_max: int
    adaptive: bool = True
    draft_costs_time: bool = False  # a draft model costs a decode per token; n-gram lookup ~nothing
    _acceptance: dict[int, _Acceptance] = field(default_factory=dict)
    _verify_samples: dict[int, deque[float]] = field(default_factory=dict)  # batch size -> seconds
    _verify_s: dict[int, float] = field(default_factory=dict)  # batch size -> median of samples
    _n_spec_steps: int = 0
    # A draft decode's cost relative to a 1-row target decode: a ratio survives the machine
    # getting busier or quieter (both slow down alike) where two absolute timings would not.
    _draft_ratio: float | None = None
    _plain_steps: int = 0
    _probe_interval: int = _PROBE_FIRST
    _calibration: tuple[dict[int, float], float | None] = ({}, None)
    _snapshot: DraftLengthController | None = None  # the calibration alone, never updated
    _never_pays: bool = False  # calibrated: no draft length can beat plain decoding

    # -- estimates ---------------------------------------------------------------------------

    def acceptance(self, bucket: int = 0) -> float:
        return self._bucket(bucket).rate()

    def _bucket(self, bucket: int) -> _Acceptance:
        acc = self._acceptance.get(bucket)
        if acc is None:
            acc = self._acceptance[bucket] = _Acceptance(_PRIOR_ACCEPT.get(bucket, 0.5))
        return acc

    def verify_cost(self, n_rows: int) -> float:
        """Seconds for a verify batch of n_rows, from the batch sizes measured so far.

        Between measured sizes: linear interpolation. Beyond the largest: a mild slope, so
        the controller tries a little longer drafts and measures them. The cost is far from
        linear on real hardware (on a 2-core CPU with Gemma 3 270M a 2-row batch costs 2.7x a
        1-row one, and 64 rows cost the same as 2), so nothing here assumes a shape.
        """
        measured = self._verify_s
        if n_rows in measured:
            return measured[n_rows]
        if not measured:
            return 1.0 + _PRIOR_SLOPE * (n_rows - 1)
        sizes = sorted(measured)
        below = [b for b in sizes if b < n_rows]
        above = [b for b in sizes if b > n_rows]
        if below and above:
            lo, hi = below[-1], above[0]
            w = (n_rows - lo) / (hi - lo)
            return measured[lo] * (1 - w) + measured[hi] * w
        if above:  # smaller than anything measured: no cheaper than the smallest known
            return measured[above[0]] / (1 + _PRIOR_SLOPE * (above[0] - n_rows))
        top = below[-1]
        return measured[top] * (1 + _PRIOR_SLOPE * (n_rows - top))

    def draft_cost(self) -> float:
        if not self.draft_costs_time:
            return 0.0
        ratio = self._draft_ratio if self._draft_ratio is not None else _PRIOR_DRAFT_COST
        return ratio * self.verify_cost(1)

    def expected_rate(self, k: int, bucket: int = 0) -> float:
        """Expected tokens per second of a step that drafts k tokens."""
        a = min(self.acceptance(bucket), 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        return tokens / (k * self.draft_cost() + self.verify_cost(k + 1))

    # -- decisions ---------------------------------------------------------------------------

    @property
    def min_gain(self) -> float:
        return _MIN_GAIN_DRAFT_MODEL if self.draft_costs_time else 1.0

    @property
    def never_pays(self) -> bool:
        """Calibrated: a draft model that no draft length can make beat plain decoding."""
        return self._never_pays

    def could_pay(self, available: int) -> bool:
        """Would some draft length beat plain decoding if every drafted token were accepted?

        When not even that holds (a draft model nearly as slow as its target, as on a 2-core
        CPU), probing is pointless and only costs time: the draft model would have to catch
        up on every token it missed.
        """
        # Judged on the calibration, measured in one go: live timings of 1-row batches drift
        # with the machine's load while those of longer batches, rarely run, would not.
        ref = self._snapshot or self
        k = self._best_case_length(available)
        return ref._best_case_rate(k) > self.min_gain / ref.verify_cost(1)

    def _best_case_rate(self, k: int) -> float:
        """Tokens per second of a k-token draft if every drafted token were accepted."""
        return (k + 1) / (k * self.draft_cost() + self.verify_cost(k + 1))

    def _best_case_length(self, available: int) -> int:
        ref = self._snapshot or self
        return max(range(1, max(1, min(available, self.k_max)) + 1), key=ref._best_case_rate)

    def choose(self, available: int, bucket: int = 0) -> int:
        """The draft length for this step, given that the drafter can offer `available` tokens."""
        available = min(available, self.k_max)
        if available <= 0:
            return 0
        if not self.adaptive:
            return available
        if self._never_pays:
            return 0
        best_k = max(range(1, available + 1), key=lambda k: self.expected_rate(k, bucket))
        if self.expected_rate(best_k, bucket) > self.expected_rate(0, bucket) * self.min_gain:
            self._plain_steps = 0
            self._n_spec_steps += 1
            if best_k < available and self._n_spec_steps % _EXPLORE_EVERY == 0:
                # Timings are noisy (one slow sample can make a batch size look too dear to
                # ever try again): now and then try a longer draft and let its cost be measured.
                return min(available, 2 * best_k)
            return best_k
        self._plain_steps += 1
        if self._plain_steps >= self._probe_interval and self.could_pay(available):
            self._plain_steps = 0
            self._probe_interval = min(self._probe_interval * 2, _PROBE_MAX)
            # A draft model is probed at the one length that could pay; n-gram drafts cost
            # nothing to make, so a short probe is the cheap way to re-measure acceptance.
            return self._best_case_length(available) if self.draft_costs_time else min(available, 2)
        return 0

    def calibrate(self, verify_s: dict[int, float], draft_token_s: float | None) -> None:
        """Start from measured costs instead of priors (Engine measures them when a draft is set)."""
        for n_rows, seconds in verify_s.items():
            self._add_verify_sample(n_rows, seconds)
        if draft_token_s is not None:
            self._draft_ratio = draft_token_s / self.verify_cost(1)
        self._calibration = (dict(verify_s), draft_token_s)
        snapshot = DraftLengthController(self.k_max, self.adaptive, self.draft_costs_time)
        snapshot._verify_s = dict(self._verify_s)
        snapshot._draft_ratio = self._draft_ratio
        self._snapshot = snapshot
        self._never_pays = self.draft_costs_time and not self.could_pay(self.k_max)

    def fresh(self) -> DraftLengthController:
        """A controller with this one's calibration and nothing learned since (fresh bench runs)."""
        new = DraftLengthController(self.k_max, self.adaptive, self.draft_costs_time)
        new.calibrate(*self._calibration)
        return new

    def _add_verify_sample(self, n_rows: int, seconds: float) -> None:
        samples = self._verify_samples.setdefault(n_rows, deque(maxlen=_COST_SAMPLES))
        samples.append(seconds)
        self._verify_s[n_rows] = statistics.median(samples)

    def record(
        self,
        bucket: int,
        n_drafted: int,
        n_accepted: int,
        verify_s: float,
        draft_token_s: list[float] | None = None,
    ) -> None:
        self._add_verify_sample(n_drafted + 1, verify_s)
        for t in draft_token_s or ():
            ratio = t / self.verify_cost(1)
            r = self._draft_ratio
            self._draft_ratio = ratio if r is None else _EMA * r + (1 - _EMA) * ratio
        if n_drafted:
            acc = self._bucket(bucket)
            # Geometric model: every accepted token is a success; the first rejection a failure.
            acc.accepted = _EMA * acc.accepted + n_accepted
            acc.trials = _EMA * acc.trials + n_accepted + (1 if n_accepted < n_drafted else 0)
            if self.expected_rate(n_drafted, bucket) > self.expected_rate(0, bucket):
                self._probe_interval = _PROBE_FIRST
