"""Drafters propose the next tokens cheaply; the target verifies them in one batch.

NgramDrafter: no model. The longest suffix of the text so far that occurred before (in the
prompt or the output) predicts that what followed it then follows again. Free to run, so it
wins on copy and edit work, where a reply repeats its prompt. With a ReplyMemory it also drafts
from the engine's earlier replies where they match longer (Regenerate, a question asked again).

ModelDrafter: a small model of the same vocabulary. Its KV cache is kept across steps: each
step decodes only what it has not seen (the target's correction and, after a fully accepted
draft, the last drafted token), so no token is decoded twice. The model is loaded on first use:
where the cost cache already knows it cannot pay on this machine, it is never loaded at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from engine.adaptive import COPY_KINDS, MEMORY_KINDS, DrafterKind
from engine.backend import ContextFullError, LlamaRunner
from engine.config import SamplingParams
from engine.errors import TandemError
from engine.events import DraftSource, Speculation
from engine.reply_memory import ReplyMemory
from engine.sampling import Dist, distribution, draft_is_sure, greedy


@dataclass
class Draft:
    tokens: list[int]
    dists: list[Dist] | None = None  # the draft's own distributions (sampled drafts only)
    draft_s: float = 0.0  # seconds spent drafting this step's tokens
    # Of draft_s, the first decode (what the draft had not seen: after a draft accepted whole,
    # 2 rows, which cost ~2x one on a CPU) when it was not a catch-up; and the decodes after it.
    first_s: float = 0.0
    n_more: int = 0
    catch_up_s: float = 0.0  # seconds spent first decoding a long stretch the draft had not seen


class NgramDrafter:
    kind: ClassVar[Speculation] = Speculation.NGRAM

    # A match is extended backwards past max_ngram, to tell text being copied (16 tokens or more
    # equal to an earlier stretch) from a phrase that recurs (5-15 tokens).
    COPY_MATCH = 16
    COPY_START = 4  # ...or this long, where it covers all of the reply so far
    # How far back a match is followed: far enough that, between the text so far and an earlier
    # reply, the longer match (a reply being given again) is told apart.
    MATCH_EXTEND = 64

    @staticmethod
    def bucket(match_len: int) -> DrafterKind:
        """Acceptance statistics are kept per class of match length: longer matches draft better.
        Bucket 5 is copying (16 tokens or more matched): nearly always right, where a recurring
        phrase of 5-15 tokens (bucket 4) often continues otherwise in fresh text. Kept apart, a
        copy's acceptance no longer makes fresh text's phrase repeats look safe to draft."""
        if match_len <= 1:
            return DrafterKind.MATCH_1
        if match_len == 2:
            return DrafterKind.MATCH_2
        if match_len <= 4:
            return DrafterKind.MATCH_3_4
        return DrafterKind.PHRASE if match_len < NgramDrafter.COPY_MATCH else DrafterKind.COPY

    # Matches in earlier replies (ReplyMemory) are kept apart: 6 for a phrase, 7 for 16 tokens
    # or more (a reply being given again).
    MEMORY_BUCKETS = MEMORY_KINDS
    COPY_BUCKETS = COPY_KINDS  # text being copied: from the text so far, or from an earlier reply

    @staticmethod
    def memory_bucket(match_len: int) -> DrafterKind:
        return DrafterKind.MEMORY_COPY if match_len >= NgramDrafter.COPY_MATCH else DrafterKind.MEMORY_PHRASE

    # A short match (FREQUENT_MAX tokens or fewer) drafts what followed it most often where that
    # is most of what followed it (FREQUENT_SHARE of FREQUENT_MIN occurrences or more), else what
    # followed it last: several continuations kept per n-gram, as llama.cpp's lookup (counts per
    # n-gram) and ngram-map-k4v (4 values per key) keep them. A long match is text being copied
    # or a loop: what followed it last is what follows.
    FREQUENT_MAX = 4
    FREQUENT_MIN = 2
    FREQUENT_SHARE = 0.5

    def __init__(self, max_ngram: int = 8, memory: ReplyMemory | None = None) -> None:
        self.max_ngram = max_ngram
        self.memory = memory
        # _index[n][ngram] = end position (exclusive) of its latest occurrence.
        self._index: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_ngram + 1)]
        # _next[n][ngram][token] = how often token followed ngram (n <= FREQUENT_MAX).
        self._next: list[dict[tuple[int, ...], dict[int, int]]] = [{} for _ in range(self.FREQUENT_MAX + 1)]
        self._ctx: list[int] = []
        self._n_indexed = 0  # n-grams ending before this position are indexed
        self._reply_start = 0  # where this generation's own text starts in ctx
        # [start, end) token ranges of ctx holding attached documents: a match there drafts from
        # the document (DraftSource.DOCUMENT), anywhere else from the conversation (TEXT).
        self.document_spans: tuple[tuple[int, int], ...] = ()
        self.offer_source = DraftSource.NONE  # where the last offer came from
        self._match_at = -1  # where the last lookup's continuation starts in ctx

    def begin(self, ctx: list[int], document_spans: tuple[tuple[int, int], ...] = ()) -> None:
        """Start a generation: index the prompt (kept when it extends the last context)."""
        self.document_spans = document_spans
        if len(ctx) < self._n_indexed or ctx[: self._n_indexed] != self._ctx[: self._n_indexed]:
            self._index = [{} for _ in range(self.max_ngram + 1)]
            self._next = [{} for _ in range(self.FREQUENT_MAX + 1)]
            self._n_indexed = 0
        self._ctx = ctx
        self._reply_start = len(ctx)

    def _index_upto(self, end: int) -> None:
        ctx = self._ctx
        index, following = self._index, self._next
        frequent_max = self.FREQUENT_MAX
        for e in range(max(self._n_indexed, 1), end):
            token = ctx[e]  # what followed the n-grams that end here
            for n in range(1, min(self.max_ngram, e) + 1):
                key = tuple(ctx[e - n : e])
                index[n][key] = e
                if n <= frequent_max:
                    counts = following[n].setdefault(key, {})
                    counts[token] = counts.get(token, 0) + 1
        self._n_indexed = max(self._n_indexed, end)

    def _most_frequent(self, key: tuple[int, ...], e: int) -> int:
        """Where to draft from after a short match `key` whose latest occurrence ends at e: the
        latest occurrence of key + the token that most often followed it, where that token is
        most of what followed it and not what followed last."""
        counts = self._next[len(key)].get(key)
        if counts is None or len(counts) < 2 or len(key) >= self.max_ngram:
            return e
        token, count = max(counts.items(), key=lambda item: item[1])
        if (
            token == self._ctx[e]
            or count < self.FREQUENT_MIN
            or count <= self.FREQUENT_SHARE * sum(counts.values())
        ):
            return e
        longer = self._index[len(key) + 1].get((*key, token))
        return e if longer is None else longer - 1

    def lookup(self, ctx: list[int], k_max: int) -> tuple[list[int], int]:
        """The continuation of the longest earlier match of ctx's suffix, and the match length."""
        self._ctx = ctx
        end = len(ctx)
        # Index every n-gram that ends before the current end: the suffix itself never matches.
        self._index_upto(end)
        for n in range(min(self.max_ngram, end - 1), 0, -1):
            key = tuple(ctx[end - n :])
            e = self._index[n].get(key)
            if e is not None:
                if n == self.max_ngram:  # how far back does the match go?
                    while n < self.MATCH_EXTEND and e - 1 - n >= 0 and ctx[e - 1 - n] == ctx[end - 1 - n]:
                        n += 1
                elif n <= self.FREQUENT_MAX:
                    e = self._most_frequent(key, e)
                if self.COPY_START <= n < self.COPY_MATCH and end - n <= self._reply_start:
                    # Everything this reply has said so far continues an earlier stretch: a reply
                    # that starts by copying is copying, before it is 16 tokens long.
                    n = self.COPY_MATCH
                self._match_at = e
                return ctx[e : min(e + k_max, end)], n
        self._match_at = -1
        return [], 0

    def offer(self, ctx: list[int], k_max: int, use_memory: bool = True) -> tuple[list[int], DrafterKind]:
        """This step's candidates and their acceptance bucket: the text so far's match, or an
        earlier reply's where that one matches longer."""
        tokens, n = self.lookup(ctx, k_max)
        if use_memory and self.memory is not None and n < self.MATCH_EXTEND:
            earlier, m = self.memory.lookup(ctx, k_max, extend_to=self.MATCH_EXTEND)
            if m > n and earlier:
                self.offer_source = DraftSource.MEMORY
                return earlier, self.memory_bucket(m)
        at = self._match_at
        in_document = any(a <= at < b for a, b in self.document_spans)
        self.offer_source = DraftSource.DOCUMENT if in_document else DraftSource.TEXT
        return tokens, self.bucket(n)


class ModelDrafter:
    kind: ClassVar[Speculation] = Speculation.DRAFT

    # A step's catch-up is 1-2 tokens; more is a prompt (or a stretch decoded plainly) seen for
    # the first time: a one-off prefill, not the per-token cost of drafting.
    CATCH_UP_TOKENS = 2

    def __init__(self, load: Callable[[], LlamaRunner], p_min: float = 0.6, sampled: bool = True) -> None:
        self._load = load
        self._runner: LlamaRunner | None = None
        self.load_error: str | None = None  # why the model could not be loaded (then: no drafts)
        self.load_s: float | None = None  # seconds the load took
        self.p_min = p_min  # greedy drafts stop when the draft is less sure than this
        self.sampled = sampled  # at temperature > 0: sample drafts and keep q (else greedy drafts)
        self.last_read: tuple[int, float] = (0, 0.0)  # the last prefill: tokens read, seconds

    @property
    def loaded(self) -> bool:
        return self._runner is not None

    def _ensure_loaded(self) -> bool:
        """Load on first use. A model that cannot be loaded (memory, a damaged file) turns
        drafting off with the reason kept, rather than failing the reply it was meant to speed up."""
        if self._runner is None and self.load_error is None:
            t0 = time.perf_counter()
            try:
                self._runner = self._load()
            except TandemError as e:
                self.load_error = str(e)
            self.load_s = time.perf_counter() - t0
        return self._runner is not None

    @property
    def runner(self) -> LlamaRunner:
        if self._runner is None:
            raise RuntimeError("the draft model is not loaded")
        return self._runner

    @property
    def llama_s(self) -> float:
        return self._runner.llama_s if self._runner is not None else 0.0

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def unseen(self, ctx: list[int]) -> int:
        """How many tokens of ctx the model would read before drafting (all, when not loaded)."""
        if self._runner is None:
            return len(ctx)
        return len(ctx) - self._runner.common_prefix(ctx)

    def prefill(self, tokens: list[int]) -> float:
        """Read a prompt ahead of drafting (loading the model on first use); seconds spent.
        What the read alone took is kept in last_read: (tokens read, seconds)."""
        t0 = time.perf_counter()
        self.last_read = (0, 0.0)
        if not self._ensure_loaded():
            return time.perf_counter() - t0
        runner = self.runner
        t_read = time.perf_counter()
        n_keep = runner.common_prefix(tokens)
        runner.truncate(n_keep)
        try:
            runner.decode(tokens[n_keep:], n_logits=0)
        except ContextFullError:
            runner.clear()
        else:
            self.last_read = (len(tokens) - n_keep, time.perf_counter() - t_read)
        return time.perf_counter() - t0

    def propose(self, ctx: list[int], k: int, params: SamplingParams, rng: np.random.Generator) -> Draft:
        if k <= 0:
            return Draft([])
        t0 = time.perf_counter()
        first_use = self._runner is None
        if not self._ensure_loaded():
            return Draft([])
        runner = self.runner
        # Loading is a one-off, like a prompt's catch-up: neither is the cost of drafting a token.
        load_s = time.perf_counter() - t0 if first_use else 0.0
        t0 = time.perf_counter()
        n_keep = runner.common_prefix(ctx)
        if n_keep == len(ctx):  # need logits for the last token: decode it again
            n_keep -= 1
        runner.truncate(n_keep)
        k = min(k, runner.n_ctx - len(ctx))
        if k <= 0:
            return Draft([], catch_up_s=load_s)
        try:
            logits = runner.decode(ctx[n_keep:], n_logits=1)[0]
        except ContextFullError:
            return Draft([], catch_up_s=load_s)
        sampled = self.sampled and not params.is_greedy
        draft = Draft([], [] if sampled else None, catch_up_s=load_s)
        if len(ctx) - n_keep > self.CATCH_UP_TOKENS:
            draft.catch_up_s += time.perf_counter() - t0
            t0 = time.perf_counter()
        else:
            draft.first_s = time.perf_counter() - t0
        history = list(ctx)
        for i in range(k):
            if sampled:
                dist = distribution(logits, history, params)
                token = dist.sample(rng)
                assert draft.dists is not None
                draft.dists.append(dist)
            else:
                token = greedy(logits, history, params)
                if self.p_min > 0:
                    # How sure the draft is, of its own top token (the one drafted, unless a
                    # repetition penalty moved the choice).
                    top = token if params.repeat_penalty == 1.0 else int(np.argmax(logits))
                    if not draft_is_sure(logits, top, self.p_min):
                        break
            draft.tokens.append(token)
            history.append(token)
            if i == k - 1:
                break
            logits = runner.decode([token], n_logits=1)[0]
            draft.n_more += 1
        draft.draft_s = time.perf_counter() - t0
        return draft
