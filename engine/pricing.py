"""What a draft of k tokens is worth: expected tokens per second, E(k) / T(k).

With acceptance a per token, a draft of k tokens yields E(k) = (1 - a^(k+1)) / (1 - a) tokens
(the accepted prefix and the target's own), or 1 + S(1) + ... + S(k) where a copy's survival S is
known (engine.copies), and costs T(k) = t_step(k + 1) (engine.costs), plus a draft model's
decodes (engine.draft_costs): its first, then one a token; a draft model that refuses (rate r)
costs a decode and a 1-row step for one token. k = 0 is a plain step.
"""

from __future__ import annotations

import numpy as np

from engine.acceptance import MAX_RATE
from engine.costs import VerifyCosts
from engine.draft_costs import DraftModelCosts


def rates(
    costs: VerifyCosts,
    k_max: int,
    a: float,
    survival: np.ndarray | None = None,
    draft: DraftModelCosts | None = None,
) -> np.ndarray:
    """E(k) / T(k) for k = 0..k_max; draft: the draft model's costs where the offer costs decodes
    (None: free, an n-gram match)."""
    ks = np.arange(k_max + 1, dtype=np.float64)
    if survival is not None:
        tokens = np.concatenate(([1.0], 1.0 + np.cumsum(survival[:k_max])))
    else:
        a = min(a, MAX_RATE)
        tokens = (1 - a ** (ks + 1)) / (1 - a)
    rows = costs.costs(k_max + 1)[1:]
    if draft is None:
        free: np.ndarray = tokens / rows
        return free
    plain_s = costs.cost(1)
    first, d = draft.draft_first_cost(plain_s), draft.draft_cost(plain_s)
    drafted_s = np.where(ks > 0, first + (ks - 1) * d, 0.0) + rows
    r = draft.refusal_rate()
    if r > 0.0:
        tokens[1:] = (1 - r) * tokens[1:] + r
        drafted_s[1:] = (1 - r) * drafted_s[1:] + r * (first + rows[0])
    out: np.ndarray = tokens / drafted_s
    return out


def rate(costs: VerifyCosts, k: int, a: float, draft: DraftModelCosts | None = None) -> float:
    """rates(...)[k] without the arrays (numpy's small-array calls, caches cold after a decode,
    cost a step's `record` ~0.15 ms)."""
    a = min(a, MAX_RATE)
    tokens = (1 - a ** (k + 1)) / (1 - a)
    cost = costs.cost(k + 1)
    if draft is None:
        return tokens / cost
    plain_s = costs.cost(1)
    first = draft.draft_first_cost(plain_s)
    drafted_s = (first + (k - 1) * draft.draft_cost(plain_s) if k > 0 else 0.0) + cost
    r = draft.refusal_rate()
    if r > 0.0 and k > 0:
        tokens = (1 - r) * tokens + r
        drafted_s = (1 - r) * drafted_s + r * (first + costs.cost(1))
    return tokens / drafted_s


def may_beat_plain(costs: VerifyCosts, k_max: int, a: float) -> bool:
    """Whether a free draft of 1..k_max tokens may beat a plain step: rate() per length, no arrays
    (most steps of open text say no, and rates()' arrays cost ~0.2 ms a step in a reply, caches cold
    after each decode). A relative slack of 1e-9 leaves every case scalar rounding could tip to
    rates(), which decides."""
    plain = rate(costs, 0, a)
    return any(rate(costs, k, a) > plain * (1 - 1e-9) for k in range(1, k_max + 1))


def never_pays(costs: VerifyCosts, draft: DraftModelCosts, k_max: int) -> bool:
    """A measured draft model too slow for any draft length to beat plain decoding, even with
    every drafted token accepted. Needs a measured draft cost; priors never decide this."""
    if not draft.enabled or draft.draft_ratio is None or 1 not in costs.median:
        return False
    k_top = min(k_max, 2 * max(costs.median))
    plain_s = costs.cost(1)
    first, d = draft.draft_first_cost(plain_s), draft.draft_cost(plain_s)
    return all(
        (k + 1) / (first + (k - 1) * d + costs.cost(k + 1)) <= 1.0 / plain_s for k in range(1, k_top + 1)
    )


def pays_back(
    costs: VerifyCosts, draft: DraftModelCosts | None, limit: int, a: float, n_tokens: int, one_off_s: float
) -> bool:
    """Would drafting from a draft model at acceptance a, drafts of at most `limit`, over a reply
    of n_tokens save more than a one-off cost (its load, reading the prompt into it)?"""
    best_rates = rates(costs, limit, a, draft=draft)
    best = float(best_rates[1:].max()) if limit >= 1 else 0.0
    plain_s = costs.cost(1)
    if best * plain_s <= 1.0:
        return False
    return n_tokens * (plain_s - 1.0 / best) > one_off_s
