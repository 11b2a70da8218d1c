"""Probing and exploring: what the controller drafts besides its best guess, so estimates recover.

A kind never drafted is never judged and a batch size never drafted never timed. So every so many
plain steps an offer not chosen lately is drafted short (a probe; the interval doubles while probes
fail), and every EXPLORE_EVERY drafting steps a draft longer than the best known times a larger
batch. Runs behind each constant: docs/design-engine.md ("It keeps exploring").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.kinds import Choice, DrafterKind

EXPLORE_EVERY = 8  # speculative steps between tries of a longer draft than the best known...
EXPLORE_LOSS = 0.1  # ...which may be priced this much below the best (what a try may cost a step)
PROBE_FIRST = 8  # plain steps (chosen by the model) before a short probe...
PROBE_MAX = 64  # ...doubling while probes keep failing
COST_PROBE_STEPS = 32  # an observed free offer usually right yet not drafted this long gets a probe...
COST_PROBE_ACCEPTANCE = 0.5  # ...where it is observed right at least this often


@dataclass(frozen=True)
class Priced:
    """An offer's best length within its limit: its rate, and what exploring may reach."""

    rate: float
    k: int
    kind: DrafterKind
    limit: int  # the least of available, explore, ramp, risk and (short matches) timed sizes
    reach: int  # ...without the timed sizes
    rates: np.ndarray


@dataclass
class Probes:
    observes: bool = False  # free offers not drafted are checked against the emitted token
    plain_steps: int = 0  # plain steps since a draft (of the draft model, where there is one)
    interval: int = PROBE_FIRST  # plain steps before a probe (doubling while probes fail)
    spec_steps: int = 0
    probing: bool = False  # the last choice was a probe

    def counts_plain(self) -> bool:
        """A plain step (or the text's draft beside a draft model): is a probe due?"""
        self.plain_steps += 1
        return self.plain_steps >= self.interval

    def probed(self) -> None:
        self.plain_steps = 0
        self.interval = min(self.interval * 2, PROBE_MAX)
        self.probing = True

    def cost_probe_due(self, beside_model: bool) -> bool:
        """An observed free offer not drafted for COST_PROBE_STEPS plain steps (none beside a
        draft model, which is probed instead)."""
        return self.observes and not beside_model and self.plain_steps >= COST_PROBE_STEPS

    def explore(self, best: Priced, costly: bool) -> Choice:
        """A drafting step: the best length, or in one step of EXPLORE_EVERY a longer one, to time
        its batch. Twice the best where the tokens cost decodes (costly) or the batch is a guess
        past the sizes timed; else the longest priced within EXPLORE_LOSS of the best where that
        is longer (doubling stops short of a CPU's tiles)."""
        self.spec_steps += 1
        if best.k >= best.reach or self.spec_steps % EXPLORE_EVERY:
            return Choice(best.k, best.kind)
        if costly or best.reach > best.limit:
            return Choice(min(best.reach, 2 * best.k), best.kind)
        near = np.flatnonzero(best.rates[best.k : best.limit + 1] >= (1 - EXPLORE_LOSS) * best.rates[best.k])
        return Choice(max(min(best.limit, 2 * best.k), best.k + int(near[-1]) if near.size else 0), best.kind)
