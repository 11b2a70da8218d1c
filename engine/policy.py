"""Who drafts each step, and how far: the policy behind the speculative step (engine.speculative).

The step asks `propose` for a draft and tells `learn` what became of it; nothing else of the
policy shows in the loop. Behind those two calls: the drafters (an n-gram drafter, a draft
model, or a draft model with the text's own n-gram matches beside it) and the draft-length
controller (engine.adaptive), which prices each offer from measured step costs and learned
acceptance per DrafterKind. A replay (engine.replay) drives the same two calls with a simulated
clock, so what it reports is what this code decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.adaptive import DraftLengthController
from engine.config import SamplingParams
from engine.copies import CopyTrail
from engine.drafters import Draft, ModelDrafter, NgramDrafter
from engine.events import DraftingState, DraftSource, Speculation
from engine.kinds import COPY_KINDS, DrafterKind, Offer


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


def _one_off_s(drafter: ModelDrafter, controller: DraftLengthController, read_s: float) -> float:
    """A draft model's one-off cost to a reply now: the wait for its load (none once loaded; a
    load begun beside the target's is mostly done, engine.loading) and reading text that took
    the target read_s."""
    load_left_s = drafter.load_left_s(controller.draft.load_s or 0.0)
    return controller.draft.one_off_s(read_s, loaded=True) + load_left_s


class DraftPolicy:
    """text: the n-gram drafter (free offers: matches in everything the index holds); model: a draft
    model (costs a decode a token). Either, both (each step the controller drafts from whichever
    it expects more tokens per second of: choose_among), or neither (plain decoding)."""

    def __init__(
        self,
        controller: DraftLengthController | None,
        text: NgramDrafter | None = None,
        model: ModelDrafter | None = None,
    ) -> None:
        self.controller = controller
        self.text = text
        self.model = model
        self._speculating = False  # this reply drafts (not: plain, or skipped its only drafter)
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
        # The reply's copy at its last offer, resumed after an edit (engine.copies.CopyTrail).
        self._trail = CopyTrail()

    @property
    def speculation(self) -> Speculation:
        if self.model is not None:
            return self.model.kind
        return Speculation.NONE if self.text is None else self.text.kind

    @property
    def draft_llama_s(self) -> float:
        """Seconds the draft model has spent inside llama.cpp (0 for n-gram drafting)."""
        return self.model.llama_s if self.model is not None else 0.0

    # -- a reply ------------------------------------------------------------------------------

    def begin_reply(self, speculate: bool, use_memory: bool) -> None:
        self._speculating = speculate and (self.text is not None or self.model is not None)
        self.reply_kind = self.speculation if speculate else Speculation.NONE
        self._use_memory = use_memory
        self._use_model = True
        self.skipped_note = ""
        if self.controller is not None:
            self.controller.begin_reply()

    def read_prompt(
        self,
        prompt: list[int],
        max_tokens: int,
        target_read_s: float,
        n_target_read: int,
        cancel: Callable[[], bool] | None = None,
    ) -> float:
        """After the target's prefill: let a draft model read the prompt too where this reply can
        repay it (else this reply does without the model). Seconds spent. `cancel`: a Stop, seen
        inside the draft's reading as inside the target's (LlamaRunner.decode)."""
        drafter, controller = self.model, self.controller
        if drafter is None or not self._speculating or controller is None or not controller.will_draft:
            return 0.0
        # (On a pair not yet measured, a short reply cannot repay even reading the prompt.)
        one_off_s = _one_off_s(drafter, controller, target_read_s)
        if not controller.pays_back(max_tokens, one_off_s):
            if self.text is None:
                self._speculating = False
            self._use_model = False
            self.skipped_note = f"a reply this short cannot repay starting the draft model: {self._instead()}"
            return 0.0
        # Done here, the draft's reading is part of the prefill the user waits for anyway, and
        # the first drafting step starts on time.
        spent_s = drafter.prefill(prompt, cancel)
        if (load_s := drafter.take_load_s()) is not None:
            controller.draft.note_load(load_s)
        n_read, read_s = drafter.last_read
        controller.draft.note_prefill(read_s, n_read, target_read_s, n_target_read)
        return spent_s

    def start(self, ctx: list[int], document_spans: tuple[tuple[int, int], ...] = ()) -> None:
        """The reply's text begins (ctx: the prompt, extended in place as tokens are emitted;
        document_spans: its [start, end) ranges holding attached documents)."""
        self._trail.clear()
        if self.controller is not None:
            self.controller.costs.note_text(len(ctx))
        if self._speculating and self.text is not None:
            self.text.begin(ctx, document_spans, self._use_memory)

    def _text_offer(
        self, text: NgramDrafter, ctx: list[int], k_max: int
    ) -> tuple[list[int], DrafterKind, int]:
        """The text's offer: its candidates, kind and match length, a resumed copy's as a copy's
        (engine.copies.CopyTrail)."""
        candidates, kind = text.offer(ctx, k_max, self._use_memory)
        match_len, at = text.match_len, text.offer_at
        if candidates:
            breaks = 0 if self.controller is None else round(self.controller.copies.reply_breaks)
            kind, match_len = self._trail.resume(kind, match_len, at, len(ctx), breaks)
            self._trail.offered(kind, at, len(ctx), match_len)
        return candidates, kind, match_len

    def starts_copying(self, ctx: list[int]) -> bool:
        """Does the text so far end as an earlier stretch does, so that the reply starts by
        copying it (its n-gram offer is a copy)?"""
        drafter = self.text
        if drafter is None or not self._speculating:
            return False
        _, kind = drafter.offer(ctx, 1, self._use_memory)
        return kind in COPY_KINDS or drafter.match_len >= NgramDrafter.COPY_START

    # -- a step -------------------------------------------------------------------------------

    def propose(
        self, ctx: list[int], room: int, params: SamplingParams, rng: np.random.Generator
    ) -> Proposal:
        """This step's draft: at most `room` tokens, from the offer expected to pay best."""
        controller, text, model = self.controller, self.text, self.model
        self._unused_offer = None
        self._text_copying = False
        if not self._speculating or controller is None or room <= 0:
            return NO_DRAFT
        if model is None:
            assert text is not None  # speculating: one drafter at least
            candidates, kind, match_len = self._text_offer(text, ctx, min(controller.k_max, room))
            k = controller.choose(len(candidates), kind, match_len)
            if candidates and not k:
                self._unused_offer = candidates[0], kind
            return Proposal(Draft(candidates[:k]), kind, text.offer_source if k else DraftSource.NONE)
        return self._propose_beside_model(model, controller, ctx, room, params, rng)

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
        match_len = 0
        offers: list[Offer] = []
        if self.text is not None:
            matched, text_kind, match_len = self._text_offer(self.text, ctx, min(controller.k_max, room))
            if matched:
                offers.append(Offer(text_kind, len(matched)))
                self._text_copying = text_kind in COPY_KINDS
        one_off, model_pays = None, False
        if self._use_model and drafter.load_error is None:
            # Loading the model, or reading all it has not seen (the prompt, when it did not read
            # it during the prefill; what was decoded plainly or drafted by n-gram meanwhile) is
            # a one-off paid now, within the reply: only where what is left of the reply can
            # repay it.
            unseen = drafter.unseen(ctx)
            if not drafter.loaded or unseen > ModelDrafter.CATCH_UP_TOKENS:
                one_off = _one_off_s(
                    drafter, controller, controller.draft.target_read_s(unseen, controller.costs.cost(1))
                )
            model_pays = one_off is None or controller.pays_back(room, one_off)
            if model_pays or not offers:
                offers.insert(0, Offer(DrafterKind.MODEL, min(controller.k_max, room)))
        choice = controller.choose_among(offers, match_len if matched else 0)
        k, kind = choice.k, choice.kind
        if matched and (k <= 0 or kind is DrafterKind.MODEL):
            self._unused_offer = matched[0], text_kind
        if k <= 0:
            return NO_DRAFT
        if kind is not DrafterKind.MODEL:
            assert self.text is not None
            return Proposal(Draft(matched[:k]), kind, self.text.offer_source)
        if (
            one_off is not None
            and not model_pays
            and not (drafter.loaded and controller.probe_affords(one_off))
        ):
            # (A probe of a loaded draft model catches up within a bounded loss: otherwise,
            # after a few plain steps, no probe could ever re-measure it.)
            return NO_DRAFT
        draft = drafter.propose(
            ctx, k, params, rng, controller.acceptance(0) if controller.adaptive else None
        )
        if (load_s := drafter.take_load_s()) is not None:
            controller.draft.note_load(load_s)
        return Proposal(draft, DrafterKind.MODEL, DraftSource.MODEL)

    def learn(
        self, proposal: Proposal, n_accepted: int, first_emitted: int, step_s: float, timed: bool = True
    ) -> None:
        """What became of this step's proposal: how many drafted tokens the target kept, the first
        token the step emitted, and the step's wall time as the user waited for it (timed=False:
        not what its batch size costs, e.g. the batch grew llama.cpp's buffers)."""
        controller = self.controller
        if controller is None:
            return
        if self._unused_offer is not None:
            offered, offer_kind = self._unused_offer
            controller.observe(offer_kind, first_emitted == offered)
        draft = proposal.draft
        if proposal.kind in COPY_KINDS and draft.tokens:
            self._trail.agreed(n_accepted)
        controller.record(
            proposal.kind, len(draft.tokens), n_accepted, step_s, draft.draft_s, draft.first_s, draft.n_more,
            learn=proposal.kind is not DrafterKind.MODEL or not self._text_copying, timed=timed,
        )  # fmt: skip

    # -- what the reply shows -----------------------------------------------------------------

    def note_kind(self) -> DraftingState:
        if self.skipped_note:
            return DraftingState.SHORT_REPLY
        model, controller = self.model if self._speculating else None, self.controller
        if model is not None and model.load_error:
            return DraftingState.DRAFT_LOAD_FAILED
        if not self._speculating or controller is None or not controller.adaptive:
            return DraftingState.DRAFTING
        if model is not None and controller.never_pays:
            return DraftingState.DRAFT_TOO_SLOW
        if controller.guard.suspended:
            return DraftingState.SUSPENDED
        return DraftingState.DRAFTING

    def note(self) -> str:
        kind = self.note_kind()
        if kind is DraftingState.SHORT_REPLY:
            return self.skipped_note
        if kind is DraftingState.DRAFT_LOAD_FAILED and self.model is not None:
            return f"the draft model could not be loaded ({self.model.load_error}): {self._instead()}"
        if kind is DraftingState.DRAFT_TOO_SLOW:
            return f"the draft model is too slow to help on this machine: {self._instead()}"
        if kind is DraftingState.SUSPENDED:
            return "drafts stopped paying: decoding plainly for now, trying again soon"
        return ""

    def _instead(self) -> str:
        """What a reply does without its draft model."""
        return "decoding plainly" if self.text is None else "drafting from the text so far only"
