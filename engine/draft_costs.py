"""What a draft model costs: its decodes, its refusals, its load and its prompt reads.

Decodes are kept as ratios to a plain step (a busier or quieter machine slows both alike, where
two absolute timings would drift apart); a draft's first decode apart from the rest (it reads what
the draft has not seen: after a draft accepted whole, 2 tokens). Loads and prompt reads keep the
lowest seen (a busy moment says nothing about the next). A draft model found too slow is timed
afresh now and then, the gap doubling. n-gram drafts cost none of this (enabled False). Runs
behind each constant: docs/design-engine.md ("The controller's constants").
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.acceptance import EMA, PRIOR_WEIGHT, Acceptance

PRIOR_DRAFT_COST = 0.2  # a draft model's decode, relative to a plain step, until measured
HOPEFUL_REFUSALS = 0.25  # a model refusing this share of its asks is priced at its mean, not hopefully
PREFILL_MIN_TOKENS = 16  # shorter prompt reads are mostly fixed costs: no prefill ratio from them
REMEASURE_FIRST = 8  # replies before a draft model found too slow is timed afresh (doubling)...
REMEASURE_MAX = 1024  # ...at most this many replies apart
# The single measured figures a cost cache carries (its key: the attribute here).
SEEDED = {
    "draft_ratio": "draft_ratio",
    "draft_first_ratio": "draft_first_ratio",
    "draft_load_s": "load_s",
    "draft_prefill_ratio": "prefill_ratio",
    "target_prefill_token_s": "target_prefill_token_s",
}


@dataclass
class DraftModelCosts:
    enabled: bool = False  # a draft model costs a decode per token (False: n-gram lookup, ~nothing)
    draft_ratio: float | None = None  # a drafted token after the first, relative to a plain step
    draft_first_ratio: float | None = None  # a draft's first decode, relative to a plain step
    load_s: float | None = None  # seconds to load the draft model (a one-off per process)
    # Reading a prompt token relative to the target (compute-bound, unlike decoding: standing in
    # for it, the decode ratio over-charged a costly target's draft so much it was never loaded).
    prefill_ratio: float | None = None
    target_prefill_token_s: float | None = None  # the target's prefill, seconds per token (lowest)
    refusals: float = 0.0  # asks that drafted nothing (unsure of the first token), EMA-weighted...
    asks: float = 0.0  # ...among all asks
    replies_not_run: int = 0  # replies since the model was last found too slow
    remeasure_every: int = REMEASURE_FIRST

    def draft_cost(self, plain_s: float) -> float:
        """Seconds per drafted token after a draft's first (0 for n-gram lookup)."""
        if not self.enabled:
            return 0.0
        ratio = self.draft_ratio if self.draft_ratio is not None else PRIOR_DRAFT_COST
        return ratio * plain_s

    def draft_first_cost(self, plain_s: float) -> float:
        """Seconds for a draft's first token (its decode reads what the draft has not seen)."""
        if not self.enabled:
            return 0.0
        ratio = self.draft_first_ratio if self.draft_first_ratio is not None else self.draft_ratio
        return (ratio if ratio is not None else PRIOR_DRAFT_COST) * plain_s

    def refusal_rate(self) -> float:
        """How often the model, asked for a draft, offers none (no prior refusals)."""
        return self.refusals / (self.asks + PRIOR_WEIGHT) if self.enabled else 0.0

    def priced_rate(self, acc: Acceptance) -> float:
        """The model's acceptance as drafts are priced: hopeful on thin evidence, unless it has
        been refusing to draft (evidence that no accepted token ever adds to)."""
        return acc.hopeful_rate() if self.refusal_rate() < HOPEFUL_REFUSALS else acc.rate()

    def note_ask(self, refused: bool) -> None:
        self.refusals = EMA * self.refusals + refused
        self.asks = EMA * self.asks + 1

    def note_decodes(self, first_s: float, more_s: float, n_more: int, plain_s: float) -> None:
        """A draft's first decode took first_s (0: a catch-up, priced apart), and n_more decodes
        after it more_s; plain_s: a plain step as usually timed (the median), which sheds the
        same noise as the draft's own decodes."""
        if not self.enabled:
            return
        if first_s > 0:
            r = self.draft_first_ratio
            ratio = first_s / plain_s
            self.draft_first_ratio = ratio if r is None else EMA * r + (1 - EMA) * ratio
        if n_more > 0 and more_s > 0:
            r = self.draft_ratio
            ratio = more_s / n_more / plain_s
            self.draft_ratio = ratio if r is None else EMA * r + (1 - EMA) * ratio
        elif self.draft_ratio is None and first_s > 0:
            self.draft_ratio = first_s / plain_s  # only first decodes seen: later ones cost no more

    def note_step(
        self, n_drafted: int, draft_s: float, first_s: float | None, n_more: int, plain_s: float
    ) -> None:
        """A step's drafting: draft_s in all, its first decode first_s (None: not told, every
        decode alike) and n_more decodes after it. Drafting nothing (n_drafted 0: unsure of its
        first token) is a refusal, not a rejected draft, and its decode its cost per token as far
        as anyone can tell (one never sure must still be found too slow to run)."""
        if draft_s <= 0:
            return
        self.note_ask(refused=n_drafted == 0)
        if n_drafted == 0:
            self.note_decodes(draft_s if first_s is None else first_s, 0.0, 0, plain_s)
        elif first_s is None:
            self.note_decodes(
                draft_s / n_drafted, draft_s * (n_drafted - 1) / n_drafted, n_drafted - 1, plain_s
            )
        else:
            self.note_decodes(first_s, draft_s - first_s, n_more, plain_s)

    def note_load(self, seconds: float) -> None:
        """A measured load: the fastest seen is its cost (a figure too high would keep the model
        from ever being loaded, and timed, again)."""
        if self.load_s is None or seconds < self.load_s:
            self.load_s = seconds

    def note_prefill(self, draft_s: float, n_draft: int, target_s: float, n_target: int) -> None:
        """The model read n_draft prompt tokens in draft_s where the target read n_target in
        target_s. Reads too short to time are ignored; the lowest ratio seen is kept."""
        if n_draft < PREFILL_MIN_TOKENS or n_target < PREFILL_MIN_TOKENS or draft_s <= 0 or target_s <= 0:
            return
        target_token_s = target_s / n_target
        if self.target_prefill_token_s is None or target_token_s < self.target_prefill_token_s:
            self.target_prefill_token_s = target_token_s
        ratio = (draft_s / n_draft) / target_token_s
        if self.prefill_ratio is None or ratio < self.prefill_ratio:
            self.prefill_ratio = ratio

    def one_off_s(self, prompt_s: float, loaded: bool = False) -> float:
        """The load (unless loaded) and reading text that took the target prompt_s (at the
        prefill ratio; until one is measured, the decode ratio)."""
        ratio = self.prefill_ratio
        if ratio is None:
            ratio = self.draft_ratio if self.draft_ratio is not None else PRIOR_DRAFT_COST
        return (0.0 if loaded else self.load_s or 0.0) + ratio * prompt_s

    def target_read_s(self, n_tokens: int, plain_s: float) -> float:
        """What reading n_tokens costs the target: at the lowest prefill cost per token seen,
        else at a 1-row step's cost (plain_s), which no prefill exceeds."""
        per_token = self.target_prefill_token_s
        if per_token is None:
            per_token = plain_s
        return n_tokens * per_token

    def begin_reply(self, never_pays: bool) -> None:
        """A new reply: a model found too slow is measured again every so many replies (the
        guard bounds what that costs)."""
        if not never_pays:
            return
        self.replies_not_run += 1
        if self.replies_not_run >= self.remeasure_every:
            self.replies_not_run = 0
            self.remeasure_every = min(2 * self.remeasure_every, REMEASURE_MAX)
            self.draft_ratio = None

    def export(self) -> dict[str, float | None]:
        return {key: getattr(self, attr) for key, attr in SEEDED.items()}

    def seed(self, data: dict[str, object]) -> None:
        for key, attr in SEEDED.items():
            value = data.get(key)
            if isinstance(value, int | float) and value > 0:
                setattr(self, attr, float(value))
