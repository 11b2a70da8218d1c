"""The speculative decoding loop: draft, verify in one batch, accept a prefix, roll back the rest.

Invariant: `target.tokens` is exactly the target's KV cache, and `pending` (the last token of
`ctx`) is the one token emitted but not yet decoded. Each step decodes [pending] + draft in a
single target batch with logits for every row: row i is the target's distribution for the
position right after draft[i-1]. Drafts are kept while the target agrees (greedy: the same
argmax; sampled drafts: the min(1, p/q) rule in engine/sampling.accept_draft; deterministic
drafts at temperature > 0: the same keyed sample, Dist.sample_keyed), then the target adds one
token of its own: the correction at the first rejection, or a bonus token after a fully
accepted draft. Rejected positions are removed from the target's cache; the draft model's cache
is trimmed lazily on its next proposal (ModelDrafter.propose). Plain decoding is the same step
with an empty draft, so turning speculation off changes nothing else.

Legend: p = target distribution, q = draft distribution, k = drafted tokens this step.
"""

from __future__ import annotations

import codecs
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from engine.adaptive import DraftLengthController
from engine.backend import ContextFullError, DecodeCancelled, LlamaRunner
from engine.config import SamplingParams
from engine.drafters import Draft, ModelDrafter, NgramDrafter
from engine.events import (
    DraftingState,
    DraftSource,
    Event,
    Finished,
    Speculation,
    Stats,
    StopReason,
    TextPiece,
)
from engine.sampling import accept_draft, distribution, penalize

STATS_INTERVAL_S = 0.1


@dataclass
class _Counters:
    n_prompt_tokens: int = 0
    n_prefilled: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_steps: int = 0
    n_steps_with_draft: int = 0
    n_drafted_text: int = 0  # drafts from the text beside a draft model
    n_accepted_text: int = 0
    n_drafted_memory: int = 0  # drafts from earlier replies (ReplyMemory)
    n_accepted_memory: int = 0
    n_drafted_document: int = 0  # drafts from attached documents
    n_accepted_document: int = 0
    prefill_s: float = 0.0
    draft_catch_up_s: float = 0.0  # a draft model loading and reading the prompt
    decode_started: float = 0.0
    llama_s: float = 0.0
    step_overhead_s: list[float] = field(default_factory=list)


class _TextAssembler:
    """Bytes of tokens -> text pieces: holds back incomplete UTF-8 and possible stop-string starts."""

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stop = [s for s in stop if s]
        self.text = ""  # everything decoded so far
        self.n_emitted = 0  # characters of self.text already handed out
        self.stopped = False
        self.n_held = 0  # tokens added since the last piece: they count with the next one
        self.held_drafted = True  # ...and were all drafted
        self.source = DraftSource.NONE  # where this step's drafts came from

    def add(self, data: bytes, drafted: bool = False) -> None:
        self.text += self._decoder.decode(data)
        self.n_held += 1
        self.held_drafted = self.held_drafted and drafted

    def take(self, final: bool) -> TextPiece | None:
        """The next piece with the tokens it holds: text is marked drafted only when every one of
        its tokens was (a character whose bytes span a token the target wrote is the target's,
        so drafted marks never exceed the accepted count)."""
        text = self.ready(final)
        if not text:
            return None
        is_draft = self.held_drafted and self.n_held > 0
        piece = TextPiece(text, self.n_held, is_draft, self.source if is_draft else DraftSource.NONE)
        self.n_held, self.held_drafted = 0, True
        return piece

    def flush(self) -> None:
        self.text += self._decoder.decode(b"", final=True)

    def ready(self, final: bool) -> str:
        """Text that can be shown now; sets `stopped` and cuts the text at a stop string."""
        if self.stop and not self.stopped:
            start = max(0, self.n_emitted - max(len(s) for s in self.stop))
            hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
            if hits:
                self.text = self.text[: min(hits)]
                self.stopped = True
        end = len(self.text)
        if self.stop and not self.stopped and not final:
            # Hold back a tail that could still grow into a stop string.
            for s in self.stop:
                for n in range(min(len(s) - 1, end - self.n_emitted), 0, -1):
                    if self.text.endswith(s[:n]):
                        end = min(end, len(self.text) - n)
                        break
        piece = self.text[self.n_emitted : end]
        self.n_emitted = end
        return piece


class SpeculativeDecoder:
    def __init__(
        self,
        target: LlamaRunner,
        drafter: NgramDrafter | ModelDrafter | None,
        controller: DraftLengthController | None,
        lookup: NgramDrafter | None = None,
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.controller = controller
        # Beside a draft model: n-gram matches in the text so far, free to draft. Each step the
        # controller drafts from whichever it expects more tokens per second of (choose_among).
        self.lookup = lookup if isinstance(drafter, ModelDrafter) else None
        self._use_model = True  # this reply may run the draft model (not: too short to repay it)
        self._use_memory = True  # this reply may draft from earlier replies (NgramDrafter.memory)
        # This step's n-gram offer when it was not drafted: (its first token, its bucket), checked
        # against the emitted token (DraftLengthController.observe).
        self._unused_offer: tuple[int, int] | None = None
        # This step's text offer was copying (NgramDrafter.COPY_BUCKETS): a draft model's draft
        # then does not count toward its acceptance (DraftLengthController.record's learn).
        self._text_copying = False
        self._source = DraftSource.NONE  # where this step's draft came from

    @property
    def speculation(self) -> Speculation:
        if self.drafter is None:
            return Speculation.NONE
        return Speculation.NGRAM if isinstance(self.drafter, NgramDrafter) else Speculation.DRAFT

    def run(
        self,
        prompt: list[int],
        params: SamplingParams,
        max_tokens: int,
        stop: Sequence[str] = (),
        cancel: threading.Event | None = None,
        speculate: bool = True,
        use_memory: bool = True,
        document_spans: tuple[tuple[int, int], ...] = (),
    ) -> Iterator[Event]:
        """document_spans: [start, end) token ranges of the prompt holding attached documents
        (drafts matched there are DraftSource.DOCUMENT)."""
        target = self.target
        self._use_memory = use_memory
        drafter = self.drafter if speculate else None
        controller = self.controller
        kind = self.speculation if drafter is not None else Speculation.NONE
        seed = params.seed if params.seed is not None else int(np.random.default_rng().integers(1 << 62))
        rng = np.random.default_rng(seed)  # for the min(1, p/q) rule of sampled drafts
        c = _Counters(n_prompt_tokens=len(prompt))
        if controller is not None:
            controller.begin_reply()
        self._use_model = True
        llama_s0 = target.llama_s + self._draft_llama_s()

        # Prefill everything but the last prompt token; it goes into the first verify batch.
        t0 = time.perf_counter()
        n_keep = target.common_prefix(prompt[:-1])
        target.truncate(n_keep)
        n_keep = len(target.tokens)  # a model that cannot drop a tail was cleared instead
        # A Stop during a long prompt's prefill is seen between its n_batch chunks: what was read
        # stays cached, and the reply ends "cancelled" before its first token (even if the flag
        # is cleared meanwhile: the prompt is incomplete).
        prefill_cut = False
        try:
            target.decode(prompt[n_keep:-1], n_logits=0, cancel=cancel.is_set if cancel else None)
        except DecodeCancelled:
            prefill_cut = True
        target_read_s = time.perf_counter() - t0
        skipped_note = ""
        if (
            isinstance(drafter, ModelDrafter)
            and controller is not None
            and controller.will_draft
            and not prefill_cut
            and not (cancel is not None and cancel.is_set())
        ):
            one_off_s = controller.one_off_draft_s(target_read_s) if not drafter.loaded else 0.0
            if drafter.loaded or controller.pays_back(max_tokens, one_off_s):
                # The draft model reads the prompt too; done here, it is part of the prefill the
                # user waits for anyway, and the first drafting step starts on time.
                was_loaded = drafter.loaded
                c.draft_catch_up_s += drafter.prefill(prompt[:-1])
                if not was_loaded and drafter.load_s is not None and drafter.loaded:
                    controller.note_draft_load(drafter.load_s)
                n_read, read_s = drafter.last_read
                controller.note_draft_prefill(read_s, n_read, target_read_s, len(prompt) - 1 - n_keep)
            else:
                # Loading the draft model costs more than it could save in a reply this short.
                if self.lookup is None:
                    drafter = None
                self._use_model = False
                skipped_note = f"a reply this short cannot repay loading the draft model: {self._instead()}"
        # The prompt tokens read now (the last one goes into the first verify batch), or as far
        # as a cancelled prefill got.
        c.n_prefilled = (len(target.tokens) if prefill_cut else len(prompt)) - n_keep
        c.prefill_s = time.perf_counter() - t0
        c.decode_started = time.perf_counter()

        ctx = list(prompt)  # prompt + everything emitted; ctx[-1] is the pending token
        out_tokens: list[int] = []
        text = _TextAssembler(stop)
        if isinstance(drafter, NgramDrafter):
            drafter.begin(ctx, document_spans)
        elif drafter is not None and self.lookup is not None:
            self.lookup.begin(ctx, document_spans)
        last_stats = time.perf_counter()
        stop_reason: StopReason = "length"

        def stats(draft_max: int) -> Stats:
            now = time.perf_counter()
            return Stats(
                speculation=kind,
                n_prompt_tokens=c.n_prompt_tokens,
                n_prefilled=c.n_prefilled,
                n_generated=c.n_generated,
                n_drafted=c.n_drafted,
                n_accepted=c.n_accepted,
                n_steps=c.n_steps,
                n_steps_with_draft=c.n_steps_with_draft,
                prefill_s=c.prefill_s,
                decode_s=now - c.decode_started,
                llama_s=target.llama_s + self._draft_llama_s() - llama_s0,
                draft_max=draft_max,
                step_overhead_ms_median=(
                    statistics.median(c.step_overhead_s) * 1000 if c.step_overhead_s else 0.0
                ),
                note=skipped_note or self._note(drafter),
                note_kind=DraftingState.SHORT_REPLY if skipped_note else self._note_kind(drafter),
                plain_tokens_per_s_est=controller.plain_tokens_per_s if controller is not None else None,
                draft_catch_up_s=c.draft_catch_up_s,
                n_drafted_text=c.n_drafted_text,
                n_accepted_text=c.n_accepted_text,
                n_drafted_memory=c.n_drafted_memory,
                n_accepted_memory=c.n_accepted_memory,
                n_drafted_document=c.n_drafted_document,
                n_accepted_document=c.n_accepted_document,
            )

        k = 0
        while True:
            if prefill_cut or (cancel is not None and cancel.is_set()):
                stop_reason = "cancelled"
                break
            if c.n_generated >= max_tokens:
                stop_reason = "length"
                break
            room = target.n_ctx - len(target.tokens) - 1
            if room < 0:
                stop_reason = "context"
                break
            step_t0 = time.perf_counter()
            llama_step0 = target.llama_s + self._draft_llama_s()

            # 1. Draft.
            draft, bucket = self._draft(drafter, ctx, params, rng, min(room, max_tokens - c.n_generated))
            k = len(draft.tokens)
            c.draft_catch_up_s += draft.catch_up_s

            # 2. Verify [pending] + draft in one target batch.
            n_before = len(target.tokens)
            try:
                rows = target.decode([ctx[-1], *draft.tokens], n_logits=k + 1)
            except ContextFullError:
                stop_reason = "context"
                break

            # 3. Accept the agreed prefix, then one token from the target.
            emitted, n_accepted = self._accept(rows, draft, ctx, params, rng, seed)
            if self._unused_offer is not None and controller is not None:
                offered, offer_bucket = self._unused_offer
                controller.observe(offer_bucket, emitted[0] == offered)

            # 4. Roll back what the target rejected: keep pending + accepted drafts.
            target.truncate(n_before + 1 + n_accepted)
            if controller is not None:
                # The whole step as the user waits for it, less a one-off draft prefill.
                step_s = time.perf_counter() - step_t0 - draft.catch_up_s
                controller.record(
                    bucket, k, n_accepted, step_s, draft.draft_s, draft.first_s, draft.n_more,
                    learn=bucket != 0 or not self._text_copying,
                )  # fmt: skip
            c.n_steps += 1
            c.n_drafted += k
            c.n_accepted += n_accepted
            c.n_steps_with_draft += k > 0
            if bucket and isinstance(drafter, ModelDrafter):
                c.n_drafted_text += k
                c.n_accepted_text += n_accepted
            if bucket in NgramDrafter.MEMORY_BUCKETS:
                c.n_drafted_memory += k
                c.n_accepted_memory += n_accepted
            if self._source is DraftSource.DOCUMENT:
                c.n_drafted_document += k
                c.n_accepted_document += n_accepted
            text.source = self._source
            overhead = (time.perf_counter() - step_t0) - (
                target.llama_s + self._draft_llama_s() - llama_step0
            )
            c.step_overhead_s.append(overhead)

            # 5. Emit, stopping at an end-of-generation token, the token budget or a stop string.
            pieces: list[TextPiece] = []
            finished = False
            for i, token in enumerate(emitted):
                if target.is_eog(token):
                    stop_reason, finished = "eos", True
                    break
                ctx.append(token)
                out_tokens.append(token)
                c.n_generated += 1
                text.add(target.token_bytes(token), drafted=i < n_accepted)
                piece = text.take(final=False)
                if piece is not None:
                    if pieces and (pieces[-1].is_draft, pieces[-1].source) == (piece.is_draft, piece.source):
                        last = pieces.pop()
                        piece = TextPiece(
                            last.text + piece.text,
                            last.n_tokens + piece.n_tokens,
                            piece.is_draft,
                            piece.source,
                        )
                    pieces.append(piece)
                if text.stopped:
                    stop_reason, finished = "stop", True
                    break
                if c.n_generated >= max_tokens:
                    break
            yield from pieces
            if finished:
                break
            if time.perf_counter() - last_stats >= STATS_INTERVAL_S:
                last_stats = time.perf_counter()
                yield stats(k)

        if not text.stopped:
            text.flush()
            tail = text.take(final=True)
            if tail is not None:
                yield TextPiece(tail.text, tail.n_tokens, False)
        final = stats(k)
        yield final
        yield Finished(stop_reason, text.text, tuple(out_tokens), final)

    # -- pieces of a step ---------------------------------------------------------------------

    def _note_kind(self, drafter: NgramDrafter | ModelDrafter | None) -> DraftingState:
        controller = self.controller
        if isinstance(drafter, ModelDrafter) and drafter.load_error:
            return DraftingState.DRAFT_LOAD_FAILED
        if drafter is None or controller is None or not controller.adaptive:
            return DraftingState.DRAFTING
        if isinstance(drafter, ModelDrafter) and controller.never_pays:
            return DraftingState.DRAFT_TOO_SLOW
        if controller.suspended:
            return DraftingState.SUSPENDED
        return DraftingState.DRAFTING

    def _note(self, drafter: NgramDrafter | ModelDrafter | None) -> str:
        kind = self._note_kind(drafter)
        if kind is DraftingState.DRAFT_LOAD_FAILED and isinstance(drafter, ModelDrafter):
            return f"the draft model could not be loaded ({drafter.load_error}): {self._instead()}"
        if kind is DraftingState.DRAFT_TOO_SLOW:
            return f"the draft model is too slow to help on this machine: {self._instead()}"
        if kind is DraftingState.SUSPENDED:
            return "drafts stopped paying: decoding plainly for now, trying again soon"
        return ""

    def _instead(self) -> str:
        """What a reply does without its draft model."""
        return "decoding plainly" if self.lookup is None else "drafting from the text so far only"

    def _draft_llama_s(self) -> float:
        return self.drafter.llama_s if isinstance(self.drafter, ModelDrafter) else 0.0

    def _draft(
        self,
        drafter: NgramDrafter | ModelDrafter | None,
        ctx: list[int],
        params: SamplingParams,
        rng: np.random.Generator,
        room: int,
    ) -> tuple[Draft, int]:
        """The step's draft and its acceptance bucket (for n-gram: the match length, capped)."""
        controller = self.controller
        self._unused_offer = None
        self._text_copying = False
        self._source = DraftSource.NONE
        if drafter is None or controller is None or room <= 0:
            return Draft([]), 0
        if isinstance(drafter, NgramDrafter):
            candidates, bucket = drafter.offer(ctx, min(controller.k_max, room), self._use_memory)
            self._source = drafter.offer_source
            k = controller.choose(len(candidates), bucket)
            if candidates and not k:
                self._unused_offer = candidates[0], bucket
            return Draft(candidates[:k]), bucket
        matched: list[int] = []
        text_bucket = 0
        offers: list[tuple[int, int]] = []
        if self.lookup is not None:
            matched, text_bucket = self.lookup.offer(ctx, min(controller.k_max, room), self._use_memory)
            if matched:
                offers.append((len(matched), text_bucket))
                self._text_copying = text_bucket in NgramDrafter.COPY_BUCKETS
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
                offers.insert(0, (min(controller.k_max, room), 0))
        k, bucket = controller.choose_among(offers)
        if matched and (k <= 0 or bucket == 0):
            self._unused_offer = matched[0], text_bucket
        if k <= 0:
            return Draft([]), 0
        if bucket != 0:
            assert self.lookup is not None
            self._source = self.lookup.offer_source
            return Draft(matched[:k]), bucket
        if (
            one_off is not None
            and not model_pays
            and not (drafter.loaded and controller.probe_affords(one_off))
        ):
            # (A probe of a loaded draft model catches up within a bounded loss: otherwise,
            # after a few plain steps, no probe could ever re-measure it.)
            return Draft([]), 0
        was_loaded = drafter.loaded
        self._source = DraftSource.MODEL
        draft = drafter.propose(ctx, k, params, rng)
        if not was_loaded and drafter.loaded and drafter.load_s is not None:
            controller.note_draft_load(drafter.load_s)
        return draft, 0

    def _accept(
        self,
        rows: np.ndarray,
        draft: Draft,
        ctx: list[int],
        params: SamplingParams,
        rng: np.random.Generator,
        seed: int,
    ) -> tuple[list[int], int]:
        """Tokens this step emits (accepted drafts, then the target's own) and how many were drafted."""
        if params.is_greedy and params.repeat_penalty == 1.0:
            return self._accept_greedy(rows, draft.tokens)
        emitted: list[int] = []
        history = ctx  # extended temporarily with accepted drafts (repetition penalty)
        n_ctx0 = len(ctx)
        try:
            for i, token in enumerate(draft.tokens):
                if draft.dists is not None:
                    # A sampled draft: the min(1, p/q) rule with the draft's own q.
                    p = distribution(rows[i], history, params)
                    ok, correction = accept_draft(p, token, draft.dists[i], rng)
                else:
                    # A deterministic draft: keep it while it equals the target's own choice.
                    choice = self._target_choice(rows[i], history, params, seed)
                    ok, correction = choice == token, choice
                if not ok:
                    assert correction is not None
                    emitted.append(correction)
                    return emitted, i
                emitted.append(token)
                history.append(token)
            emitted.append(self._target_choice(rows[len(draft.tokens)], history, params, seed))
            return emitted, len(draft.tokens)
        finally:
            del history[n_ctx0:]

    @staticmethod
    def _target_choice(row: np.ndarray, history: list[int], params: SamplingParams, seed: int) -> int:
        """The target's token after `history`: its argmax, or its keyed sample at this position."""
        if params.is_greedy:
            return int(np.argmax(penalize(row, history, params)))
        return distribution(row, history, params).sample_keyed(seed, len(history))

    @staticmethod
    def _accept_greedy(rows: np.ndarray, drafted: list[int]) -> tuple[list[int], int]:
        """Greedy verification: a drafted token is kept while its logit is its row's maximum
        (an exact tie between two logits counts as agreement), then the target adds its own
        argmax. See greedy_choices."""
        choices = greedy_choices(rows, drafted)  # the accepted drafts, then the target's own
        return choices, len(choices) - 1


# Verify batches of this many drafted rows or more are read on two threads (below: handing half
# to another thread costs more than it saves). Reading what llama.cpp just wrote, 2 Xeon cores,
# AVX2 build, Gemma 3 270M (1 MB a row): a row max ~0.085 ms; 22 rows 1.84 -> 1.57 ms, 63 rows
# 5.1 -> 2.9 ms, 8 rows 0.79 -> 1.15 ms. llama.cpp's threads are idle meanwhile.
_PARALLEL_ROWS = 24
_ROW_READER: ThreadPoolExecutor | None = None
_ROW_READER_LOCK = threading.Lock()


def _row_reader() -> ThreadPoolExecutor | None:
    """A second thread for reading long verify batches, or None on a one-core machine."""
    global _ROW_READER
    if _ROW_READER is None and len(os.sched_getaffinity(0)) >= 2:
        with _ROW_READER_LOCK:
            if _ROW_READER is None:
                _ROW_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tandem-rows")
    return _ROW_READER


def greedy_choices(rows: np.ndarray, drafted: Sequence[int]) -> list[int]:
    """The drafted tokens the target agrees with (rows[i] judges drafted[i]: kept while its logit
    is the row's maximum), then the target's own token (the argmax of the next row).

    Rows are 1 MB each with a 262k vocabulary, read at ~0.085 ms for a max (numpy's argmax is
    slower: ~0.11 ms), so a short draft is judged row by row and not read past its first
    rejection; a long one (copying, mostly accepted whole) is read in two halves at once,
    numpy releasing the GIL while it reduces."""
    k = len(drafted)
    if k >= _PARALLEL_ROWS and (reader := _row_reader()) is not None:
        half = k // 2
        later = reader.submit(rows[half:k].max, 1)
        try:
            first = rows[:half].max(axis=1)
        finally:
            # Always waited for: the rows are llama.cpp's buffer, rewritten by the next decode.
            second = later.result()
        agree = rows[np.arange(k), drafted] >= np.concatenate([first, second])
        n_accepted = k if agree.all() else int(np.argmin(agree))
    else:
        n_accepted = k
        for i, token in enumerate(drafted):
            row = rows[i]
            if row[token] < row.max():
                n_accepted = i
                break
    return [*drafted[:n_accepted], int(rows[n_accepted].argmax())]
