"""What one reply's drafts may risk: a ramp from short drafts, and a risk limit of what they saved.

A reply's first drafts are short (RAMP_FIRST tokens) until drafts are accepted whole: acceptance
carried over from other text may not hold for this one. No draft may risk, were it rejected at its
first token, more than the reply's drafts have saved so far plus what a first RAMP_FIRST-token
draft risks (a short match past the reply's first tokens, until its drafts accepted whole hold
2 tokens: a 1-token draft), so a reply that drafts cannot end much slower than plain decoding.
Short matches (an n-gram offer but a copy) are priced on this reply's evidence. Runs behind each
rule: docs/design-engine.md ("The controller's constants").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.acceptance import Acceptance
from engine.costs import VerifyCosts
from engine.kinds import COPY_KINDS, PRIOR_ACCEPT

RAMP_FIRST = 4  # a reply's first drafts risk at most this many tokens' batch...
RAMP_STRETCH = 2  # ...free drafts up to this many times as long where their batch is no dearer
SHORT_STREAK = 4  # short matches right at their first token this often in a row: the reply repeats itself
GUESS_WHOLE = 2  # a short match is a guess until the reply's drafts accepted whole hold this many tokens


@dataclass
class ReplyBudget:
    ramp: int = RAMP_FIRST  # the longest draft allowed now in this reply
    whole_tokens: int = 0  # drafted tokens in this reply's drafts that were accepted whole
    saved_s: float = 0.0  # plain time this reply's drafts have saved so far, less what they lost
    copy_drafted: bool = False  # this reply has drafted from copied text (see COPY_KINDS)
    short_streak: int = 0  # this reply's short-match offers right at their first token in a row
    drafted_kinds: set[int] = field(default_factory=set)  # the kinds this reply has drafted
    written: int = 0  # tokens this reply has written so far

    def begin_reply(self) -> None:
        self.ramp = RAMP_FIRST
        self.whole_tokens = 0
        self.copy_drafted = False
        self.drafted_kinds = set()
        self.short_streak = 0
        self.saved_s = 0.0
        self.written = 0

    def note_offer(self, short: bool, accepted: bool) -> None:
        """A short match's first token checked against the emitted one (observed or drafted)."""
        if short:
            self.short_streak = self.short_streak + 1 if accepted else 0

    def note_draft(self, kind: int, n_drafted: int, n_accepted: int, k_max: int, short: bool) -> None:
        """A draft of this reply: drafts accepted whole, RAMP_FIRST tokens' worth in all, release
        the ramp (the model's own choice of length takes over); a rejected one halves it (an edit
        in copied text rejects a draft now and then, and the copying goes on after it)."""
        self.copy_drafted = self.copy_drafted or kind in COPY_KINDS
        self.drafted_kinds.add(kind)
        self.note_offer(short, n_accepted > 0)
        if n_accepted == n_drafted:
            self.whole_tokens += n_drafted
            if self.whole_tokens >= RAMP_FIRST:
                self.ramp = max(k_max, 1)
        else:
            self.ramp = max(RAMP_FIRST, n_accepted + 1, self.ramp // 2)

    @property
    def repeating(self) -> bool:
        """The reply repeats itself: its short matches explore past the sizes timed, as a copy's."""
        return self.short_streak >= SHORT_STREAK

    def short_match_rate(self, kind: int, acc: Acceptance) -> float:
        """A short match's acceptance as priced: until this reply has drafted its kind, or copied,
        no more than its prior (other text says little of short matches in fresh text)."""
        if not (kind in self.drafted_kinds or self.copy_drafted):
            return min(acc.rate(), PRIOR_ACCEPT[kind])
        return acc.rate()

    def ramp_limit(self, costs: VerifyCosts, k_max: int, floor: int, free: bool) -> int:
        """The longest draft the ramp allows now (at least `floor`: a copy's first draft or sure
        run). For free drafts the ramp is a cost: up to RAMP_STRETCH times as long, any draft
        whose batch is priced no dearer (CPU kernels work in tiles)."""
        ramp = max(self.ramp, floor)
        if ramp >= k_max or not free:
            return ramp
        rows = costs.costs(min(RAMP_STRETCH * ramp, k_max) + 1)  # by rows: k tokens are k + 1
        within = np.flatnonzero(rows[ramp + 2 :] <= rows[ramp + 1])
        return ramp + 1 + int(within[-1]) if within.size else ramp

    def risk_limit(
        self,
        costs: VerifyCosts,
        k_max: int,
        drafting: tuple[float, float] | None,
        sure: int,
        breaks: float,
        keeps: bool,
        short: bool = False,
    ) -> int:
        """The longest draft whose loss, were it rejected at its first token (a copy's `sure`
        tokens counted as emitted), is within what the reply saved plus a first RAMP_FIRST-token
        draft's risk (halved per copy break while in the red; `short`: a short match's, a 1-token
        draft's once the reply has written RAMP_FIRST tokens, until its drafts have saved time);
        `keeps`: a copy's, which keeps that allowance whatever the reply lost. drafting: a draft
        model's (first, later) decode."""
        if 1 not in costs.median:
            return k_max
        rows = costs.costs(k_max + 1)
        worst = rows[2:] - rows[1]  # drafts of 1..k_max tokens: k + 1 rows for one token
        if drafting is not None:
            worst = worst + drafting[0] + np.arange(k_max) * drafting[1]
        loss = worst - np.minimum(np.arange(1, k_max + 1), sure) * rows[1]
        # A short match once the reply has gone on in words of its own (a reply that copies shows
        # it in its first tokens) is a guess at fresh text: it risks a 1-token draft's loss beyond
        # what the reply's drafts saved, until its drafts accepted whole held GUESS_WHOLE tokens.
        # One 1-token win (3 ms) let a 3-token phrase risk 16 ms: 0.91x plain over 16 tokens.
        guess = short and self.written >= RAMP_FIRST and self.whole_tokens < GUESS_WHOLE
        first = worst[min(1 if guess else RAMP_FIRST, k_max) - 1]
        if self.saved_s <= 0:
            first *= 0.5 ** max(0.0, breaks)
        counted = max(self.saved_s, 0.0) if keeps else self.saved_s
        within = np.flatnonzero(loss <= counted + first)
        return int(within[-1]) + 1 if within.size else 1
