"""Choose the draft length each step to maximise expected tokens per second.

With per-token acceptance probability a, a draft of k tokens yields on average
E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens (the accepted prefix plus the
target's own token) and costs T(k) = k * t_draft + t_verify(k + 1). k = 0 is plain decoding.
Both a and the costs are measured as the run goes. When no k > 0 beats plain decoding,
plain decoding it is, with a short probe now and then so the estimates can recover: that
keeps speculation from ever running much slower than having it off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_EMA = 0.85  # weight of history in every running estimate
_PRIOR_ACCEPT = 0.5
_PRIOR_WEIGHT = 2.0
_PRIOR_SLOPE = 0.15  # extra cost of one more row in a verify batch, relative to a 1-row batch
_PRIOR_DRAFT_COST = 0.2  # a draft model's decode, relative to the target's, until measured
_PROBE_FIRST = 8
_PROBE_MAX = 64


@dataclass
class _Acceptance:
    accepted: float = 0.0
    trials: float = 0.0

    def rate(self) -> float:
        return (self.accepted + _PRIOR_ACCEPT * _PRIOR_WEIGHT) / (self.trials + _PRIOR_WEIGHT)


@dataclass
class DraftLengthController:
    k_max: int
    adaptive: bool = True
    draft_costs_time: bool = False  # a draft model costs a decode per token; n-gram lookup ~nothing
    _acceptance: dict[int, _Acceptance] = field(default_factory=dict)
    _verify_s: dict[int, float] = field(default_factory=dict)  # batch size -> EMA seconds
    _draft_token_s: float | None = None
    _plain_steps: int = 0
    _probe_interval: int = _PROBE_FIRST

    # -- estimates ---------------------------------------------------------------------------

    def acceptance(self, bucket: int = 0) -> float:
        return self._acceptance.setdefault(bucket, _Acceptance()).rate()

    def verify_cost(self, n_rows: int) -> float:
        measured = self._verify_s
        if n_rows in measured:
            return measured[n_rows]
        if len(measured) >= 2:
            # Least squares line through the measured batch sizes.
            xs, ys = list(measured), list(measured.values())
            n = len(xs)
            mx, my = sum(xs) / n, sum(ys) / n
            sxx = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
            slope = max(slope, 0.0)
            return max(my + slope * (n_rows - mx), min(ys))
        if measured:
            (b, t), = measured.items()
            base = t / (1 + _PRIOR_SLOPE * (b - 1))
        else:
            base = 1.0
        return base * (1 + _PRIOR_SLOPE * (n_rows - 1))

    def draft_cost(self) -> float:
        if not self.draft_costs_time:
            return 0.0
        if self._draft_token_s is not None:
            return self._draft_token_s
        return _PRIOR_DRAFT_COST * self.verify_cost(1)

    def expected_rate(self, k: int, bucket: int = 0) -> float:
        """Expected tokens per second of a step that drafts k tokens."""
        a = min(self.acceptance(bucket), 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        return tokens / (k * self.draft_cost() + self.verify_cost(k + 1))

    # -- decisions ---------------------------------------------------------------------------

    def choose(self, available: int, bucket: int = 0) -> int:
        """The draft length for this step, given that the drafter can offer `available` tokens."""
        available = min(available, self.k_max)
        if available <= 0:
            return 0
        if not self.adaptive:
            return available
        best_k = max(range(available + 1), key=lambda k: self.expected_rate(k, bucket))
        if best_k > 0:
            self._plain_steps = 0
            return best_k
        self._plain_steps += 1
        if self._plain_steps >= self._probe_interval:
            self._plain_steps = 0
            self._probe_interval = min(self._probe_interval * 2, _PROBE_MAX)
            return min(available, 2)
        return 0

    def record(
        self,
        bucket: int,
        n_drafted: int,
        n_accepted: int,
        verify_s: float,
        draft_token_s: list[float] | None = None,
    ) -> None:
        n_rows = n_drafted + 1
        old = self._verify_s.get(n_rows)
        self._verify_s[n_rows] = verify_s if old is None else _EMA * old + (1 - _EMA) * verify_s
        for t in draft_token_s or ():
            d = self._draft_token_s
            self._draft_token_s = t if d is None else _EMA * d + (1 - _EMA) * t
        if n_drafted:
            acc = self._acceptance.setdefault(bucket, _Acceptance())
            # Geometric model: every accepted token is a success; the first rejection a failure.
            acc.accepted = _EMA * acc.accepted + n_accepted
            acc.trials = _EMA * acc.trials + n_accepted + (1 if n_accepted < n_drafted else 0)
            if self.expected_rate(n_drafted, bucket) > self.expected_rate(0, bucket):
                self._probe_interval = _PROBE_FIRST
