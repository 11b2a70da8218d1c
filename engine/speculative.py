"""The speculative decoding loop: draft, verify in one batch, accept a prefix, roll back the rest.

Invariant: `target.tokens` is exactly the target's KV cache, and the pending token (ctx[-1]) is
the one emitted but not yet decoded. Each step decodes [pending] + draft in one target batch with
logits for every row (row i: the target's distribution after draft[:i]). Drafts are kept while the
target agrees (greedy: the same argmax; sampled drafts: the min(1, p/q) rule, accept_draft;
deterministic drafts at temperature > 0: the same keyed sample, Dist.sample_keyed), then the
target adds one token of its own (the correction, or a bonus token after a draft accepted whole).
Rejected positions leave the target's cache; the draft model's is trimmed on its next proposal.
Plain decoding is the same step with an empty draft. p: target distribution, q: the draft's.
"""

from __future__ import annotations

import codecs
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from engine.backend import ContextFullError, DecodeCancelled, LlamaRunner
from engine.config import SamplingParams
from engine.drafters import Draft
from engine.events import (
    DraftSource,
    Event,
    Finished,
    SourceCount,
    Stats,
    StopReason,
    TextPiece,
)
from engine.kinds import DrafterKind
from engine.loop_guard import LoopGuard
from engine.policy import NO_DRAFT, DraftPolicy, Proposal
from engine.sampling import accept_draft, distribution, penalize

STATS_INTERVAL_S = 0.1


@dataclass
class _Counters:
    """A reply's numbers as they are counted, named as Stats names them (`stats` copies them)."""

    n_prompt_tokens: int = 0
    n_prefilled: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_steps: int = 0
    n_steps_with_draft: int = 0
    by_source: dict[DraftSource, SourceCount] = field(default_factory=dict)
    prefill_s: float = 0.0
    draft_catch_up_s: float = 0.0  # a draft model loading and reading the prompt
    decode_started: float = 0.0
    llama_s0: float = 0.0  # llama.cpp seconds (target and draft) when the reply began
    step_overhead_s: list[float] = field(default_factory=list)  # each step's time outside llama.cpp

    def count_step(self, proposal: Proposal, n_accepted: int) -> None:
        k = len(proposal.tokens)
        self.n_steps += 1
        self.n_drafted += k
        self.n_accepted += n_accepted
        self.n_steps_with_draft += k > 0
        self.draft_catch_up_s += proposal.draft.catch_up_s
        if k:
            counted = self.by_source.get(proposal.source, SourceCount())
            self.by_source[proposal.source] = counted + SourceCount(k, n_accepted)

    def stats(self, **rest: Any) -> Stats:
        """A snapshot: these counts with the rest of Stats' fields (`rest`)."""
        counted = {f.name: getattr(self, f.name) for f in fields(Stats) if f.name in _COUNTED}
        return Stats(**counted, by_source=dict(self.by_source), **rest)


_COUNTED = {f.name for f in fields(_Counters)} - {"by_source"}


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
        """The next piece with the tokens it holds, marked drafted only when every one of them was
        (so drafted marks never exceed the accepted count)."""
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


@dataclass
class _Reply:
    """One reply in progress: its text so far, its counters and what it samples with."""

    ctx: list[int]  # prompt + everything emitted; ctx[-1] is the pending token
    params: SamplingParams
    seed: int
    rng: np.random.Generator  # for the min(1, p/q) rule of sampled drafts
    max_tokens: int
    text: _TextAssembler
    counters: _Counters
    out_tokens: list[int] = field(default_factory=list)
    loop_guard: LoopGuard = field(default_factory=LoopGuard)  # ends a reply that repeats itself
    stop_reason: StopReason | None = None
    draft_max: int = 0  # the last step's draft length


class SpeculativeDecoder:
    def __init__(self, target: LlamaRunner, policy: DraftPolicy) -> None:
        self.target = target
        self.policy = policy

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
        self.policy.begin_reply(speculate, use_memory)
        seed = params.seed if params.seed is not None else int(np.random.default_rng().integers(1 << 62))
        r = _Reply(
            list(prompt), params, seed, np.random.default_rng(seed), max_tokens, _TextAssembler(stop),
            _Counters(n_prompt_tokens=len(prompt), llama_s0=self._llama_s()),
        )  # fmt: skip
        if not self._prefill(r, cancel):
            r.stop_reason = "cancelled"
        r.counters.decode_started = time.perf_counter()
        self.policy.start(r.ctx, document_spans)
        if r.stop_reason is None:
            # Part of the prefill the user waits for: neither the decode's time nor its speed.
            timing_s = self._time_first_batches(r.ctx, r.max_tokens, cancel)
            r.counters.prefill_s += timing_s
            r.counters.decode_started += timing_s
        last_stats = time.perf_counter()
        while r.stop_reason is None:
            if cancel is not None and cancel.is_set():
                r.stop_reason = "cancelled"
            elif r.counters.n_generated >= max_tokens:
                r.stop_reason = "length"
            elif len(self.target.tokens) + 1 > self.target.n_ctx:
                r.stop_reason = "context"
            else:
                yield from self._step(r)
                if r.stop_reason is None and time.perf_counter() - last_stats >= STATS_INTERVAL_S:
                    last_stats = time.perf_counter()
                    yield self._stats(r)
        if not r.text.stopped:
            r.text.flush()
            tail = r.text.take(final=True)
            if tail is not None:
                yield TextPiece(tail.text, tail.n_tokens, False)
        final = self._stats(r)
        yield final
        yield Finished(r.stop_reason, r.text.text, tuple(r.out_tokens), final)

    def _step(self, r: _Reply) -> Iterator[TextPiece]:
        """One step: draft, verify [pending] + draft in one target batch, accept the agreed
        prefix and one token of the target's own, roll back the rest, emit."""
        target, policy = self.target, self.policy
        t0, llama_t0 = time.perf_counter(), self._llama_s()
        room = min(target.n_ctx - len(target.tokens) - 1, r.max_tokens - r.counters.n_generated)

        proposal = policy.propose(r.ctx, room, r.params, r.rng)  # 1. draft
        _cut(proposal.draft, r.loop_guard.tokens_before_loop(proposal.tokens))  # (the reply ends there)
        verified = [r.ctx[-1], *proposal.tokens]  # the pending token, then the draft
        n_before = len(target.tokens)
        try:
            rows = target.decode(verified, n_logits=len(verified))  # 2. verify
        except ContextFullError:
            r.stop_reason = "context"
            return
        timed = not target.outputs_grew  # (a batch that grew llama.cpp's buffers: not its size's cost)
        if not r.counters.n_generated and proposal.tokens and _near_tie(rows[0], r.params, proposal):
            # The reply's first token, read with a draft from the text, nearly ties: read it again
            # alone, as plain decoding reads it, so the reply starts as plain decoding's does (the
            # draft is dropped).
            target.truncate(n_before)
            rows = target.decode(verified[:1], n_logits=1)
            proposal, timed = NO_DRAFT, False
        # A reply given again keeps its earlier tokens within batch rounding of the target's best.
        again = NEAR_TIE if proposal.kind is DrafterKind.MEMORY_COPY else 0.0
        emitted, n_accepted = accept(rows, proposal.draft, r.ctx, r.params, r.rng, r.seed, again)  # 3. accept
        target.truncate(n_before + 1 + n_accepted)  # 4. roll back
        step_s = time.perf_counter() - t0 - proposal.draft.catch_up_s
        policy.learn(proposal, n_accepted, emitted[0], step_s, timed=timed)

        r.counters.count_step(proposal, n_accepted)
        r.counters.step_overhead_s.append(time.perf_counter() - t0 - (self._llama_s() - llama_t0))
        r.draft_max = len(proposal.tokens)
        r.text.source = proposal.source
        yield from self._emit(r, emitted, n_accepted)  # 5. emit

    def _prefill(self, r: _Reply, cancel: threading.Event | None) -> bool:
        """Read the prompt but its last token (it goes into the first verify batch), reusing what
        the cache holds; a draft model reads it too where it pays. False: cancelled meanwhile (the
        chunks read whole stay cached; the reply ends "cancelled" even if the flag is cleared)."""
        target, c, prompt = self.target, r.counters, r.ctx
        t0 = time.perf_counter()
        n_keep = target.common_prefix(prompt[:-1])
        target.truncate(n_keep)
        n_keep = len(target.tokens)  # a model that cannot drop a tail was cleared instead
        complete = True
        try:
            target.decode(prompt[n_keep:-1], n_logits=0, cancel=cancel.is_set if cancel else None)
        except DecodeCancelled:
            complete = False
        target_read_s = time.perf_counter() - t0
        if complete and not (cancel is not None and cancel.is_set()):
            n_read = len(prompt) - 1 - n_keep
            c.draft_catch_up_s += self.policy.read_prompt(
                prompt[:-1], r.max_tokens, target_read_s, n_read, cancel.is_set if cancel else None
            )
        # (A recurrent model stopped mid-chunk starts over: nothing of it is cached.)
        c.n_prefilled = max((len(prompt) if complete else len(target.tokens)) - n_keep, 0)
        c.prefill_s = time.perf_counter() - t0
        return complete

    def _time_first_batches(
        self, prompt: list[int], max_tokens: int, cancel: threading.Event | None
    ) -> float:
        """Seconds spent timing a few verify batch sizes once after the prompt, on a machine that
        never timed them, where the reply starts by copying (engine.adaptive.FIRST_REPLY_SIZES):
        the first reply then prices its drafts from this machine's costs rather than guesses."""
        controller, target = self.policy.controller, self.target
        if controller is None or self.policy.model is not None:
            return 0.0
        sizes = controller.first_reply_sizes(target.n_batch, max_tokens)
        if not sizes or not self.policy.starts_copying(prompt):
            return 0.0
        t0 = time.perf_counter()
        costs = target.time_batches(
            sizes, prompt[-1:], repeats=1, stop=cancel.is_set if cancel else None, read_rows=True
        )
        controller.note_timings(costs)
        return time.perf_counter() - t0

    def _emit(self, r: _Reply, emitted: list[int], n_accepted: int) -> Iterator[TextPiece]:
        """The step's tokens as text pieces (drafted runs and the target's own apart), stopping at
        an end-of-generation token, the token budget or a stop string."""
        target, text = self.target, r.text
        pieces: list[TextPiece] = []
        for i, token in enumerate(emitted):
            if target.is_eog(token):
                r.stop_reason = "eos"
                break
            r.ctx.append(token)
            r.out_tokens.append(token)
            r.counters.n_generated += 1
            token_text = target.token_bytes(token)
            text.add(token_text, drafted=i < n_accepted)
            piece = text.take(final=False)
            if piece is not None:
                if pieces and (pieces[-1].is_draft, pieces[-1].source) == (piece.is_draft, piece.source):
                    last = pieces.pop()
                    n_tokens = last.n_tokens + piece.n_tokens
                    piece = TextPiece(last.text + piece.text, n_tokens, piece.is_draft, piece.source)
                pieces.append(piece)
            if text.stopped:
                r.stop_reason = "stop"
                break
            if r.loop_guard.add(token, token_text):
                r.stop_reason = "repetition"
                break
            if r.counters.n_generated >= r.max_tokens:
                break
        yield from pieces

    def _llama_s(self) -> float:
        return self.target.llama_s + self.policy.draft_llama_s

    def _stats(self, r: _Reply) -> Stats:
        c, policy = r.counters, self.policy
        controller = policy.controller
        return c.stats(
            speculation=policy.reply_kind,
            decode_s=time.perf_counter() - c.decode_started,
            llama_s=self._llama_s() - c.llama_s0,
            draft_max=r.draft_max,
            step_overhead_ms_median=(
                statistics.median(c.step_overhead_s) * 1000 if c.step_overhead_s else 0.0
            ),
            note=policy.note(),
            note_kind=policy.note_kind(),
            plain_tokens_per_s_est=controller.costs.plain_tokens_per_s if controller is not None else None,
        )


def _cut(draft: Draft, n: int) -> None:
    """Keep a draft's first n tokens (in place: a draft model reviews the same draft later)."""
    if n >= len(draft.tokens):
        return
    del draft.tokens[n:]
    if draft.dists is not None:
        del draft.dists[n:]
    if draft.bins is not None:
        del draft.bins[n:]
    draft.stopped = None  # (the token after the cut is not where the draft stopped)


# -- accepting a draft ----------------------------------------------------------------------


def accept(
    rows: np.ndarray,
    draft: Draft,
    ctx: list[int],
    params: SamplingParams,
    rng: np.random.Generator,
    seed: int,
    tolerance: float = 0.0,
) -> tuple[list[int], int]:
    """Tokens this step emits (accepted drafts, then the target's own) and how many were drafted,
    by the rules the module's docstring gives (rows[i]: the target's distribution after draft[:i]).
    tolerance (greedy): a drafted token within this much of its row's best logit is kept."""
    if params.is_greedy and params.repeat_penalty == 1.0:
        choices = greedy_choices(rows, draft.tokens, tolerance)  # the accepted drafts, then the target's own
        return choices, len(choices) - 1
    emitted: list[int] = []
    history = ctx  # extended temporarily with accepted drafts (repetition penalty)
    n_ctx0 = len(ctx)
    try:
        for i, token in enumerate(draft.tokens):
            if draft.dists is not None:
                p = distribution(rows[i], history, params)
                ok, correction = accept_draft(p, token, draft.dists[i], rng)
            else:
                choice = _target_choice(rows[i], history, params, seed)
                ok, correction = choice == token, choice
            if not ok:
                assert correction is not None
                emitted.append(correction)
                return emitted, i
            emitted.append(token)
            history.append(token)
        emitted.append(_target_choice(rows[len(draft.tokens)], history, params, seed))
        return emitted, len(draft.tokens)
    finally:
        del history[n_ctx0:]


def _target_choice(row: np.ndarray, history: list[int], params: SamplingParams, seed: int) -> int:
    """The target's token after `history`: its argmax, or its keyed sample at this position."""
    if params.is_greedy:
        return int(np.argmax(penalize(row, history, params)))
    return distribution(row, history, params).sample_keyed(seed, len(history))


# Verify batches of this many drafted rows or more are read on two threads (below, handing half
# to another costs more than it saves). Gemma 3 270M (1 MB a row), 2 Xeon cores: 63 rows 5.1 ->
# 2.9 ms, 22 rows 1.84 -> 1.57 ms, 8 rows 0.79 -> 1.15 ms.
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


def greedy_choices(rows: np.ndarray, drafted: Sequence[int], tolerance: float = 0.0) -> list[int]:
    """The drafted tokens the target agrees with (rows[i] judges drafted[i]: kept while it is the
    row's first maximal index, as plain decoding's argmax takes it), then the target's own token.
    A row's max (~0.085 ms a 1 MB row) is cheaper than its argmax, so a short draft is judged row
    by row, never past its first rejection; a long one (a copy, mostly accepted whole) is read in
    two halves at once (numpy releases the GIL). A token at the maximum is checked for an exact
    tie below it (`_first_max`). tolerance: a token within it of the row's maximum is kept too (a
    reply given again: its earlier tokens, which a batch's rounding may put just below the best)."""
    k = len(drafted)
    if k >= _PARALLEL_ROWS and (reader := _row_reader()) is not None:
        half = k // 2
        later = reader.submit(rows[half:k].max, 1)
        try:
            first = rows[:half].max(axis=1)
        finally:
            # Always waited for: the rows are llama.cpp's buffer, rewritten by the next decode.
            second = later.result()
        top = np.concatenate([first, second])
        agree = rows[np.arange(k), drafted] >= top - tolerance
        n_accepted = k if agree.all() else int(np.argmin(agree))
        if not tolerance:
            n_accepted = next(
                (i for i in range(n_accepted) if not _first_max(rows[i], drafted[i], top[i])), n_accepted
            )
    else:
        n_accepted = k
        for i, token in enumerate(drafted):
            row = rows[i]
            most = row.max()
            if row[token] < most - tolerance or (not tolerance and not _first_max(row, token, most)):
                n_accepted = i
                break
    return [*drafted[:n_accepted], int(rows[n_accepted].argmax())]


# Two best logits of a row closer than this may trade places between a row computed alone and one
# computed in a batch (llama.cpp's one-row and batched kernels round differently on a quantized
# model: the two best of a reply's first row moved up to 0.35 apart (AVX-512) and 0.50 (AVX2) on
# Gemma 3 270M Q4_K_M over the bench's 28 prompts, docs/design-engine.md).
NEAR_TIE = 1.0


# A draft model's first step is not read again (its draft is in the draft model's cache too); an
# earlier reply's draft keeps its tokens within NEAR_TIE of the best (accept's tolerance).
_NOT_REREAD = (DrafterKind.MODEL, DrafterKind.MEMORY_PHRASE, DrafterKind.MEMORY_COPY)


def _near_tie(row: np.ndarray, params: SamplingParams, proposal: Proposal) -> bool:
    """Greedy, an n-gram draft from the text: are the row's two best logits within NEAR_TIE?"""
    if not params.is_greedy or params.repeat_penalty != 1.0 or proposal.kind in _NOT_REREAD:
        return False
    best, second = np.partition(row, -2)[-2:][::-1]
    return bool(best - second < NEAR_TIE)


def _first_max(row: np.ndarray, token: int, top: float) -> bool:
    """Is `token`, whose logit is the row's maximum `top`, its first maximal index (no exact tie
    below it)? Plain decoding's argmax takes the first."""
    return token == 0 or bool(row[:token].max() < top)
