"""Who drafts each step, and how far: the policy behind the speculative step (engine.speculative).

The step asks `propose` for a draft and tells `learn` what became of it; nothing else of the
policy shows in the loop. Behind those two calls: the drafters (an n-gram drafter, a draft
model, or a draft model with the text's own n-gram matches beside it) and the draft-length
controller (engine.adaptive), which prices each offer from measured step costs and learned
acceptance per DrafterKind. A replay (engine.replay) drives the same two calls with a simulated
clock, so what it reports is what this code decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.adaptive import DraftLengthController
from engine.config import SamplingParams
from engine.drafters import Draft, ModelDrafter, NgramDrafter
from engine.events import DraftingState, DraftSource, Speculation
from engine.kinds import COPY_KINDS, MEMORY_KINDS, DrafterKind


@dataclass(frozen=True)
class Proposal:
    """A step's draft, and the kind of drafter it came from (what its acceptance is learned as)."""

    draft: Draft
    kind: DrafterKind = DrafterKind.MODEL
    source: DraftSource = DraftSource.NONE  # where the drafted stretch came from (the reply's tint)

    @property
    def tokens(self) -> list[int]:
        return self.draft.tokens


NO_DRAFT = Proposal(Draft([]))


class DraftPolicy:
    def __init__(
        self,
        drafter: NgramDrafter | ModelDrafter | None,
        controller: DraftLengthController | None,
        lookup: NgramDrafter | None = None,
    ) -> None:
        self.drafter = drafter
        self.controller = controller
        # Beside a draft model: n-gram matches in the text so far, free to draft. Each step the
        # controller drafts from whichever it expects more tokens per second of (choose_among).
        self.lookup = lookup if isinstance(drafter, ModelDrafter) else None
        self.active: NgramDrafter | ModelDrafter | None = drafter  # this reply's drafter (None: plain)
        self._use_model = True  # this reply may run the draft model (not: too short to repay it)
        self._use_memory = True  # this reply may draft from earlier replies (NgramDrafter.memory)
        self.skipped_note = ""  # why this reply does without its draft model, if it does
        self.reply_kind: Speculation = self.speculation  # what this reply's stats say it ran
        # This step's n-gram offer when it was not drafted: (its first token, its kind), checked
        # against the emitted token (DraftLengthController.observe).
        self._unused_offer: tuple[int, DrafterKind] | None = None
        # This step's text offer was copying: a draft model's draft then does not count toward
        # its acceptance (DraftLengthController.record's learn).
        self._text_copying = False

    @property
    def speculation(self) -> Speculation:
        return Speculation.NONE if self.drafter is None else self.drafter.kind

    @property
    def draft_llama_s(self) -> float:
        """Seconds the draft model has spent inside llama.cpp (0 for n-gram drafting)."""
        return self.drafter.llama_s if isinstance(self.drafter, ModelDrafter) else 0.0

    # -- a reply ------------------------------------------------------------------------------

    def begin_reply(self, speculate: bool, use_memory: bool) -> None:
        self.active = self.drafter if speculate else None
        self.reply_kind = self.speculation if speculate else Speculation.NONE
        self._use_memory = use_memory
        self._use_model = True
        self.skipped_note = ""
        if self.controller is not None:
            self.controller.begin_reply()

    def read_prompt(
        self, prompt: list[int], max_tokens: int, target_read_s: float, n_target_read: int
    ) -> float:
        """After the target's prefill: let a draft model read the prompt too where this reply can
        repay it (else this reply does without the model). Seconds spent."""
        drafter, controller = self.active, self.controller
        if not isinstance(drafter, ModelDrafter) or controller is None or not controller.will_draft:
            return 0.0
        one_off_s = controller.one_off_draft_s(target_read_s) if not drafter.loaded else 0.0
        if not (drafter.loaded or controller.pays_back(max_tokens, one_off_s)):
            # Loading the draft model costs more than it could save in a reply this short.
            if self.lookup is None:
                self.active = None
            self._use_model = False
            self.skipped_note = f"a reply this short cannot repay loading the draft model: {self._instead()}"
            return 0.0
        # Done here, the draft's reading is part of the prefill the user waits for anyway, and
        # the first drafting step starts on time.
        was_loaded = drafter.loaded
        spent_s = drafter.prefill(prompt)
        if not was_loaded and drafter.load_s is not None and drafter.loaded:
            controller.note_draft_load(drafter.load_s)
        n_read, read_s = drafter.last_read
        controller.note_draft_prefill(read_s, n_read, target_read_s, n_target_read)
        return spent_s

    def start(self, ctx: list[int], document_spans: tuple[tuple[int, int], ...] = ()) -> None:
        """The reply's text begins (ctx: the prompt, extended in place as tokens are emitted;
        document_spans: its [start, end) ranges holding attached documents)."""
        if isinstance(self.active, NgramDrafter):
            self.active.begin(ctx, document_spans, self._use_memory)
        elif self.active is not None and self.lookup is not None:
            self.lookup.begin(ctx, document_spans, self._use_memory)

    def starts_copying(self, ctx: list[int]) -> bool:
        """Does the text so far end as an earlier stretch does, so that the reply starts by
        copying it (its n-gram offer is a copy)?"""
        drafter = self.active if isinstance(self.active, NgramDrafter) else self.lookup
        if drafter is None:
            return False
        _, kind = drafter.offer(ctx, 1, self._use_memory)
        return kind in COPY_KINDS

    # -- a step -------------------------------------------------------------------------------

    def propose(
        self, ctx: list[int], room: int, params: SamplingParams, rng: np.random.Generator
    ) -> Proposal:
        """This step's draft: at most `room` tokens, from the offer expected to pay best."""
        drafter, controller = self.active, self.controller
        self._unused_offer = None
        self._text_copying = False
        if drafter is None or controller is None or room <= 0:
            return NO_DRAFT
        if isinstance(drafter, NgramDrafter):
            candidates, kind = drafter.offer(ctx, min(controller.k_max, room), self._use_memory)
            kind = DrafterKind(kind)
            k = controller.choose(len(candidates), kind, drafter.match_len)
            if candidates and not k:
                self._unused_offer = candidates[0], kind
            return Proposal(Draft(candidates[:k]), kind, drafter.offer_source if k else DraftSource.NONE)
        return self._propose_beside_model(drafter, controller, ctx, room, params, rng)

    def _propose_beside_model(
        self,
        drafter: ModelDrafter,
        controller: DraftLengthController,
        ctx: list[int],
        room: int,
        params: SamplingParams,
        rng: np.random.Generator,
    ) -> Proposal:
        matched: list[int] = []
        text_kind = DrafterKind.MODEL
        offers: list[tuple[int, int]] = []
        if self.lookup is not None:
            matched, found = self.lookup.offer(ctx, min(controller.k_max, room), self._use_memory)
            text_kind = DrafterKind(found)
            if matched:
                offers.append((len(matched), text_kind))
                self._text_copying = text_kind in COPY_KINDS
        one_off, model_pays = None, False
        if self._use_model and drafter.load_error is None:
            # Loading the model, or reading all it has not seen (the prompt, when it did not read
            # it during the prefill; what was decoded plainly or drafted by n-gram meanwhile) is
            # a one-off paid now, within the reply: only where what is left of the reply can
            # repay it.
            unseen = drafter.unseen(ctx)
            if not drafter.loaded or unseen > ModelDrafter.CATCH_UP_TOKENS:
                one_off = controller.one_off_draft_s(controller.target_read_s(unseen), drafter.loaded)
            model_pays = one_off is None or controller.pays_back(room, one_off)
            if model_pays or not offers:
                offers.insert(0, (min(controller.k_max, room), DrafterKind.MODEL))
        k, chosen = controller.choose_among(offers, self.lookup.match_len if matched and self.lookup else 0)
        kind = DrafterKind(chosen)
        if matched and (k <= 0 or kind is DrafterKind.MODEL):
            self._unused_offer = matched[0], text_kind
        if k <= 0:
            return NO_DRAFT
        if kind is not DrafterKind.MODEL:
            assert self.lookup is not None
            return Proposal(Draft(matched[:k]), kind, self.lookup.offer_source)
        if (
            one_off is not None
            and not model_pays
            and not (drafter.loaded and controller.probe_affords(one_off))
        ):
            # (A probe of a loaded draft model catches up within a bounded loss: otherwise,
            # after a few plain steps, no probe could ever re-measure it.)
            return NO_DRAFT
        was_loaded = drafter.loaded
        draft = drafter.propose(ctx, k, params, rng)
        if not was_loaded and drafter.loaded and drafter.load_s is not None:
            controller.note_draft_load(drafter.load_s)
        return Proposal(draft, DrafterKind.MODEL, DraftSource.MODEL)

    def learn(self, proposal: Proposal, n_accepted: int, first_emitted: int, step_s: float) -> None:
        """What became of this step's proposal: how many drafted tokens the target kept, the first
        token the step emitted, and the step's wall time as the user waited for it."""
        controller = self.controller
        if controller is None:
            return
        if self._unused_offer is not None:
            offered, offer_kind = self._unused_offer
            controller.observe(offer_kind, first_emitted == offered)
        draft = proposal.draft
        controller.record(
            proposal.kind, len(draft.tokens), n_accepted, step_s, draft.draft_s, draft.first_s, draft.n_more,
            learn=proposal.kind is not DrafterKind.MODEL or not self._text_copying,
        )  # fmt: skip

    def counts_as_text(self, proposal: Proposal) -> bool:
        """Drafted from the text beside a draft model (the stats' n_drafted_text)?"""
        return proposal.kind is not DrafterKind.MODEL and isinstance(self.active, ModelDrafter)

    @staticmethod
    def counts_as_memory(proposal: Proposal) -> bool:
        """Drafted from an earlier reply (the stats' n_drafted_memory)?"""
        return proposal.kind in MEMORY_KINDS

    # -- what the reply shows -----------------------------------------------------------------

    def note_kind(self) -> DraftingState:
        if self.skipped_note:
            return DraftingState.SHORT_REPLY
        drafter, controller = self.active, self.controller
        if isinstance(drafter, ModelDrafter) and drafter.load_error:
            return DraftingState.DRAFT_LOAD_FAILED
        if drafter is None or controller is None or not controller.adaptive:
            return DraftingState.DRAFTING
        if isinstance(drafter, ModelDrafter) and controller.never_pays:
            return DraftingState.DRAFT_TOO_SLOW
        if controller.suspended:
            return DraftingState.SUSPENDED
        return DraftingState.DRAFTING

    def note(self) -> str:
        kind = self.note_kind()
        if kind is DraftingState.SHORT_REPLY:
            return self.skipped_note
        if kind is DraftingState.DRAFT_LOAD_FAILED and isinstance(self.active, ModelDrafter):
            return f"the draft model could not be loaded ({self.active.load_error}): {self._instead()}"
        if kind is DraftingState.DRAFT_TOO_SLOW:
            return f"the draft model is too slow to help on this machine: {self._instead()}"
        if kind is DraftingState.SUSPENDED:
            return "drafts stopped paying: decoding plainly for now, trying again soon"
        return ""

    def _instead(self) -> str:
        """What a reply does without its draft model."""
        return "decoding plainly" if self.lookup is None else "drafting from the text so far only"
