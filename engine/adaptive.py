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

The controller is composed of its jobs: the batch cost model (engine.costs.VerifyCosts),
acceptance per kind (engine.kinds, _Acceptance here), the throughput guard (engine.guard), and
the choosing, which is this module: the ramp and risk limit of a reply, probes and exploring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from engine.costs import VerifyCosts
from engine.guard import LOSS_BUDGET_TOKENS, RESUME_BUDGET_TOKENS, ThroughputGuard
from engine.kinds import COPY_KINDS, MEMORY_KINDS, DrafterKind
from engine.kinds import PRIOR_ACCEPT as _PRIOR_ACCEPT

__all__ = ["COPY_KINDS", "LOSS_BUDGET_TOKENS", "MEMORY_KINDS", "DrafterKind", "DraftLengthController"]


# The controller's constants, each named once with its reason. The runs that set them are in
# docs/design-engine.md ("The controller's constants"), not here; the cost model's and the
# guard's live with them (engine.costs, engine.guard).

# -- estimates
_EMA = 0.85  # weight of history in every running estimate
_PRIOR_WEIGHT = 2.0  # the prior counts as this many trials
_CAUTION = 1.28  # one-off costs are judged this many sd below the acceptance estimate (10th percentile)
_SEED_TRIALS = 2.0  # acceptance carried into a new process weighs at most this many trials...
_SEED_TRIALS_DRAFT_MODEL = 16.0  # ...a draft model's more: agreement is the pair's, not the text's
# A draft model judged on fewer tokens than this is priced at what it may be (_CAUTION sd above the
# estimate): a pair that pays only near full acceptance (a slow draft, costly verify rows) is
# never drafted long enough to learn it from the prior; the ramp and risk limit bound the try.
_HOPEFUL_TRIALS = 16.0
_HOPEFUL_REFUSALS = 0.25  # ...unless it refused this share of its asks (drafted nothing)
_MAX_RATE = 0.999  # acceptance is never priced as certain (the geometric sum would not converge)
# -- a draft model's costs
_PRIOR_DRAFT_COST = 0.2  # a draft model's decode, relative to a plain step, until measured
_PREFILL_MIN_TOKENS = 16  # shorter prompt reads are mostly fixed costs: no prefill ratio from them
# -- exploring lengths
_EXPLORE_EVERY = 8  # speculative steps between tries of a longer draft than the best known
_EXPLORE_LOSS = 0.1  # ...which may be priced this much below the best (what a try may cost a step)
# -- a reply's caution
# A reply's first drafts cost at most a _RAMP_FIRST-token draft's batch until one is accepted
# whole (acceptance carried over from other text may not hold for this one), free drafts up to
# _RAMP_STRETCH times as long where their batch is priced no dearer. A reply's first draft from
# copied text is judged at the copy prior (a 16-token match is this text's own evidence).
_RAMP_FIRST = 4
_RAMP_STRETCH = 2
# A copy whose context matched L tokens (the longest earlier context that ends like the text so
# far: engine.text_index) may risk a draft of _MATCH_RUN x L tokens before it has saved anything
# (a copy that has run L tokens is expected to run about half as far again), where L is
# _MATCH_MIN or more (llama-server's ngram-mod keys on 24 tokens) and no draft of this reply has
# been rejected.
_MATCH_RUN = 0.5
_MATCH_MIN = 24
# How far a copy runs. A copy offer whose context matched L tokens is priced by how far copies run
# on this text: the chance that its next j tokens all agree is S(j | L) = E[((L + 1) / (L + 1 +
# j)) ** alpha], a copy that has run L tokens departing from its source at a rate alpha / (L + 1)
# a token (the longer a copy has run, the longer it is likely to go on: a Lindy law; alpha 1 is
# the rule of succession). alpha is learned from where copies departed (a Gamma posterior over
# it, conjugate to that rate: _Departures): an edit that breaks a copy every few tokens makes
# alpha large, a document copied whole small. The prior (_DEPART_PRIOR breaks in
# _DEPART_PRIOR_EXPOSURE of log-length) is optimistic; what earlier replies taught weighs at most
# _DEPART_CARRIED breaks in a new reply (a reply's own copies say most about it).
_DEPART_PRIOR = 1.0
_DEPART_PRIOR_EXPOSURE = 2.0
_DEPART_CARRIED = 2.0
# The risk limit and the ramp count a copy's tokens that agree with probability 1 - _RISK_DOUBT
# or more as sure (a draft that breaks before them is this unlikely), by this reply's own copies
# alone, from a prior of the rule of succession (alpha 1, weighing _RISK_PRIOR breaks): a reply's
# copies must prove themselves before its drafts risk more than the ramp's (an earlier reply
# copied whole says little of where an edit will break this one).
_RISK_DOUBT = 0.07
_RISK_PRIOR = 2.0
_RISK_PRIOR_EXPOSURE = 2.0
# Within a reply no draft may risk, were it rejected at its first token, more than the reply's
# drafts have saved so far plus what a first _RAMP_FIRST-token draft risks (`_risk_limit`): a
# reply that drafts cannot end much slower than plain decoding, whatever acceptance promised.
# Short matches and cost probes (below) risk only what the reply's losses left of that allowance
# (a copy in the red keeps it, halved per break as below): in mixed work (a table made from a CSV)
# short matches are right at their first token and wrong after it, and drafts and probes of 2-4
# tokens spent the allowance afresh each time (0.24 s of a 3.6 s reply).
# That first draft's allowance is the reply's while it has saved nothing; a reply in the red whose
# copies have broken (an edit that keeps breaking them) gets half of it per break, so that it
# cannot lose the allowance again at each break.
# A short match (any n-gram offer but a copy) drafts only within the batch sizes this machine has
# timed: past them a batch is a guess at the prior slope (a row +5% of a plain step, where a CPU
# charges +70-130% for a second row), and a short match in fresh text, right half the time, pays
# only where rows are cheap. Its offers are observed for nothing meanwhile, and an offer observed
# usually right gets a cost probe (_COST_PROBE_STEPS), which times a size; copies still draft on
# the guess (they pay even at a CPU's prices, and their first reply times batches first).
# Until a reply has drafted a short match's kind, or copied, that kind is priced at no more than
# its prior (engine.kinds.PRIOR_ACCEPT): what other text taught (a warm-up that copied, earlier
# replies) says little of short matches in fresh text, and an observed first token right says
# nothing of the tokens after it (an open reply drafted 7-token matches so and kept 0-1 of them).
# A reply that copies is one where short matches mostly continue copied text (an edit's): there
# what earlier edits taught holds.
# A reply whose short matches were right at their first token _SHORT_STREAK times in a row repeats
# itself (Gemma's open replies loop within 100-150 tokens): its short matches explore past the
# sizes timed, as a copy's do.
_SHORT_STREAK = 4
# -- probes: estimates must be able to recover from a bad patch
_PROBE_FIRST = 8  # plain steps (chosen by the model) before a short probe...
_PROBE_MAX = 64  # ...doubling while probes keep failing
_COST_PROBE_STEPS = 32  # an observed free offer usually right yet not drafted this long gets a probe...
_COST_PROBE_ACCEPTANCE = 0.5  # ...where it is observed right at least this often
_REMEASURE_FIRST = 8  # replies before a draft model found too slow is timed afresh (doubling)...
_REMEASURE_MAX = 1024  # ...at most this many replies apart
# -- calibration
# Verify batch sizes timed once per machine, build, model and thread count while the engine is
# idle (Engine.calibrate): every size to 8 rows, where CPU kernels differ most from one size to
# the next, then every 8th to 64.
CALIBRATION_SIZES = (*range(1, 9), *range(16, 65, 8))
# A first reply on a machine, build and model whose batches were never timed (a new machine, a
# `tandem generate` or `tandem serve` before the window was ever idle there) times these sizes
# once each right after reading its prompt: a plain step, a short draft's batch, and the two
# sizes long copy drafts are priced from; once per machine and model.
FIRST_REPLY_SIZES = (1, 4, 16, 64)
FIRST_REPLY_MIN_TOKENS = 128  # ...where the reply may run this long (shorter ones cannot repay it)
# The single measured figures a cost cache carries (its key: the controller's attribute).
_SEEDED = {
    "draft_ratio": "_draft_ratio",
    "draft_first_ratio": "_draft_first_ratio",
    "draft_load_s": "draft_load_s",
    "draft_prefill_ratio": "_draft_prefill_ratio",
    "target_prefill_token_s": "_target_prefill_token_s",
}


@dataclass
class _Acceptance:
    prior: float
    accepted: float = 0.0
    trials: float = 0.0

    def rate(self) -> float:
        return (self.accepted + self.prior * _PRIOR_WEIGHT) / (self.trials + _PRIOR_WEIGHT)

    def cautious_rate(self) -> float:
        """A rate this evidence is unlikely to fall short of, for one-off costs (certain, where
        the savings are not): the Beta posterior's mean (`rate`) less _CAUTION standard
        deviations, though never below the prior where the evidence is above it (the prior is
        what is expected with nothing measured). 7 of 7 accepted: 0.93 by `rate`, 0.83 here."""
        a = self.accepted + self.prior * _PRIOR_WEIGHT
        b = max(self.trials - self.accepted, 0.0) + (1 - self.prior) * _PRIOR_WEIGHT
        n = a + b
        mean = a / n
        return max(min(self.prior, mean), mean - _CAUTION * math.sqrt(a * b / (n * n * (n + 1))))

    def hopeful_rate(self) -> float:
        """What the rate may be, on thin evidence (fewer than _HOPEFUL_TRIALS tokens judged): the
        Beta posterior's mean plus _CAUTION standard deviations; the mean once judged."""
        mean = self.rate()
        if self.trials >= _HOPEFUL_TRIALS:
            return mean
        a = self.accepted + self.prior * _PRIOR_WEIGHT
        n = self.trials + _PRIOR_WEIGHT
        b = n - a
        return min(_MAX_RATE, mean + _CAUTION * math.sqrt(a * b / (n * n * (n + 1))))


@dataclass
class _Departures:
    """Where copies depart from their source: a Gamma(breaks, exposure) posterior over the rate
    alpha of _DEPART_PRIOR's model (a copy at age r, r tokens of context agreed, departs at its
    next token with probability 1 - ((r + 1) / (r + 2)) ** alpha). An agreeing token at age r adds
    log((r + 2) / (r + 1)) of exposure, a departure one break: the survival of a run's log-length
    is exponential in alpha, so the posterior stays a Gamma (a departure's own likelihood, 1 -
    exp(-alpha x) ~ alpha x for the small x of a token, is taken as such)."""

    breaks: float = _DEPART_PRIOR
    exposure: float = _DEPART_PRIOR_EXPOSURE

    def survival(self, age: int, n: int) -> np.ndarray:
        """S(j) for j = 1..n: the chance that a copy of age `age` agrees over its next j tokens,
        alpha integrated out (the Gamma's Laplace transform)."""
        x = np.log1p(np.arange(1, n + 1, dtype=np.float64) / (age + 1))
        survival: np.ndarray = (self.exposure / (self.exposure + x)) ** self.breaks
        return survival

    def sure_run(self, age: int, doubt: float) -> float:
        """How many more tokens a copy of age `age` agrees over with probability 1 - doubt: the
        j where S(j) = 1 - doubt."""
        x = self.exposure * ((1 - doubt) ** (-1 / self.breaks) - 1)
        return (age + 1) * math.expm1(x)

    def learn(self, age: int, n_drafted: int, n_accepted: int) -> None:
        self.exposure += math.log1p(n_accepted / (age + 1))
        if n_accepted < n_drafted:
            self.breaks += 1

    def carried(self) -> _Departures:
        """What a new reply starts from: this evidence, weighing at most _DEPART_CARRIED breaks."""
        scale = min(1.0, _DEPART_CARRIED / self.breaks) if self.breaks > 0 else 1.0
        return _Departures(self.breaks * scale, self.exposure * scale)


@dataclass
class DraftLengthController:
    k_max: int
    adaptive: bool = True
    draft_costs_time: bool = False  # a draft model costs a decode per token; n-gram lookup ~nothing
    _acceptance: dict[int, _Acceptance] = field(default_factory=dict)
    _departures: _Departures = field(default_factory=_Departures)  # how far copies run here
    _reply_departures: _Departures = field(  # ...in this reply's own copies (the risk limit's)
        default_factory=lambda: _Departures(_RISK_PRIOR, _RISK_PRIOR_EXPOSURE)
    )
    costs: VerifyCosts = field(default_factory=VerifyCosts)  # what a verify batch costs here
    guard: ThroughputGuard = field(default_factory=ThroughputGuard)
    _n_spec_steps: int = 0
    # A drafted token's cost relative to a plain step: a ratio survives the machine getting
    # busier or quieter (both slow down alike) where two absolute timings would not.
    _draft_ratio: float | None = None
    # A draft's first decode relative to a plain step: it reads what the draft has not seen (after
    # a draft accepted whole, 2 tokens: ~2x a 1-token decode on a CPU). Later decodes: _draft_ratio.
    _draft_first_ratio: float | None = None
    # Seconds to load the draft model (measured the first time; a one-off per process).
    draft_load_s: float | None = None
    # The draft model's cost of reading a prompt token relative to the target's (measured when
    # it reads one). Prefill is compute-bound where decoding is memory-bound, so this is not
    # the decode ratio: standing in for it, that ratio over-charged a costly target's draft
    # so much that it was never loaded.
    _draft_prefill_ratio: float | None = None
    _target_prefill_token_s: float | None = None  # the target's prefill, seconds per token (lowest seen)
    _plain_steps: int = 0  # consecutive plain steps chosen by the model
    _probe_interval: int = _PROBE_FIRST
    _ramp: int = _RAMP_FIRST  # longest draft allowed now in this reply (see _RAMP_FIRST)
    _match_len: int = 0  # this step's offer: how many tokens of context matched (see _MATCH_RUN)
    _broke: bool = False  # a draft of this reply was rejected (a copy here departs from its source)
    _whole_tokens: int = 0  # drafted tokens in this reply's drafts that were accepted whole
    _copy_drafted: bool = False  # this reply has drafted from copied text (see COPY_KINDS)
    _short_streak: int = 0  # this reply's short-match offers right at their first token in a row
    # The kinds this reply has drafted (see "A short match" above _SHORT_STREAK).
    _drafted_kinds: set[int] = field(default_factory=set)
    _saved_s: float = 0.0  # plain time this reply's drafts have saved so far, less what they lost
    # A draft model asked for a draft and offering none (unsure of its first token): how often,
    # as an exponentially weighted count of refusals among asks (draft models only).
    _refusals: float = 0.0
    _asks: float = 0.0
    probing: bool = False  # the last choice was a probe (see `choose`)
    _observes: bool = False  # free offers not drafted are checked against the emitted token
    _replies_not_run: int = 0  # replies since a draft model was last found too slow
    _remeasure_every: int = _REMEASURE_FIRST

    @property
    def n_suspensions(self) -> int:
        return self.guard.n_suspensions

    @property
    def copy_breaks(self) -> int:
        """How often this reply's copies have departed from their source so far."""
        return round(self._reply_departures.breaks - _RISK_PRIOR)

    # -- estimates ---------------------------------------------------------------------------

    def acceptance(self, bucket: int = 0) -> float:
        return self._bucket(bucket).rate()

    def _bucket(self, bucket: int) -> _Acceptance:
        acc = self._acceptance.get(bucket)
        if acc is None:
            acc = self._acceptance[bucket] = _Acceptance(_PRIOR_ACCEPT.get(bucket, 0.5))
        return acc

    def verify_cost(self, n_rows: int) -> float:
        """Seconds for a step that verifies n_rows (engine.costs.VerifyCosts.cost)."""
        return self.costs.cost(n_rows)

    def verify_costs(self, n_max: int) -> np.ndarray:
        """verify_cost(n) for n = 0..n_max in one go (index 0 unused)."""
        return self.costs.costs(n_max)

    def expected_rates(
        self, k_max: int, bucket: int = 0, acceptance: float | None = None, survival: np.ndarray | None = None
    ) -> np.ndarray:
        """expected_rate(k) for k = 0..k_max, vectorised (at the bucket's acceptance, unless told;
        survival: the chance that the first j drafted tokens are all accepted, j = 1..k_max, in
        place of the acceptance's a ** j).

        A draft model may offer nothing when asked (refusal rate r, measured): then the step
        yields one token for a draft decode and a 1-row verify."""
        ks = np.arange(k_max + 1, dtype=np.float64)
        if survival is not None:
            tokens = np.concatenate(([1.0], 1.0 + np.cumsum(survival[:k_max])))
        else:
            a = min(self.acceptance(bucket) if acceptance is None else acceptance, _MAX_RATE)
            tokens = (1 - a ** (ks + 1)) / (1 - a)
        costs = self.verify_costs(k_max + 1)[1:]
        if not self._costs_drafting(bucket):
            plain_rates: np.ndarray = tokens / costs
            return plain_rates
        first, d = self.draft_first_cost(), self.draft_cost()
        drafted_s = np.where(ks > 0, first + (ks - 1) * d, 0.0) + costs
        r = self.refusal_rate()
        if r > 0.0:
            tokens[1:] = (1 - r) * tokens[1:] + r
            drafted_s[1:] = (1 - r) * drafted_s[1:] + r * (first + costs[0])
        rates: np.ndarray = tokens / drafted_s
        return rates

    def _costs_drafting(self, bucket: int) -> bool:
        """Does drafting from this bucket cost decodes (a draft model's, bucket 0)? n-gram
        matches (buckets 1-7) are free, also beside a draft model."""
        return self.draft_costs_time and bucket == 0

    def refusal_rate(self) -> float:
        """How often a draft model, asked for a draft, offers none (no prior refusals)."""
        return self._refusals / (self._asks + _PRIOR_WEIGHT) if self.draft_costs_time else 0.0

    def _model_rate(self) -> float:
        """A draft model's acceptance as drafts are priced: hopeful on thin evidence
        (_HOPEFUL_TRIALS), unless it has been refusing to draft (a refusal is evidence too, and
        one that no accepted token ever adds to)."""
        acc = self._bucket(0)
        return acc.hopeful_rate() if self.refusal_rate() < _HOPEFUL_REFUSALS else acc.rate()

    def draft_cost(self) -> float:
        """Seconds per drafted token after a draft's first (0 for n-gram lookup)."""
        if not self.draft_costs_time:
            return 0.0
        ratio = self._draft_ratio if self._draft_ratio is not None else _PRIOR_DRAFT_COST
        return ratio * self.verify_cost(1)

    def draft_first_cost(self) -> float:
        """Seconds for a draft's first token (its decode reads what the draft has not seen)."""
        if not self.draft_costs_time:
            return 0.0
        ratio = self._draft_first_ratio if self._draft_first_ratio is not None else self._draft_ratio
        return (ratio if ratio is not None else _PRIOR_DRAFT_COST) * self.verify_cost(1)

    def expected_rate(self, k: int, bucket: int = 0) -> float:
        """Expected tokens per second of a step that drafts k tokens: expected_rates(k)[k]
        without the arrays (each step's `record` asks for two, and numpy's small-array calls,
        run with caches cold after a decode, cost it ~0.15 ms a step)."""
        a = min(self.acceptance(bucket), _MAX_RATE)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        cost = self.verify_cost(k + 1)
        if not self._costs_drafting(bucket):
            return tokens / cost
        first = self.draft_first_cost()
        drafted_s = (first + (k - 1) * self.draft_cost() if k > 0 else 0.0) + cost
        r = self.refusal_rate()
        if r > 0.0 and k > 0:
            tokens = (1 - r) * tokens + r
            drafted_s = (1 - r) * drafted_s + r * (first + self.verify_cost(1))
        return tokens / drafted_s

    @property
    def plain_tokens_per_s(self) -> float | None:
        """Plain decoding's speed on this machine now: one token per 1-row step, as measured."""
        s = self.costs.median.get(1)
        return 1.0 / s if s else None

    # -- decisions ---------------------------------------------------------------------------

    def begin_reply(self) -> None:
        """A new reply: its drafts start short again (see _RAMP_FIRST); a draft model found too
        slow is re-measured now and then (see _REMEASURE_FIRST)."""
        self._ramp = _RAMP_FIRST
        self._departures = self._departures.carried()
        self._reply_departures = _Departures(_RISK_PRIOR, _RISK_PRIOR_EXPOSURE)
        self._broke = False
        self._whole_tokens = 0
        self._copy_drafted = False
        self._drafted_kinds = set()
        self._short_streak = 0
        self._saved_s = 0.0
        if self.never_pays:
            self._replies_not_run += 1
            if self._replies_not_run >= self._remeasure_every:
                self._replies_not_run = 0
                self._remeasure_every = min(2 * self._remeasure_every, _REMEASURE_MAX)
                self._draft_ratio = None  # measured again in this reply; the guard bounds the loss

    @property
    def never_pays(self) -> bool:
        """A measured draft model too slow for any draft length to beat plain decoding, even with
        every drafted token accepted. Needs a measured draft cost; priors never decide this."""
        if not self.draft_costs_time or self._draft_ratio is None or 1 not in self.costs.median:
            return False
        k_top = min(self.k_max, 2 * max(self.costs.median))
        plain = 1.0 / self.verify_cost(1)
        return all(self._best_case_rate(k) <= plain for k in range(1, k_top + 1))

    @property
    def will_draft(self) -> bool:
        """Is drafting possible soon (not known useless, not suspended)? Then a draft model
        should be loaded and have read the prompt."""
        return not self.adaptive or not (self.never_pays or self.suspended)

    @property
    def suspended(self) -> bool:
        return self.guard.suspended

    def note_draft_load(self, seconds: float) -> None:
        """A measured load of the draft model. The fastest one seen is its cost: a load timed
        while the machine was busy says nothing about the next, and a figure too high would
        keep the model from ever being loaded (and timed) again."""
        if self.draft_load_s is None or seconds < self.draft_load_s:
            self.draft_load_s = seconds

    def pays_back(self, n_tokens: int, one_off_s: float) -> bool:
        """Would drafting over a reply of at most n_tokens save more than a one-off cost (loading
        a draft model, reading the prompt into it)? At the acceptance and costs known now: a
        32-token reply on a slow target must not wait for a draft model it cannot repay."""
        if not self.adaptive:
            return True
        if 1 not in self.costs.median:
            # Nothing measured yet (a first use): only a reply long enough to time batches for
            # (FIRST_REPLY_MIN_TOKENS) measures the pair, which the cache keeps for next time; a
            # shorter one cannot repay a load and a prompt read, whatever the pair.
            return one_off_s <= 0.0 or n_tokens >= FIRST_REPLY_MIN_TOKENS
        limit = min(self.k_max, max(1, n_tokens), self._explore_limit())
        # At a cautious acceptance (_CAUTION): the one-off is paid for sure, the savings only if
        # this reply's text is drafted as well as what was measured. A reply long enough to time
        # batches for (FIRST_REPLY_MIN_TOKENS) may try a pair not yet judged (hopeful_rate): what
        # it learns is kept for later replies, and only such a reply can repay a slow pair's load.
        long_reply = n_tokens >= FIRST_REPLY_MIN_TOKENS
        rates = self.expected_rates(
            limit, 0, self._model_rate() if long_reply else self._bucket(0).cautious_rate()
        )
        best = float(rates[1:].max()) if limit >= 1 else 0.0
        plain_s = self.verify_cost(1)
        if best * plain_s <= 1.0:
            return False
        saved_s = n_tokens * (plain_s - 1.0 / best)
        return saved_s > one_off_s

    def one_off_draft_s(self, prompt_s: float, loaded: bool = False) -> float:
        """The draft model's one-off cost: its load (unless loaded) and reading text that took
        the target prompt_s (at the measured prefill cost ratio; until one is measured, the
        decode ratio)."""
        ratio = self._draft_prefill_ratio
        if ratio is None:
            ratio = self._draft_ratio if self._draft_ratio is not None else _PRIOR_DRAFT_COST
        return (0.0 if loaded else self.draft_load_s or 0.0) + ratio * prompt_s

    def target_read_s(self, n_tokens: int) -> float:
        """What reading n_tokens of text costs the target: at the lowest per-token prefill cost
        seen, else (nothing seen) at a 1-row step's cost, which no prefill exceeds."""
        per_token = self._target_prefill_token_s
        if per_token is None:
            per_token = self.verify_cost(1)
        return n_tokens * per_token

    def note_draft_prefill(self, draft_s: float, n_draft: int, target_s: float, n_target: int) -> None:
        """The draft model read n_draft prompt tokens in draft_s where the target read n_target
        in target_s. Reads too short to time are ignored; the lowest ratio seen is kept (a
        read slowed by a busy machine says nothing about the next)."""
        if n_draft < _PREFILL_MIN_TOKENS or n_target < _PREFILL_MIN_TOKENS or draft_s <= 0 or target_s <= 0:
            return
        target_token_s = target_s / n_target
        if self._target_prefill_token_s is None or target_token_s < self._target_prefill_token_s:
            self._target_prefill_token_s = target_token_s
        ratio = (draft_s / n_draft) / target_token_s
        if self._draft_prefill_ratio is None or ratio < self._draft_prefill_ratio:
            self._draft_prefill_ratio = ratio

    def _best_case_rate(self, k: int) -> float:
        """Tokens per second of a k-token draft if every drafted token were accepted."""
        return (k + 1) / (self.draft_first_cost() + (k - 1) * self.draft_cost() + self.verify_cost(k + 1))

    def _ramp_limit(self, bucket: int) -> int:
        """The longest draft the ramp allows now (see _RAMP_FIRST). The ramp bounds what a wrong
        draft costs, so for free drafts it is a cost: up to twice as long, any draft whose verify
        batch is priced no dearer than the ramp's (batch costs are not monotone in rows: CPU
        kernels work in tiles)."""
        ramp = max(self._ramp, self._first_draft(bucket), self._sure_run(bucket))
        if ramp >= self.k_max or self._costs_drafting(bucket):
            return ramp
        costs = self.verify_costs(min(_RAMP_STRETCH * ramp, self.k_max) + 1)  # by rows: k tokens are k + 1
        within = np.flatnonzero(costs[ramp + 2 :] <= costs[ramp + 1])
        return ramp + 1 + int(within[-1]) if within.size else ramp

    def _risk_limit(self, bucket: int, probe: bool = False) -> int:
        """The longest draft whose loss, were it rejected at its first token, is within what this
        reply's drafts have saved so far plus what a first _RAMP_FIRST-token draft risks (see
        _RAMP_FIRST), or its match's (_first_draft); for any offer but a copy, and for a cost
        probe, less what they lost. Copying that pays draws long drafts within a few steps: what
        short drafts accepted whole save pays for long ones."""
        if 1 not in self.costs.median:
            return self.k_max
        k_max = self.k_max
        costs = self.verify_costs(k_max + 1)
        # drafts of 1..k_max tokens: k + 1 rows for one token, or for a copy, for the tokens it
        # surely agrees over (_RISK_DOUBT) and one more
        worst = costs[2:] - costs[1]
        if self._costs_drafting(bucket):
            worst = worst + self.draft_first_cost() + np.arange(k_max) * self.draft_cost()
        loss = worst - np.minimum(np.arange(1, k_max + 1), self._sure_run(bucket)) * costs[1]
        first = worst[min(_RAMP_FIRST, k_max) - 1]
        if self._saved_s <= 0:
            first *= 0.5 ** max(0.0, self._reply_departures.breaks - _RISK_PRIOR)
        counted = self._saved_s if probe or bucket not in COPY_KINDS else max(self._saved_s, 0.0)
        allowed = counted + first
        within = np.flatnonzero(loss <= allowed)
        return int(within[-1]) + 1 if within.size else 1

    def _first_draft(self, bucket: int) -> int:
        """The draft a reply may risk before its drafts have saved anything: _RAMP_FIRST tokens,
        or for a copy, as far as its matched context says it runs (_MATCH_RUN)."""
        if bucket not in COPY_KINDS or self._match_len < _MATCH_MIN or self._broke:
            return _RAMP_FIRST
        return max(_RAMP_FIRST, min(self.k_max, int(_MATCH_RUN * self._match_len)))

    def _sure_run(self, bucket: int) -> int:
        """How far this step's copy surely agrees (_RISK_DOUBT, _Departures.sure_run); 0 for other
        offers."""
        if bucket not in COPY_KINDS or self._match_len <= 0:
            return 0
        return int(min(self.k_max, self._reply_departures.sure_run(self._match_len, _RISK_DOUBT)))

    def _survival(self, bucket: int, n: int) -> np.ndarray | None:
        """A copy's chance of agreeing over its next 1..n tokens, from how long its context matched
        and how far copies run here (_Departures); None for other offers (priced by their kind's
        acceptance)."""
        if bucket not in COPY_KINDS or self._match_len <= 0 or n <= 0:
            return None
        return self._departures.survival(self._match_len, n)

    def _short_match(self, bucket: int) -> bool:
        """Is this a short match (a free offer but a copy), drafted only within the batch sizes
        timed here (see "A short match" above _SHORT_STREAK)?"""
        return bucket not in COPY_KINDS and not self._costs_drafting(bucket)

    def _short_match_rate(self, bucket: int) -> float:
        """A short match's acceptance as its drafts are priced: until this reply has drafted its
        kind, or copied, no more than its prior (see "Until a reply" above _SHORT_STREAK)."""
        if not (bucket in self._drafted_kinds or self._copy_drafted):
            return min(self.acceptance(bucket), _PRIOR_ACCEPT[bucket])
        return self._bucket(bucket).rate()

    def _explore_limit(self) -> int:
        """Never draft far past the largest batch measured (engine.costs.VerifyCosts.explore_limit)."""
        return self.costs.explore_limit()

    def choose(self, available: int, bucket: int = 0, match_len: int = 0) -> int:
        """The draft length for this step, given that the drafter can offer `available` tokens
        (and, for a match, how many tokens of context matched)."""
        return self.choose_among([(available, bucket)], match_len)[0]

    def choose_among(self, offers: list[tuple[int, int]], match_len: int = 0) -> tuple[int, int]:
        """The draft length for this step and the bucket of the offer it drafts from.

        offers: (tokens available, bucket) per drafter that can draft now. With a draft model,
        bucket 0 is the model and buckets 1-7 are n-gram matches in the text so far or in earlier
        replies, which cost nothing to draft (llama.cpp, too, asks its n-gram drafters before a
        draft model): the offer with the higher expected tokens per second wins. (0, bucket) is a
        plain step."""
        self.probing = False
        self._match_len = match_len
        offers = [(min(n, self.k_max), b) for n, b in offers if n > 0]
        if not offers:
            return 0, 0
        if not self.adaptive:
            return offers[0]
        if self.guard.wait(self.costs.median.get(1, 0.0)):
            return 0, 0
        if self.never_pays:  # the draft model is not run; free n-gram drafts may still pay
            offers = [(n, b) for n, b in offers if not self._costs_drafting(b)]
            if not offers:
                return 0, 0
        if self.guard.reference_stale(self.costs):
            return 0, 0  # the guard's reference: a plain step timed now
        best: tuple[float, int, int, int, int] | None = None  # rate, k, bucket, limit, reach
        best_rates = np.empty(0)
        timed = max(self.costs.low, default=1) - 1  # the longest draft whose batch was timed
        if self._short_streak >= _SHORT_STREAK:
            timed = self.k_max  # the reply repeats itself: its short matches explored as a copy's
        explore = self._explore_limit()  # (the same for every offer)
        for available, bucket in offers:
            short = self._short_match(bucket)
            if timed <= 0 and short:
                continue  # (before the limits below: the common case in open text, every step)
            rates = None
            if short:
                # The ramp and the risk limit only shorten a draft: where no length within the
                # others beats a plain step, none within them does (most steps of open text).
                outer = min(available, explore, timed)
                rates = self.expected_rates(outer, bucket, self._short_match_rate(bucket))
                if float(rates[1:].max(initial=0.0)) <= rates[0]:
                    continue
            reach = limit = min(available, explore, self._ramp_limit(bucket), self._risk_limit(bucket))
            if rates is not None:  # a short match: chosen only where its batch was timed, explored past it
                limit = min(limit, timed)
                rates = rates[: limit + 1]
            else:
                survival = self._survival(bucket, limit)
                first_copy = survival is None and bucket in COPY_KINDS and not self._copy_drafted
                prior = max(self.acceptance(bucket), _PRIOR_ACCEPT[bucket]) if first_copy else None
                if self._costs_drafting(bucket):
                    prior = self._model_rate()
                rates = self.expected_rates(limit, bucket, prior, survival)
            k = 1 + int(np.argmax(rates[1:]))
            if rates[k] > rates[0] and (best is None or rates[k] > best[0]):
                best, best_rates = (float(rates[k]), k, bucket, limit, reach), rates
        model = next(((n, b) for n, b in offers if self._costs_drafting(b)), None)
        if best is not None:
            _, best_k, bucket, limit, reach = best
            if model is not None and not self._costs_drafting(bucket):
                # The text's drafts win; the draft model is not chosen, and like a plain step
                # this counts toward its next probe (else its estimates, priors at first, would
                # never be measured while the text repeats itself).
                self._plain_steps += 1
                if self._plain_steps >= self._probe_interval:
                    return self._probe(*model)
            else:
                self._plain_steps = 0
            self._n_spec_steps += 1
            if best_k < reach and self._n_spec_steps % _EXPLORE_EVERY == 0:
                # Timings are noisy (one slow sample can make a batch size look too dear to
                # ever try again): now and then try a longer draft and let its cost be measured.
                # A draft model's tokens cost decodes, and a short match's batches past those
                # timed are guesses: those double.
                if self._costs_drafting(bucket) or reach > limit:
                    return min(reach, 2 * best_k), bucket
                return self._explore_length(best_rates, best_k, limit), bucket
            return best_k, bucket
        self._plain_steps += 1
        if self._plain_steps >= self._probe_interval:
            # Acceptance learned from a bad patch would otherwise never be re-measured. Free
            # offers that are observed (`observe`) are re-measured every step for nothing.
            probe = model or (None if self._observes else offers[0])
            if probe is not None:
                return self._probe(*probe)
        # Observations re-measure a free offer's acceptance, not what drafting it costs: a verify
        # batch once timed on a busy moment would keep an offer that is usually right from ever
        # being drafted. Such an offer gets a probe now and then, a reply's first draft length
        # (a batch size this short is cheap to be wrong about, and timed afresh), once a process
        # for each size: a size this process's steps have timed is priced as it costs now (its
        # price is the lowest of its last timings, so one busy moment does not raise it), and in
        # text where such offers are right 60% of the time each further probe lost half a plain
        # step (mixed work: 12 a reply). _plain_steps counts the plain steps since one was
        # drafted: no probe above resets it where offers are observed and there is no model.
        if self._observes and model is None and self._plain_steps >= _COST_PROBE_STEPS:
            available, bucket = max(offers, key=lambda offer: self.acceptance(offer[1]))
            if self.acceptance(bucket) >= _COST_PROBE_ACCEPTANCE:
                self._plain_steps = 0
                k = min(available, self._explore_limit(), _RAMP_FIRST, self._risk_limit(bucket, probe=True))
                if k + 1 not in self.costs.live:  # (a size this process has timed is priced as it is now)
                    self.probing = True
                    return k, bucket
        return 0, 0

    @staticmethod
    def _explore_length(rates: np.ndarray, best_k: int, limit: int) -> int:
        """A longer draft than the best known, to measure its batch: twice the best, or the longest
        priced within _EXPLORE_LOSS of the best where that is longer. Sizes past the largest
        measured are priced along the slope measured below them, and where a CPU's cost per row
        falls only at the largest batches (its kernels' tiles) doubling from a best of 16 stops at
        32, priced alike, and the cheapest size is never timed."""
        near = np.flatnonzero(rates[best_k : limit + 1] >= (1 - _EXPLORE_LOSS) * rates[best_k])
        return max(min(limit, 2 * best_k), best_k + int(near[-1]) if near.size else 0)

    def _probe(self, available: int, bucket: int) -> tuple[int, int]:
        """A short draft from an offer not chosen lately, to measure it again."""
        self._plain_steps = 0
        self._probe_interval = min(self._probe_interval * 2, _PROBE_MAX)
        limit = min(available, self._explore_limit(), self._ramp_limit(bucket))
        # A one-token probe re-measures n-gram acceptance for the least: a longer one costs more
        # verify rows. A draft model's probe is a reply's first draft length (it stops where it
        # is unsure): one accepted token at a time moves its acceptance too slowly to ever draft.
        self.probing = True
        return (min(limit, _RAMP_FIRST) if self._costs_drafting(bucket) else 1), bucket

    def observe(self, bucket: int, accepted: bool) -> None:
        """A free offer (an n-gram match) that was not drafted this step, its first token checked
        against the token the step emitted: whether drafting it would have been accepted, learned
        for nothing. Where this is told, such offers are not probed: a probe drafts one token,
        and a 2-row verify can cost nearly two 1-row steps, a plain token lost each time."""
        if self._costs_drafting(bucket):
            return
        self._observes = True
        if self._short_match(bucket):
            self._short_streak = self._short_streak + 1 if accepted else 0
        acc = self._bucket(bucket)
        acc.accepted = _EMA * acc.accepted + accepted
        acc.trials = _EMA * acc.trials + 1

    def probe_affords(self, one_off_s: float) -> bool:
        """May this step's probe pay a one-off (a loaded draft model reading what was decoded
        plainly since it last drafted)? Within what a probe may lose after a suspension."""
        plain_s = self.costs.median.get(1)
        return self.probing and plain_s is not None and one_off_s <= RESUME_BUDGET_TOKENS * plain_s

    def record(
        self,
        bucket: int,
        n_drafted: int,
        n_accepted: int,
        step_s: float,
        draft_s: float = 0.0,
        draft_first_s: float | None = None,
        n_more: int = 0,
        learn: bool = True,
        timed: bool = True,
    ) -> None:
        """One step: k drafted, n accepted, its whole wall time, and the part spent drafting;
        of that, the draft's first decode (None: not told, all decodes alike) and how many
        decodes followed it. learn=False: its acceptance is not counted (a draft model's draft
        where the text was being copied: the text drafts such text, and the model's 100% there
        says nothing of it on fresh text, where it is chosen; its costs still count). timed=False:
        the step's time overstates its batch size's cost (its batch grew llama.cpp's buffers): a
        sample only where no timing of this size or a larger one prices it (the lowest of a size's
        samples is its price, so the next step of the size corrects it); the guard still judges it."""
        n_rows = n_drafted + 1
        if timed or not any(n >= n_rows for n in self.costs.low):
            self.costs.add(n_rows, step_s - draft_s)
            self.costs.live.add(n_rows)
        if n_drafted == 0:
            if draft_s > 0:
                # A draft model was asked and drafted nothing (unsure of its first token): a
                # decode spent for no token. It counts as a refusal (so a draft model that is
                # seldom sure is seldom asked: see expected_rates), its decode is its cost per
                # drafted token as far as anyone can tell (one that is never sure must still be
                # found too slow to run), and the loss counts against the guard. Not a rejected
                # draft: the target judged nothing (counted as one, an unsure first token kept a
                # draft that is always accepted from ever running).
                self._note_draft_cost(draft_s if draft_first_s is None else draft_first_s, 0.0, 0)
                self._note_ask(refused=True)
                self._guard(1, self._usual(n_rows, step_s, draft_s))
            else:
                self.guard.note_plain_step()
            return
        if draft_s > 0:
            self._note_ask(refused=False)
        self.guard.note_speculative_step()
        self._copy_drafted = self._copy_drafted or bucket in COPY_KINDS
        self._drafted_kinds.add(bucket)
        if self._short_match(bucket):
            self._short_streak = self._short_streak + 1 if n_accepted > 0 else 0
        if n_accepted == n_drafted:
            self._whole_tokens += n_drafted
            if self._whole_tokens >= _RAMP_FIRST:
                # Short drafts accepted whole, 4 tokens' worth: this reply is one that drafts well
                # (copying), and the model's own choice of length takes over (rather than doubling
                # step by step). Counted in tokens, not drafts: where 3 rows cost more than 4, the
                # model drafts 3 at most.
                self._ramp = max(self.k_max, 1)
        else:
            # Halved, not reset: an edit in copied text rejects a draft now and then, and the
            # copying goes on after it.
            self._broke = True
            self._ramp = max(_RAMP_FIRST, n_accepted + 1, self._ramp // 2)
        if draft_s > 0:
            if draft_first_s is None:  # not told: every drafted token alike
                self._note_draft_cost(
                    draft_s / n_drafted, draft_s * (n_drafted - 1) / n_drafted, n_drafted - 1
                )
            else:
                self._note_draft_cost(draft_first_s, draft_s - draft_first_s, n_more)
        if bucket in COPY_KINDS and self._match_len > 0:
            self._departures.learn(self._match_len, n_drafted, n_accepted)
            self._reply_departures.learn(self._match_len, n_drafted, n_accepted)
        if learn:
            acc = self._bucket(bucket)
            # Geometric model: every accepted token is a success; the first rejection a failure.
            acc.accepted = _EMA * acc.accepted + n_accepted
            acc.trials = _EMA * acc.trials + n_accepted + (1 if n_accepted < n_drafted else 0)
        if (self._costs_drafting(bucket) or not self.draft_costs_time) and self.expected_rate(
            n_drafted, bucket
        ) > self.expected_rate(0, bucket):
            # (Beside a draft model, the text's drafts paying says nothing of the model.)
            self._probe_interval = _PROBE_FIRST
        self._guard(n_accepted + 1, self._usual(n_rows, step_s, draft_s))

    def _note_ask(self, refused: bool) -> None:
        self._refusals = _EMA * self._refusals + refused
        self._asks = _EMA * self._asks + 1

    def _note_draft_cost(self, first_s: float, more_s: float, n_more: int) -> None:
        """A draft's first decode took first_s (0: it was a catch-up, priced apart), and n_more
        decodes after it more_s."""
        if not self.draft_costs_time:
            return
        # Against a plain step as usually timed (the median), as the draft's own decodes are:
        # priced by draft_cost() at the lowest plain step, the ratio sheds the same noise.
        plain_s = self.costs.median.get(1) or self.verify_cost(1)
        if first_s > 0:
            r = self._draft_first_ratio
            ratio = first_s / plain_s
            self._draft_first_ratio = ratio if r is None else _EMA * r + (1 - _EMA) * ratio
        if n_more > 0 and more_s > 0:
            r = self._draft_ratio
            ratio = more_s / n_more / plain_s
            self._draft_ratio = ratio if r is None else _EMA * r + (1 - _EMA) * ratio
        elif self._draft_ratio is None and first_s > 0:
            # Only first decodes seen so far: the later ones cost no more than a first.
            self._draft_ratio = first_s / plain_s

    def _usual(self, n_rows: int, step_s: float, draft_s: float) -> float:
        return self.guard.usual(self.costs, n_rows, step_s, draft_s)

    def _guard(self, n_emitted: int, step_s: float) -> None:
        """Throughput guard: the loss of this speculative step against plain steps measured live."""
        if self.adaptive:
            self._saved_s += self.guard.judge(self.costs, n_emitted, step_s)

    def first_reply_sizes(self, n_batch: int, max_tokens: int = FIRST_REPLY_MIN_TOKENS) -> list[int]:
        """FIRST_REPLY_SIZES with no timing yet, where nothing beyond a plain step is timed (a
        cost cache that knows some sizes is left to learn the rest as replies go) and the reply
        may be long enough to repay the timing (FIRST_REPLY_MIN_TOKENS)."""
        if not self.adaptive or max_tokens < FIRST_REPLY_MIN_TOKENS or any(n > 1 for n in self.costs.low):
            return []
        return self.untimed(n for n in FIRST_REPLY_SIZES if n <= min(self.k_max + 1, n_batch))

    def untimed(self, sizes: Iterable[int]) -> list[int]:
        """Those of these verify batch sizes with no timing yet (none in this process, none from
        the cost cache): what Engine.calibrate has left to time."""
        return self.costs.untimed(sizes)

    def note_timing(self, n_rows: int, seconds: float) -> None:
        """A verify batch of n_rows timed outside a reply (Engine.calibrate), priced as a step of
        that size is: its lowest recent timing. Not a step of this process's replies: the guard
        still takes its plain reference from a reply's own plain step."""
        self.costs.add(n_rows, seconds)

    # -- what survives the process (engine.costcache) --------------------------------------------

    def export(self) -> dict[str, object]:
        """What this run measured, to seed the next process on the same machine and pair."""
        return {
            "step_s": self.costs.export(),
            **{key: getattr(self, attr) for key, attr in _SEEDED.items()},
            "acceptance": {
                str(b): [round(a.accepted, 4), round(a.trials, 4)] for b, a in self._acceptance.items()
            },
            "departures": [round(self._departures.breaks, 4), round(self._departures.exposure, 4)],
        }

    def seed(self, data: dict[str, object]) -> None:
        """Start from a previous run's measurements (already validated by engine.costcache)."""
        step_s = data.get("step_s")
        if isinstance(step_s, dict):
            self.costs.seed(step_s)
        for key, attr in _SEEDED.items():
            value = data.get(key)
            if isinstance(value, int | float) and value > 0:
                setattr(self, attr, float(value))
        departures = data.get("departures")
        if (
            isinstance(departures, list)
            and len(departures) == 2
            and all(isinstance(x, int | float) and x > 0 for x in departures)
        ):
            self._departures = _Departures(float(departures[0]), float(departures[1])).carried()
        acceptance = data.get("acceptance")
        if isinstance(acceptance, dict):
            for b, (accepted, trials) in acceptance.items():
                acc = self._bucket(int(b))
                cap = _SEED_TRIALS_DRAFT_MODEL if self._costs_drafting(int(b)) else _SEED_TRIALS
                scale = min(1.0, cap / trials) if trials > 0 else 1.0
                acc.accepted, acc.trials = float(accepted) * scale, float(trials) * scale

    def fresh(self) -> DraftLengthController:
        """A controller with this one's measured costs and nothing else (fresh benchmark runs)."""
        new = DraftLengthController(self.k_max, self.adaptive, self.draft_costs_time)
        new.seed({key: value for key, value in self.export().items() if key != "acceptance"})
        return new
