"""Turn a row of logits into what the target (or the draft) would sample from.

`distribution` applies repetition penalty, temperature, top-k, top-p and min-p in llama.cpp's
order and returns a sparse distribution (ids, probs). The speculative rule compares target and
draft distributions made by this same function, so the filters apply identically to both.
"""

from __future__ import annotations

import math
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
        """Sample with the Gumbel-max trick, noise keyed by (seed, position, token id).

        The token drawn at a position depends only on this distribution and the key, not on
        how many random numbers were used before. So with a deterministic draft (n-gram or a
        greedy draft model) "keep the draft while it equals the target's sample" emits exactly
        the text plain decoding emits with the same seed, whatever the draft lengths were.
        """
        return int(sample_keyed_rows(self.ids[None], self.probs[None], seed, [position])[0])


def sample_keyed_rows(ids: np.ndarray, probs: np.ndarray, seed: int, positions: Sequence[int]) -> np.ndarray:
    """Dist.sample_keyed for each row of (n, k) ids and probabilities at once (a probability of 0
    pads a row: never drawn). Each row's draw is the one its Dist alone would make."""
    u = keyed_uniform_rows(seed, positions, ids)
    gumbel = -np.log(-np.log(u))
    with np.errstate(divide="ignore"):
        choice = np.argmax(np.log(probs) + gumbel, axis=1)
    picked: np.ndarray = ids[np.arange(len(ids)), choice]
    return picked


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def keyed_uniform(seed: int, position: int, ids: np.ndarray) -> np.ndarray:
    """Uniform numbers in (0, 1), one per id, a pure function of (seed, position, id) (splitmix64)."""
    row: np.ndarray = keyed_uniform_rows(seed, [position], ids[None])[0]
    return row


def keyed_uniform_rows(seed: int, positions: Sequence[int], ids: np.ndarray) -> np.ndarray:
    """keyed_uniform for each row of ids (n, k), row i at positions[i]."""
    keys = np.array(
        [(seed * 0xBF58476D1CE4E5B9 + p * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF for p in positions],
        dtype=np.uint64,
    )[:, None]
    with np.errstate(over="ignore"):
        z = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ keys
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _choose(probs: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(probs) - 1))


def penalized_ids(history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """The ids the repetition penalty changes after `history`: its last repeat_last_n tokens,
    each once, less the exempt ones."""
    if params.repeat_penalty == 1.0 or not history:
        return np.empty(0, dtype=np.int64)
    recent = np.unique(np.asarray(history[-params.repeat_last_n :], dtype=np.int64))
    if params.penalty_exempt:
        recent = recent[~np.isin(recent, np.fromiter(params.penalty_exempt, dtype=np.int64))]
    return recent


def _penalized_values(values: np.ndarray, params: SamplingParams) -> np.ndarray:
    return np.where(values > 0, values / params.repeat_penalty, values * params.repeat_penalty)


def penalize(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """llama.cpp's repetition penalty over the last repeat_last_n tokens (a copy when it applies)."""
    recent = penalized_ids(history, params)
    if not len(recent):
        return logits
    out = logits.copy()
    out[recent] = _penalized_values(out[recent], params)
    return out


def greedy(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> int:
    return int(np.argmax(penalize(logits, history, params)))


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest logits (in no order), as np.argpartition finds them.

    A full argpartition of a 262k-entry row costs ~3 ms, and sampling with a draft model needs
    two per drafted token (the draft's distribution and the target's). When at least k logits
    lie within a margin of the maximum, the k largest are among them, and only those are
    partitioned (Gemma 3: a few hundred to ~2,000 within 10 of the maximum; 0.3 ms in all).
    Otherwise, the whole row."""
    m = logits.max()
    for margin in (6.0, 12.0):
        near = np.flatnonzero(logits > m - margin)
        if len(near) >= k:
            return near[np.argpartition(logits[near], -k)[-k:]] if len(near) > k else near
    return np.argpartition(logits, -k)[-k:]


def distribution(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> Dist:
    """What the sampler draws from after `history`: repetition penalty, top-k, temperature,
    top-p and min-p, in llama.cpp's order. One row of `distributions`."""
    return distributions(logits[None], [history], params)[0]


def distributions(rows: np.ndarray, histories: Sequence[Sequence[int]], params: SamplingParams) -> list[Dist]:
    """distribution() of each row, rows[i] after histories[i] (only the last repeat_last_n
    tokens of a history count), computed for all rows at once: a verify batch's rows are read
    together (their maxima, the logits near them) and filtered as one (n, k) array, where row by
    row each cost a dozen small numpy calls (0.26-0.39 ms a row, ten times its reading).

    The top-k keeps the k largest penalised logits, ties broken by the lower id, and ranks them
    so; one row alone (`distribution`) is this with n = 1, so a seeded sample is the same from
    either path."""
    ids, logits = _top_k_rows(rows, histories, params)
    probs, keep = _filter(logits, params)
    return [Dist(ids[i, : keep[i]], probs[i, : keep[i]]) for i in range(len(ids))]


def keyed_samples(
    rows: np.ndarray,
    histories: Sequence[Sequence[int]],
    params: SamplingParams,
    seed: int,
    positions: Sequence[int],
) -> np.ndarray:
    """Each row's keyed sample (Dist.sample_keyed at positions[i]) without building its Dist."""
    ids, logits = _top_k_rows(rows, histories, params)
    probs, _ = _filter(logits, params)
    return sample_keyed_rows(ids, probs, seed, positions)


# Logits this far below a row's maximum are gathered first for its top-k; where fewer than k
# lie within the first margin, the second; then the whole row is partitioned.
_TOP_K_MARGINS = (6.0, 12.0)
_SORT_MAX = 512  # candidates of one row sorted as they are; more are first cut to its top-k


def _top_k_rows(
    rows: np.ndarray, histories: Sequence[Sequence[int]], params: SamplingParams
) -> tuple[np.ndarray, np.ndarray]:
    """(n, k) ids and penalised logits of each row's top-k, ranked by logit (descending), then id.

    The k largest penalised logits of a row are among those near its maximum plus the penalised
    ids, once at least k unpenalised ids lie near it (each of those beats any unpenalised id
    further away). So the rows are read twice in all, whatever their number: their maxima, then
    the logits within a margin of them."""
    n, n_vocab = rows.shape
    k = params.top_k if 0 < params.top_k < n_vocab else n_vocab
    pen = [penalized_ids(h, params) for h in histories]
    parts_r: list[np.ndarray] = []
    parts_c: list[np.ndarray] = []
    parts_v: list[np.ndarray] = []
    if k == n_vocab:  # no top-k: every id of every row
        for i in range(n):
            row = penalize(rows[i], histories[i], params)
            parts_r.append(np.full(n_vocab, i))
            parts_c.append(np.arange(n_vocab))
            parts_v.append(row)
    else:
        flat = np.flatnonzero(rows > (rows.max(axis=1) - _TOP_K_MARGINS[0])[:, None])
        r, c = np.divmod(flat, n_vocab)
        v = rows.reshape(-1)[flat]
        if any(len(p) for p in pen):
            pen_r = np.concatenate([np.full(len(p), i) for i, p in enumerate(pen)])
            pen_c = np.concatenate(pen)
            free = ~np.isin(flat, pen_r * n_vocab + pen_c)
            r, c, v = r[free], c[free], v[free]
        n_near = np.bincount(r, minlength=n)
        short = set(np.flatnonzero(n_near < k).tolist())
        if short:
            keep = n_near[r] >= k
            r, c, v = r[keep], c[keep], v[keep]
        # Rows with many logits near the top (an unsure model): only those at least the k-th
        # largest go on to the sort (ties included, so the sort still breaks them by id).
        bounds = np.searchsorted(r, np.arange(n + 1))
        big = np.flatnonzero(np.diff(bounds) > _SORT_MAX)
        if big.size:
            floor = np.full(n, -np.inf, dtype=v.dtype)
            for j in big.tolist():
                floor[j] = np.partition(v[bounds[j] : bounds[j + 1]], -k)[-k]
            keep = v >= floor[r]
            r, c, v = r[keep], c[keep], v[keep]
        parts_r.append(r)
        parts_c.append(c)
        parts_v.append(v)
        for i in range(n):
            if i in short:
                ids = _top_k_far(rows[i], histories[i], pen[i], k, params)
                parts_r.append(np.full(len(ids), i))
                parts_c.append(ids)
                parts_v.append(penalize(rows[i], histories[i], params)[ids] if len(pen[i]) else rows[i][ids])
            elif len(pen[i]):
                parts_r.append(np.full(len(pen[i]), i))
                parts_c.append(pen[i])
                parts_v.append(_penalized_values(rows[i][pen[i]], params))
    r, c, v = np.concatenate(parts_r), np.concatenate(parts_c), np.concatenate(parts_v)
    order = np.lexsort((c, -v, r))
    r, c, v = r[order], c[order], v[order]
    rank = np.arange(len(r)) - np.searchsorted(r, np.arange(n))[r]
    top = rank < k
    return c[top].reshape(n, k).astype(np.int64), v[top].reshape(n, k)


def _top_k_far(
    row: np.ndarray, history: Sequence[int], pen: np.ndarray, k: int, params: SamplingParams
) -> np.ndarray:
    """Candidates for a row with fewer than k unpenalised logits near its maximum: those within
    the wider margin where they are enough, else the row's k largest penalised logits."""
    near = np.flatnonzero(row > row.max() - _TOP_K_MARGINS[1])
    if len(pen):
        free = near[~np.isin(near, pen)]
        if len(free) >= k:
            return np.union1d(free, pen)
    elif len(near) >= k:
        return near
    penalized = penalize(row, history, params)
    return np.argpartition(penalized, -k)[-k:]


def _filter(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Temperature, softmax, top-p and min-p over ranked (n, k) logits: each row's probabilities
    (0 past what it keeps; the kept ones sum to 1) and how many it keeps."""
    scaled = logits.astype(np.float64) / max(params.temperature, 1e-6)
    probs = np.exp(scaled - scaled[:, :1])
    probs /= probs.sum(axis=1, keepdims=True)
    n, k = probs.shape
    keep = np.full(n, k)
    if params.top_p < 1.0:
        # Keep the smallest prefix whose mass reaches top_p (at least one token).
        keep = np.minimum(keep, np.count_nonzero(np.cumsum(probs, axis=1) < params.top_p, axis=1) + 1)
    cols = np.arange(k)[None, :]
    if params.min_p > 0.0:
        above = (probs >= params.min_p * probs[:, :1]) & (cols < keep[:, None])
        keep = np.minimum(keep, np.maximum(1, np.count_nonzero(above, axis=1)))
    probs = np.where(cols < keep[:, None], probs, 0.0)
    return probs / probs.sum(axis=1, keepdims=True), keep


def draft_is_sure(logits: np.ndarray, top: int, p_min: float) -> bool:
    """Whether the softmax probability of `top` (the row's argmax) is at least p_min: the
    decision the whole softmax gives, at a fraction of its cost (a draft model asks it of every
    token it drafts).

    The probability is 1 / S, S the sum of exp(l - l_top) over the row. Logits within 16 of the
    top are summed exactly; each other weighs less than e^-16, so S lies in [near, near +
    n_rest * e^-16] (an interval under 0.03 wide with a 262k vocabulary), and only where
    1 / p_min falls inside it is the whole row summed. Where more than 4,096 logits lie that
    near (Gemma 3 270M, unsure: tens of thousands), gathering them costs more than
    exponentiating the row, and the row is summed at once. Gemma 3 270M's own rows, 2 Xeon
    cores, with the argmax the drafter takes anyway: 0.14-0.17 ms a row, against 0.21-0.36 ms
    for a max, then the near logits within 20 (or the whole row) summed.
    """
    m = logits[top]
    limit = 1.0 / p_min
    near = logits > m - _NEAR
    n_near = int(np.count_nonzero(near))
    if n_near <= _GATHER_MAX:
        total = float(np.exp(logits[near] - m, dtype=np.float32).sum())
        if total > limit:
            return False
        if total + (logits.shape[0] - n_near) * _FAR_WEIGHT <= limit:
            return True
    return float(np.exp(logits - m, dtype=np.float32).sum()) <= limit


_NEAR = 16.0
_FAR_WEIGHT = math.exp(-_NEAR)  # the most a logit further below the top adds to S
_GATHER_MAX = 4096


def accept_draft(p: Dist, token: int, q: Dist, rng: np.random.Generator) -> tuple[bool, int | None]:
    """The speculative sampling rule for one token sampled from the draft's distribution.

    p: target distribution at this position, q: the draft's. Accept with probability
    min(1, p/q); on rejection return a token from the normalised residual max(0, p - q).
    Either way the emitted token is distributed exactly as p (Leviathan et al. 2023, Chen
    et al. 2023). Deterministic drafts don't come here: see Dist.sample_keyed.
    """
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
