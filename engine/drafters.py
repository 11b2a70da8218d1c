"""Drafters propose the next tokens cheaply; the target verifies them in one batch.

NgramDrafter: no model. The longest suffix of the text so far that occurred before (in the
prompt or the output) predicts that what followed it then follows again. Free to run, so it
wins on copy and edit work, where a reply repeats its prompt.

ModelDrafter: a small model of the same vocabulary. Its KV cache is kept across steps: each
step decodes only what it has not seen (the target's correction and, after a fully accepted
draft, the last drafted token), so no token is decoded twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from engine.backend import ContextFullError, LlamaRunner
from engine.config import SamplingParams
from engine.sampling import Dist, distribution, greedy, top_probability


@dataclass
class Draft:
    tokens: list[int]
    dists: list[Dist] | None = None  # the draft's own distributions (sampled drafts only)
    token_s: list[float] = field(default_factory=list)  # seconds per single-token draft decode


class NgramDrafter:
    kind = "ngram"

    @staticmethod
    def bucket(match_len: int) -> int:
        """Acceptance statistics are kept per class of match length: longer matches draft better."""
        return 1 if match_len <= 1 else 2 if match_len == 2 else 3 if match_len <= 4 else 4

    def __init__(self, max_ngram: int = 8) -> None:
        self.max_ngram = max_ngram
        # _index[n][ngram] = end position (exclusive) of its latest occurrence.
        self._index: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_ngram + 1)]
        self._ctx: list[int] = []
        self._n_indexed = 0  # n-grams ending before this position are indexed

    def begin(self, ctx: list[int]) -> None:
        """Start a generation: index the prompt (kept when it extends the last context)."""
        if len(ctx) < self._n_indexed or ctx[: self._n_indexed] != self._ctx[: self._n_indexed]:
            self._index = [{} for _ in range(self.max_ngram + 1)]
            self._n_indexed = 0
        self._ctx = ctx

    def _index_upto(self, end: int) -> None:
        ctx = self._ctx
        for e in range(max(self._n_indexed, 1), end):
            for n in range(1, min(self.max_ngram, e) + 1):
                self._index[n][tuple(ctx[e - n : e])] = e
        self._n_indexed = max(self._n_indexed, end)

    def lookup(self, ctx: list[int], k_max: int) -> tuple[list[int], int]:
        """The continuation of the longest earlier match of ctx's suffix, and the match length."""
        self._ctx = ctx
        end = len(ctx)
        # Index every n-gram that ends before the current end: the suffix itself never matches.
        self._index_upto(end)
        for n in range(min(self.max_ngram, end - 1), 0, -1):
            e = self._index[n].get(tuple(ctx[end - n :]))
            if e is not None:
                return ctx[e : min(e + k_max, end)], n
        return [], 0


class ModelDrafter:
    kind = "draft"

    def __init__(self, runner: LlamaRunner, p_min: float = 0.6, sampled: bool = True) -> None:
        self.runner = runner
        self.p_min = p_min  # greedy drafts stop when the draft is less sure than this
        self.sampled = sampled  # at temperature > 0: sample drafts and keep q (else greedy drafts)

    def propose(self, ctx: list[int], k: int, params: SamplingParams, rng: np.random.Generator) -> Draft:
        runner = self.runner
        if k <= 0:
            return Draft([])
        n_keep = runner.common_prefix(ctx)
        if n_keep == len(ctx):  # need logits for the last token: decode it again
            n_keep -= 1
        runner.truncate(n_keep)
        k = min(k, runner.n_ctx - len(ctx))
        if k <= 0:
            return Draft([])
        try:
            logits = runner.decode(ctx[n_keep:], n_logits=1)[0]
        except ContextFullError:
            return Draft([])
        sampled = self.sampled and not params.is_greedy
        draft = Draft([], [] if sampled else None)
        history = list(ctx)
        for i in range(k):
            if sampled:
                dist = distribution(logits, history, params)
                token = dist.sample(rng)
                assert draft.dists is not None
                draft.dists.append(dist)
            else:
                if self.p_min > 0 and top_probability(logits) < self.p_min:
                    break
                token = greedy(logits, history, params)
            draft.tokens.append(token)
            history.append(token)
            if i == k - 1:
                break
            t0 = time.perf_counter()
            logits = runner.decode([token], n_logits=1)[0]
            draft.token_s.append(time.perf_counter() - t0)
        return draft
