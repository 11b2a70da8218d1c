"""Turn a row of logits into what the target (or the draft) would sample from.

`distribution` applies repetition penalty, temperature, top-k, top-p and min-p in llama.cpp's
order and returns a sparse distribution (ids, probs). The speculative rule compares target and
draft distributions made by this same function, so the filters apply identically to both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.config import SamplingParams


@dataclass(frozen=True)
class Dist:
    """A sparse probability distribution over token ids. ids are unique; probs sum to 1."""

    ids: np.ndarray  # int64
    probs: np.ndarray  # float64

    def prob(self, token: int) -> float:
        hit = np.nonzero(self.ids == token)[0]
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.ids[_choose(self.probs, rng)])

    def sample_keyed(self, seed: int, position: int) -> int:
        """Sample with the Gumbel-max trick, noise keyed by (seed, position, token id): the token
        depends only on this distribution and the key, so "keep a deterministic draft while it
        equals the target's sample" emits exactly plain decoding's text with the same seed."""
        u = keyed_uniform(seed, position, self.ids)
        gumbel = -np.log(-np.log(u))
        with np.errstate(divide="ignore"):
            return int(self.ids[np.argmax(np.log(self.probs) + gumbel)])


def keyed_uniform(seed: int, position: int, ids: np.ndarray) -> np.ndarray:
    """Uniform numbers in (0, 1), one per id, a pure function of (seed, position, id) (splitmix64)."""
    with np.errstate(over="ignore"):
        z = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(
            (seed * 0xBF58476D1CE4E5B9 + position * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        )
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _choose(probs: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))


def penalize(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """llama.cpp's repetition penalty over the last repeat_last_n tokens (a copy when it applies)."""
    if params.repeat_penalty == 1.0 or not history:
        return logits
    recent = np.unique(np.asarray(history[-params.repeat_last_n :], dtype=np.int64))
    if params.penalty_exempt:
        recent = recent[~np.isin(recent, np.fromiter(params.penalty_exempt, dtype=np.int64))]
    out = logits.copy()
    values = out[recent]
    out[recent] = np.where(values > 0, values / params.repeat_penalty, values * params.repeat_penalty)
    return out


def greedy(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> int:
    return int(np.argmax(penalize(logits, history, params)))


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest logits (in no order), as np.argpartition finds them. A 262k-entry
    row's argpartition costs ~3 ms, so where at least k logits lie within a margin of the maximum
    only those are partitioned (Gemma 3: a few hundred to ~2,000; 0.3 ms in all)."""
    m = logits.max()
    for margin in (6.0, 12.0):
        near = np.flatnonzero(logits > m - margin)
        if len(near) >= k:
            return near[np.argpartition(logits[near], -k)[-k:]] if len(near) > k else near
    return np.argpartition(logits, -k)[-k:]


def distribution(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> Dist:
    logits = penalize(logits, history, params)
    n_vocab = logits.shape[0]
    ids = top_k_ids(logits, params.top_k) if 0 < params.top_k < n_vocab else np.arange(n_vocab)
    scaled = logits[ids].astype(np.float64) / max(params.temperature, 1e-6)
    order = np.argsort(-scaled, kind="stable")
    ids, scaled = ids[order], scaled[order]
    probs = np.exp(scaled - scaled[0])
    probs /= probs.sum()
    keep = len(probs)
    if params.top_p < 1.0:
        # Keep the smallest prefix whose mass reaches top_p (at least one token).
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        keep = min(keep, max(1, int(np.count_nonzero(probs[:keep] >= params.min_p * probs[0]))))
    ids, probs = ids[:keep], probs[:keep]
    return Dist(ids.astype(np.int64), probs / probs.sum())


def top_probability(logits: np.ndarray, top: int) -> float:
    """The softmax probability of `top` (the row's argmax), from the logits within 16 of it
    alone: each other weighs less than e^-16, so it reads at most ~0.03 high with a 262k
    vocabulary (a draft model's confidence bin needs no more: engine.drafters.Confidence)."""
    m = logits[top]
    near = logits[logits > m - _NEAR]
    return 1.0 / float(np.exp(near - m, dtype=np.float32).sum())


_NEAR = 16.0


def accept_draft(p: Dist, token: int, q: Dist, rng: np.random.Generator) -> tuple[bool, int | None]:
    """The speculative sampling rule for one token sampled from the draft's distribution q: accept
    with probability min(1, p/q), else return a token from the normalised residual max(0, p - q),
    so the emitted token is distributed exactly as p (Leviathan et al. 2023, Chen et al. 2023)."""
    p_tok = p.prob(token)
    q_tok = q.prob(token)
    if q_tok > 0.0 and rng.random() < min(1.0, p_tok / q_tok):
        return True, None
    ids = np.union1d(p.ids, q.ids)
    p_dense = np.zeros(len(ids))
    q_dense = np.zeros(len(ids))
    p_dense[np.searchsorted(ids, p.ids)] = p.probs
    q_dense[np.searchsorted(ids, q.ids)] = q.probs
    residual = np.maximum(p_dense - q_dense, 0.0)
    if residual.sum() <= 0.0:  # p == q up to rounding: any token from p is right
        return False, p.sample(rng)
    return False, int(ids[_choose(residual / residual.sum(), rng)])
