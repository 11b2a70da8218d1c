"""Choose the draft length each step from what this run measures, and drop a drafter that stops paying.

With per-token acceptance probability a, a draft of k tokens yields on average
E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens (the accepted prefix plus the
target's own token) and costs T(k) = k * t_draft + t_step(k + 1), where t_step(n) is the whole
wall time of a step that verifies n rows (the llama.cpp batch *and* Tandem's own work around
it) and t_draft the measured cost of one drafted token. k = 0 is plain decoding, t_step(1).
Every figure is measured as the run goes; a cost cache (engine.costcache) only seeds them, so
a new process starts where the last one on the same machine, build and pair left off.

Two guards keep speculation from ever costing more than it gives: the model above picks k = 0
whenever no length is expected to beat a plain step, and the throughput guard (engine.guard)
suspends a drafter whose steps lose more than a budget against plain steps measured live.

The controller is composed of its jobs, each a module: what a verify batch costs
(engine.costs), acceptance per kind (engine.acceptance), what a draft model costs
(engine.draft_costs), E(k) / T(k) (engine.pricing), how far a copy runs (engine.copies), what a
reply may risk (engine.reply_budget), probing and exploring (engine.probes) and the throughput
guard (engine.guard). What is left is the choosing: per offer a limit, its rates, the best; then a
probe or a longer draft where one is due. The reasons behind each rule and constant:
docs/design-engine.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from engine import pricing
from engine.acceptance import AcceptanceTable
from engine.copies import CopySurvival
from engine.costs import CALIBRATION_SIZES, FIRST_REPLY_MIN_TOKENS, FIRST_REPLY_SIZES, VerifyCosts
from engine.draft_costs import DraftModelCosts
from engine.guard import LOSS_BUDGET_TOKENS, RESUME_BUDGET_TOKENS, ThroughputGuard
from engine.kinds import COPY_KINDS, PLAIN, PRIOR_ACCEPT, Choice, DrafterKind, Offer
from engine.probes import COST_PROBE_ACCEPTANCE, PROBE_FIRST, Priced, Probes
from engine.reply_budget import RAMP_FIRST, ReplyBudget

__all__ = [
    "CALIBRATION_SIZES",
    "FIRST_REPLY_MIN_TOKENS",
    "FIRST_REPLY_SIZES",
    "LOSS_BUDGET_TOKENS",
    "Choice",
    "DraftLengthController",
    "Offer",
]


@dataclass
class DraftLengthController:
    k_max: int
    adaptive: bool = True
    draft_costs_time: bool = False  # a draft model costs a decode per token; n-gram lookup ~nothing
    accept: AcceptanceTable = field(default_factory=AcceptanceTable)  # acceptance per kind
    costs: VerifyCosts = field(default_factory=VerifyCosts)  # what a verify batch costs here
    draft: DraftModelCosts = field(default_factory=DraftModelCosts)  # what the draft model costs
    copies: CopySurvival = field(default_factory=CopySurvival)  # how far copies run
    budget: ReplyBudget = field(default_factory=ReplyBudget)  # what this reply may risk
    guard: ThroughputGuard = field(default_factory=ThroughputGuard)
    probes: Probes = field(default_factory=Probes)  # probing and exploring

    def __post_init__(self) -> None:
        self.draft.enabled = self.draft_costs_time

    def acceptance(self, kind: int = 0) -> float:
        return self.accept.rate(kind)

    def expected_rates(
        self, k_max: int, kind: int = 0, acceptance: float | None = None, survival: np.ndarray | None = None
    ) -> np.ndarray:
        """Tokens per second of a k-token draft, k = 0..k_max (engine.pricing), at the kind's
        acceptance unless told (or a copy's survival)."""
        if survival is None and acceptance is None:
            acceptance = self.acceptance(kind)
        return pricing.rates(self.costs, k_max, acceptance or 0.0, survival, self._decodes(kind))

    def expected_rate(self, k: int, kind: int = 0) -> float:
        return pricing.rate(self.costs, k, self.acceptance(kind), self._decodes(kind))

    def _decodes(self, kind: int) -> DraftModelCosts | None:
        """What drafting this kind costs beyond its batch: a draft model's decodes (None: free)."""
        return self.draft if self.draft_costs_time and kind == DrafterKind.MODEL else None

    def _short_match(self, kind: int) -> bool:
        """A free offer but a copy: drafted only within the batch sizes timed here."""
        return kind not in COPY_KINDS and self._decodes(kind) is None

    def begin_reply(self) -> None:
        self.budget.begin_reply()
        self.copies.begin_reply()
        self.draft.begin_reply(self.never_pays)  # a model found too slow is timed again now and then

    @property
    def never_pays(self) -> bool:
        """A measured draft model too slow for any draft length to beat plain decoding."""
        return pricing.never_pays(self.costs, self.draft, self.k_max)

    @property
    def will_draft(self) -> bool:
        """Is drafting possible soon (not known useless, not suspended)? Then a draft model
        should be loaded and have read the prompt."""
        return not self.adaptive or not (self.never_pays or self.guard.suspended)

    def pays_back(self, n_tokens: int, one_off_s: float) -> bool:
        """Would drafting over a reply of at most n_tokens repay a one-off (a draft model's load
        and prompt read)? The one-off is sure, the savings priced at a cautious acceptance, or
        hopeful for a reply long enough to time batches for (and to measure an unjudged pair)."""
        if not self.adaptive:
            return True
        if 1 not in self.costs.median:  # a first use: only a reply that times batches measures the pair
            return one_off_s <= 0.0 or n_tokens >= FIRST_REPLY_MIN_TOKENS
        limit = min(self.k_max, max(1, n_tokens), self.costs.explore_limit())
        model = self.accept[DrafterKind.MODEL]
        acc = self.draft.priced_rate(model) if n_tokens >= FIRST_REPLY_MIN_TOKENS else model.cautious_rate()
        return pricing.pays_back(self.costs, self._decodes(0), limit, acc, n_tokens, one_off_s)

    # -- the choice ----------------------------------------------------------------------------

    def choose(self, available: int, kind: int = 0, match_len: int = 0) -> int:
        """The draft length for this step from one offer (for a match, how much context matched)."""
        return self.choose_among([Offer(DrafterKind(kind), available)], match_len).k

    def choose_among(self, offers: Sequence[Offer], match_len: int = 0) -> Choice:
        """This step's draft. Per offer: the limit is the least of what is available, the explore,
        ramp, risk and (short matches) timed sizes; then its rates up to it; then the best rate
        that beats a plain step wins (n-gram offers are free beside a draft model); probes and
        exploring after. match_len: how much context this step's text offer matched."""
        self.probes.probing = False
        self.copies.match_len = match_len
        offers = [Offer(o.kind, min(o.available, self.k_max)) for o in offers if o.available > 0]
        if offers and not self.adaptive:
            return Choice(offers[0].available, offers[0].kind)
        offers = self._admitted(offers)
        if not offers:
            return PLAIN
        timed = self.k_max if self.budget.repeating else max(self.costs.low, default=1) - 1
        explore = self.costs.explore_limit()  # (the same for every offer)
        best: Priced | None = None
        for offer in offers:
            priced = self._price(offer, explore, timed)
            if priced is not None and (best is None or priced.rate > best.rate):
                best = priced
        model = next((o for o in offers if self._decodes(o.kind) is not None), None)
        return self._plain_or_probe(offers, model) if best is None else self._drafting(best, model)

    def _admitted(self, offers: list[Offer]) -> list[Offer]:
        """The offers that may draft now: none while the guard holds a drafter suspended or needs
        a plain reference step; no draft model known never to pay."""
        if not offers or self.guard.wait(self.costs.median.get(1, 0.0)):
            return []
        if self.never_pays:  # the draft model is not run; free n-gram drafts may still pay
            offers = [o for o in offers if self._decodes(o.kind) is None]
        return [] if not offers or self.guard.reference_stale(self.costs) else offers

    def _price(self, offer: Offer, explore: int, timed: int) -> Priced | None:
        """An offer's best length within its limit, where it beats a plain step."""
        kind = offer.kind
        rates = None
        if self._short_match(kind):
            if timed <= 0 or self.costs.plain_stale:
                return None  # (before the limits below: the common case in open text, every step)
            # The ramp and the risk limit only shorten a draft: where no length within the others
            # beats a plain step, none within them does (most steps of open text).
            acc = self.budget.short_match_rate(kind, self.accept[kind])
            within = min(offer.available, explore, timed)
            if not pricing.may_beat_plain(self.costs, within, acc):
                return None
            rates = self.expected_rates(within, kind, acc)
            if float(rates[1:].max(initial=0.0)) <= rates[0]:
                return None
        reach = limit = min(offer.available, explore, self._ramp_limit(kind), self._risk_limit(kind))
        if rates is not None:  # a short match: chosen only where its batch was timed, explored past it
            limit = min(limit, timed)
            rates = rates[: limit + 1]
        else:
            survival = self.copies.survival(kind, limit)
            first_copy = survival is None and kind in COPY_KINDS and not self.budget.copy_drafted
            prior = max(self.acceptance(kind), PRIOR_ACCEPT[kind]) if first_copy else None
            if self._decodes(kind) is not None:
                prior = self.draft.priced_rate(self.accept[DrafterKind.MODEL])
            rates = self.expected_rates(limit, kind, prior, survival)
        k = 1 + int(np.argmax(rates[1:]))
        return Priced(float(rates[k]), k, kind, limit, reach, rates) if rates[k] > rates[0] else None

    def _drafting(self, best: Priced, model: Offer | None) -> Choice:
        costly = self._decodes(best.kind) is not None  # a draft model's tokens cost decodes
        if model is None or costly:
            self.probes.plain_steps = 0
        elif self.probes.counts_plain():
            # The text's drafts win: like a plain step this counts toward the draft model's next
            # probe (else its priors would never be measured while the text repeats itself).
            return self._probe(model)
        return self.probes.explore(best, costly)

    def _plain_or_probe(self, offers: list[Offer], model: Offer | None) -> Choice:
        """A plain step, or a probe: of the draft model, or of an offer not observed, every so
        many plain steps (doubling while they fail); of an observed offer usually right, a cost
        probe of a size this process has not timed, or (while the reply is not in the red) of the
        least rows it has timed too seldom to trust: one slow step must not price a size out for good."""
        probes = self.probes
        if probes.counts_plain() and (probe := model or (None if probes.observes else offers[0])):
            return self._probe(probe)
        if (retime := self._retime_copy(offers)) is not None:
            return retime
        if not probes.cost_probe_due(model is not None):
            return PLAIN
        offer = max(offers, key=lambda o: self.acceptance(o.kind))
        if self.acceptance(offer.kind) < COST_PROBE_ACCEPTANCE:
            return PLAIN
        probes.plain_steps = 0
        k = min(offer.available, self.costs.explore_limit(), RAMP_FIRST)
        k = min(k, self._risk_limit(offer.kind, probe=True))
        if k + 1 in self.costs.live:
            k = 0 if self.budget.saved_s < 0 else self._least_untrusted(k)
            if not k:
                return PLAIN
        probes.probing = True
        return Choice(k, offer.kind)

    def _least_untrusted(self, k_max: int) -> int:
        """The shortest draft up to k_max whose batch this process timed under TRUSTED_SAMPLES times (0: none)."""
        live, usual = self.costs.live, self.costs.usual
        return next((k for k in range(1, k_max + 1) if k + 1 in live and usual(k + 1) is None), 0)

    def _retime_copy(self, offers: list[Offer]) -> Choice | None:
        """A copy right at RAMP_FIRST plain steps in a row: its first draft's batch timed again where
        under TRUSTED_SAMPLES timings price it (one slow step held copies back: design-engine.md)."""
        copy = next((o for o in offers if o.kind in COPY_KINDS), None)
        if copy is None or self.copies.stuck < RAMP_FIRST:
            return None
        k = min(
            copy.available, self.costs.explore_limit(), RAMP_FIRST, self._risk_limit(copy.kind, probe=True)
        )
        if self.costs.usual(k + 1) is not None:
            return None
        self.copies.stuck, self.probes.probing = 0, True
        return Choice(k, copy.kind)

    def _probe(self, offer: Offer) -> Choice:
        """A short draft from an offer not chosen lately, to measure it again: one token of a free
        offer (the least rows), a reply's first draft length of a draft model."""
        self.probes.probed()
        if self._decodes(offer.kind) is None:
            return Choice(1, offer.kind)
        return Choice(min(offer.available, self.costs.explore_limit(), RAMP_FIRST), offer.kind)

    def _ramp_limit(self, kind: int) -> int:
        floor = max(self.copies.first_draft(kind, self.k_max), self.copies.sure_run(kind, self.k_max))
        return self.budget.ramp_limit(self.costs, self.k_max, floor, self._decodes(kind) is None)

    def _risk_limit(self, kind: int, probe: bool = False) -> int:
        plain_s = self.costs.cost(1)
        model = self._decodes(kind)
        decodes = None if model is None else (model.draft_first_cost(plain_s), model.draft_cost(plain_s))
        sure, breaks = self.copies.sure_run(kind, self.k_max), self.copies.risk_breaks
        keeps = not probe and kind in COPY_KINDS
        short = self._short_match(kind)
        return self.budget.risk_limit(self.costs, self.k_max, decodes, sure, breaks, keeps, short)

    def observe(self, kind: int, accepted: bool) -> None:
        """A free offer not drafted this step, its first token checked against the emitted one:
        its acceptance learned for nothing (such offers are not probed then)."""
        if self._decodes(kind) is not None:
            return
        self.probes.observes = True
        self.budget.note_offer(self._short_match(kind), accepted)
        self.copies.observe(kind, accepted)
        self.accept[kind].observe(accepted)

    def probe_affords(self, one_off_s: float) -> bool:
        """May this step's probe pay a one-off (a loaded draft model reading what was decoded
        plainly since it last drafted)? Within what a probe may lose after a suspension."""
        plain_s = self.costs.median.get(1)
        return self.probes.probing and plain_s is not None and one_off_s <= RESUME_BUDGET_TOKENS * plain_s

    def record(
        self,
        kind: int,
        n_drafted: int,
        n_accepted: int,
        step_s: float,
        draft_s: float = 0.0,
        draft_first_s: float | None = None,
        n_more: int = 0,
        learn: bool = True,
        timed: bool = True,
    ) -> None:
        """One step: k drafted, n accepted, its wall time, the part spent drafting (engine.draft_costs).
        learn=False: acceptance not counted (a draft model's where the text was copied). timed=False:
        it grew llama.cpp's buffers, a sample only where no timing of this size or larger prices it."""
        n_rows = n_drafted + 1
        self.budget.written += n_accepted + 1
        if timed or not any(n >= n_rows for n in self.costs.low):
            self.costs.add(n_rows, step_s - draft_s)
            self.costs.live.add(n_rows)
        plain_s = self.costs.median.get(1) or self.costs.cost(1)  # as a draft's decodes are timed
        self.draft.note_step(n_drafted, draft_s, draft_first_s, n_more, plain_s)
        if n_drafted == 0:
            if draft_s > 0:
                self._guard(1, n_rows, step_s, draft_s)  # a refusal: a decode for no token
            else:
                self.guard.note_plain_step()
            return
        self.guard.note_speculative_step()
        self.budget.note_draft(kind, n_drafted, n_accepted, self.k_max, self._short_match(kind))
        self.copies.learn(kind, n_drafted, n_accepted)
        if learn:
            self.accept[kind].learn(n_drafted, n_accepted)
        if (self._decodes(kind) is not None or not self.draft_costs_time) and self.expected_rate(
            n_drafted, kind
        ) > self.expected_rate(0, kind):
            self.probes.interval = PROBE_FIRST  # (beside a draft model, the text paying says nothing of it)
        self._guard(n_accepted + 1, n_rows, step_s, draft_s)

    def _guard(self, n_emitted: int, n_rows: int, step_s: float, draft_s: float) -> None:
        """Throughput guard: the loss of this speculative step against plain steps measured live."""
        if self.adaptive:
            usual_s = self.guard.usual(self.costs, n_rows, step_s, draft_s)
            self.budget.saved_s += self.guard.judge(self.costs, n_emitted, usual_s)

    def first_reply_sizes(self, n_batch: int, max_tokens: int = FIRST_REPLY_MIN_TOKENS) -> list[int]:
        """What a first reply on a machine never timed times first (engine.costs)."""
        return self.costs.first_reply_sizes(min(self.k_max + 1, n_batch), max_tokens) if self.adaptive else []

    def note_timings(self, timed: dict[int, float]) -> None:
        """Batches timed outside a reply (Engine.calibrate, a first reply's timing): priced as a
        step of that size is (VerifyCosts.add_timed)."""
        self.costs.add_timed(timed)

    def export(self) -> dict[str, object]:
        """What this run measured, to seed the next process on the same machine and pair."""
        data = {
            "step_s": self.costs.export(),
            "plain_text_tokens": self.costs.plain_text,
            **self.draft.export(),
        }
        return {**data, "acceptance": self.accept.export(), "departures": self.copies.export()}

    def seed(self, data: dict[str, object]) -> None:
        """Start from a previous run's measurements (already validated by engine.costcache)."""
        step_s, acceptance = data.get("step_s"), data.get("acceptance")
        if isinstance(step_s, dict):
            text = data.get("plain_text_tokens")
            self.costs.seed(step_s, text if isinstance(text, int) else None)
        self.draft.seed(data)
        self.copies.seed(data.get("departures"))
        if isinstance(acceptance, dict):
            self.accept.seed(acceptance, self.draft_costs_time)
