"""How often each kind of draft is accepted: a Beta posterior per DrafterKind (engine.kinds).

A drafted token is a trial; under the geometric model every accepted token is a success and the
first rejected one a failure. History is weighted down by EMA per trial, so a bad patch fades.
Beside the mean (`rate`), a cautious rate prices one-off costs (certain, where savings are not)
and a hopeful one prices a draft model not yet judged. Runs behind each constant:
docs/design-engine.md ("The controller's constants").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.kinds import PRIOR_ACCEPT, DrafterKind

EMA = 0.85  # weight of history in every running estimate
PRIOR_WEIGHT = 2.0  # the prior counts as this many trials
CAUTION = 1.28  # one-off costs are judged this many sd below the estimate (10th percentile)
HOPEFUL_TRIALS = 16.0  # a rate judged on fewer tokens may be this many CAUTION sd above its mean
MAX_RATE = 0.999  # acceptance is never priced as certain (the geometric sum would not converge)
SEED_TRIALS = 2.0  # acceptance carried into a new process weighs at most this many trials...
SEED_TRIALS_DRAFT_MODEL = 16.0  # ...a draft model's more: agreement is the pair's, not the text's


@dataclass
class Acceptance:
    """One kind's evidence: accepted tokens and trials, weighted down by EMA, over a prior."""

    prior: float
    accepted: float = 0.0
    trials: float = 0.0

    def rate(self) -> float:
        return (self.accepted + self.prior * PRIOR_WEIGHT) / (self.trials + PRIOR_WEIGHT)

    def cautious_rate(self) -> float:
        """A rate this evidence is unlikely to fall short of: the Beta posterior's mean less
        CAUTION standard deviations, never below the prior where the evidence is above it.
        7 of 7 accepted: 0.93 by `rate`, 0.83 here."""
        a = self.accepted + self.prior * PRIOR_WEIGHT
        b = max(self.trials - self.accepted, 0.0) + (1 - self.prior) * PRIOR_WEIGHT
        n = a + b
        mean = a / n
        return max(min(self.prior, mean), mean - CAUTION * math.sqrt(a * b / (n * n * (n + 1))))

    def hopeful_rate(self) -> float:
        """What the rate may be on thin evidence (fewer than HOPEFUL_TRIALS tokens judged): the
        mean plus CAUTION standard deviations; the mean once judged."""
        mean = self.rate()
        if self.trials >= HOPEFUL_TRIALS:
            return mean
        a = self.accepted + self.prior * PRIOR_WEIGHT
        n = self.trials + PRIOR_WEIGHT
        b = n - a
        return min(MAX_RATE, mean + CAUTION * math.sqrt(a * b / (n * n * (n + 1))))

    def observe(self, accepted: bool) -> None:
        """An offer's first token checked against the emitted one (one trial)."""
        self.accepted = EMA * self.accepted + accepted
        self.trials = EMA * self.trials + 1

    def learn(self, n_drafted: int, n_accepted: int) -> None:
        """A draft of n_drafted tokens of which the first n_accepted were kept."""
        self.accepted = EMA * self.accepted + n_accepted
        self.trials = EMA * self.trials + n_accepted + (1 if n_accepted < n_drafted else 0)


@dataclass
class AcceptanceTable:
    """Acceptance per kind, each starting from its prior (engine.kinds.PRIOR_ACCEPT)."""

    kinds: dict[int, Acceptance] = field(default_factory=dict)

    def __getitem__(self, kind: int) -> Acceptance:
        acc = self.kinds.get(kind)
        if acc is None:
            acc = self.kinds[kind] = Acceptance(PRIOR_ACCEPT.get(kind, 0.5))
        return acc

    def rate(self, kind: int) -> float:
        return self[kind].rate()

    def export(self) -> dict[str, list[float]]:
        return {str(k): [round(a.accepted, 4), round(a.trials, 4)] for k, a in self.kinds.items()}

    def seed(self, data: dict[str, list[float]], draft_model_costs: bool) -> None:
        """A previous process's evidence, each kind weighing at most SEED_TRIALS trials (a draft
        model's, where it costs decodes, SEED_TRIALS_DRAFT_MODEL)."""
        for k, (accepted, trials) in data.items():
            acc = self[int(k)]
            model = draft_model_costs and int(k) == DrafterKind.MODEL
            cap = SEED_TRIALS_DRAFT_MODEL if model else SEED_TRIALS
            scale = min(1.0, cap / trials) if trials > 0 else 1.0
            acc.accepted, acc.trials = float(accepted) * scale, float(trials) * scale
