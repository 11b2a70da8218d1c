"""How far a copy runs: the survival of text being copied, and a copy resumed after an edit.

A copy whose context matched L tokens (its age) departs from its source at its next token with
probability 1 - ((L + 1) / (L + 2)) ** alpha (a Lindy law: the longer it has run, the longer it
goes on; alpha 1 is the rule of succession). alpha is learned from where copies departed, a
Gamma posterior (Departures): carried over replies to price a copy's drafts, and this reply's own
to bound what its drafts risk. A copy that an edit broke goes on where its source went on
(CopyTrail). Runs behind each constant: docs/design-engine.md ("How far a copy runs").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.kinds import COPY_KINDS, MEMORY_KINDS, DrafterKind
from engine.reply_budget import RAMP_FIRST

DEPART_PRIOR = 1.0  # the prior's breaks...
DEPART_PRIOR_EXPOSURE = 2.0  # ...over this much log-length agreed (optimistic)
DEPART_CARRIED = 2.0  # what earlier replies taught weighs at most this many breaks in a new reply...
DEPART_CARRIED_ALPHA = 1.0  # ...and prices its copies at worst by the rule of succession (alpha 1)
RISK_DOUBT = 0.07  # a copy's tokens that agree with probability 1 - this are sure (risk, ramp)...
RISK_PRIOR = 2.0  # ...by this reply's copies alone, from this many breaks...
RISK_PRIOR_EXPOSURE = 2.0  # ...over this much log-length
MATCH_RUN = 0.5  # a copy matched L tokens may risk MATCH_RUN x L before the reply saved anything...
MATCH_MIN = 24  # ...where L is this or more and no draft of the reply was rejected
RESUME_SLACK = 8  # a resumed copy's source is where the copy's went on, give or take this...
RESUME_WITHIN = 32  # ...within this many tokens of where the copy last agreed...
RESUME_MIN = 2  # ...matching this many tokens or more (fewer: a common token)...
RESUME_AGE = 32  # ...of a copy that ran this far...
RESUME_BREAKS = 1  # ...while the reply's copies broke at most this often


@dataclass
class Departures:
    """A Gamma(breaks, exposure) posterior over alpha. An agreeing token at age r adds
    log((r + 2) / (r + 1)) of exposure, a departure one break: the survival of a run's log-length
    is exponential in alpha, so the posterior stays a Gamma."""

    breaks: float = DEPART_PRIOR
    exposure: float = DEPART_PRIOR_EXPOSURE

    def survival(self, age: int, n: int) -> np.ndarray:
        """S(j) for j = 1..n: the chance that a copy of age `age` agrees over its next j tokens,
        alpha integrated out (the Gamma's Laplace transform)."""
        x = np.log1p(np.arange(1, n + 1, dtype=np.float64) / (age + 1))
        survival: np.ndarray = (self.exposure / (self.exposure + x)) ** self.breaks
        return survival

    def sure_run(self, age: int, doubt: float) -> float:
        """How many more tokens a copy of age `age` agrees over with probability 1 - doubt."""
        x = self.exposure * ((1 - doubt) ** (-1 / self.breaks) - 1)
        return (age + 1) * math.expm1(x)

    def learn(self, age: int, n_drafted: int, n_accepted: int) -> None:
        self.exposure += math.log1p(n_accepted / (age + 1))
        if n_accepted < n_drafted:
            self.breaks += 1

    def carried(self) -> Departures:
        """What a new reply starts from: this evidence, weighing at most DEPART_CARRIED breaks, its
        alpha at most DEPART_CARRIED_ALPHA (a reply's own breaks may raise it further): earlier work
        whose copies kept breaking (mixed work) says little of how far this reply's copy runs."""
        scale = min(1.0, DEPART_CARRIED / self.breaks) if self.breaks > 0 else 1.0
        breaks = self.breaks * scale
        return Departures(breaks, max(self.exposure * scale, breaks / DEPART_CARRIED_ALPHA))


def _reply_prior() -> Departures:
    return Departures(RISK_PRIOR, RISK_PRIOR_EXPOSURE)


@dataclass
class CopySurvival:
    """How far this step's offer runs, if it is a copy: carried evidence prices it, the reply's
    own bounds what it risks."""

    departures: Departures = field(default_factory=Departures)  # how far copies run here
    reply: Departures = field(default_factory=_reply_prior)  # ...in this reply's own copies
    match_len: int = 0  # this step's offer: how many tokens of context matched
    broke: bool = False  # a draft of this reply was rejected (a copy here departs from its source)
    forgiven: float = 0.0  # this reply's copy breaks its copies have since agreed past (see `observe`)
    _agreeing: int = 0  # undrafted copy offers right at their first token in a row since a break
    stuck: int = 0  # undrafted copy offers right at their first token in a row (a copy held back)

    def begin_reply(self) -> None:
        self.departures = self.departures.carried()
        self.reply = _reply_prior()
        self.broke = False
        self.forgiven = 0.0
        self._agreeing = 0
        self.stuck = 0

    @property
    def reply_breaks(self) -> float:
        """This reply's copies' departures so far (beyond the prior's)."""
        return self.reply.breaks - RISK_PRIOR

    @property
    def risk_breaks(self) -> float:
        """The breaks the risk limit halves a reply's allowance for: those not agreed past since."""
        return self.reply_breaks - self.forgiven

    def observe(self, kind: int, accepted: bool) -> None:
        """A copy's offer not drafted, its first token checked against the emitted one. A copy
        that agrees at RAMP_FIRST plain steps in a row after its reply's copies broke has shown
        it goes on: one of those breaks no longer halves what a draft may risk. Else a reply in
        the red after one early break (a chat reply that echoes the prompt's last line, then
        copies on) may draft a token at most, which a CPU's second row never repays, to its end."""
        if self.copying(kind):
            self.stuck = self.stuck + 1 if accepted else 0
        if not self.copying(kind) or self.reply_breaks <= self.forgiven:
            return
        self._agreeing = self._agreeing + 1 if accepted else 0
        if self._agreeing >= RAMP_FIRST:
            self.forgiven, self._agreeing = self.forgiven + 1, 0

    def copying(self, kind: int) -> bool:
        return kind in COPY_KINDS and self.match_len > 0

    def learn(self, kind: int, n_drafted: int, n_accepted: int) -> None:
        if n_accepted < n_drafted:
            self.broke = True
        self._agreeing = self.stuck = 0
        if self.copying(kind):
            self.departures.learn(self.match_len, n_drafted, n_accepted)
            self.reply.learn(self.match_len, n_drafted, n_accepted)

    def first_draft(self, kind: int, k_max: int) -> int:
        """The draft a reply may risk before its drafts have saved anything: RAMP_FIRST tokens,
        or for a copy, as far as its matched context says it runs (MATCH_RUN)."""
        if kind not in COPY_KINDS or self.match_len < MATCH_MIN or self.broke:
            return RAMP_FIRST
        return max(RAMP_FIRST, min(k_max, int(MATCH_RUN * self.match_len)))

    def sure_run(self, kind: int, k_max: int) -> int:
        """How far this step's copy surely agrees by this reply's copies (RISK_DOUBT); 0 for
        other offers."""
        if not self.copying(kind):
            return 0
        return int(min(k_max, self.reply.sure_run(self.match_len, RISK_DOUBT)))

    def survival(self, kind: int, n: int) -> np.ndarray | None:
        """A copy's chance of agreeing over its next 1..n tokens; None for other offers (priced
        by their kind's acceptance)."""
        if not self.copying(kind) or n <= 0:
            return None
        return self.departures.survival(self.match_len, n)

    def export(self) -> list[float]:
        return [round(self.departures.breaks, 4), round(self.departures.exposure, 4)]

    def seed(self, data: object) -> None:
        if (
            isinstance(data, list)
            and len(data) == 2
            and all(isinstance(x, int | float) and x > 0 for x in data)
        ):
            self.departures = Departures(float(data[0]), float(data[1])).carried()


@dataclass
class CopyTrail:
    """The reply's copy at its last offer: where its continuation started in the text, the
    text's length then, and its age; a later short match where that copy's source went on is
    the copy resumed (RESUME_*)."""

    at: int = 0
    end: int = 0
    age: int = 0
    held: bool = False  # the reply has copied

    def clear(self) -> None:
        self.held = False

    def resume(
        self, kind: DrafterKind, match_len: int, at: int, n_ctx: int, breaks: int
    ) -> tuple[DrafterKind, int]:
        """An offer's kind and match length, a resumed copy's as a copy's at its age."""
        if kind in COPY_KINDS or match_len < RESUME_MIN or not self.held:
            return kind, match_len
        advanced = n_ctx - self.end
        if (
            self.age >= RESUME_AGE
            and breaks <= RESUME_BREAKS
            and advanced <= RESUME_WITHIN
            and self.at - RESUME_SLACK <= at <= self.at + advanced + RESUME_SLACK
        ):
            kind = DrafterKind.MEMORY_COPY if kind in MEMORY_KINDS else DrafterKind.COPY
            match_len = self.age + max(0, at - self.at)
        return kind, match_len

    def offered(self, kind: DrafterKind, at: int, n_ctx: int, match_len: int) -> None:
        if kind in COPY_KINDS:
            self.at, self.end, self.age, self.held = at, n_ctx, match_len, True

    def agreed(self, n_accepted: int) -> None:
        """A copy's draft agreed this far: its source has reached that far too."""
        if self.held:
            self.at, self.end, self.age = self.at + n_accepted, self.end + n_accepted, self.age + n_accepted
