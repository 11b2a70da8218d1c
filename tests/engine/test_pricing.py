"""engine/pricing.py's scalar pre-check against its arrays: may_beat_plain may say no only where
rates() finds no draft length beating a plain step. Pure numbers: no model, no process."""

from __future__ import annotations

import itertools

import numpy as np

from engine import pricing
from engine.costs import VerifyCosts


def _costs(timings: dict[int, float]) -> VerifyCosts:
    c = VerifyCosts()
    for n, s in timings.items():
        c.add(n, s)
    return c


CURVES = [
    {},  # nothing timed: the prior slope
    {1: 0.013},  # a plain step only
    {1: 0.013, 2: 0.0135, 4: 0.014, 8: 0.016},  # flat small batches (a larger model)
    {1: 0.010, 2: 0.016, 3: 0.019, 5: 0.027},  # steep ones (a tiny model), sizes between untimed
    {1: 0.020, 16: 0.030, 64: 0.080},  # far apart: interpolated, then past the largest
    {2: 0.015, 4: 0.016},  # no plain step: below the smallest size
]


def test_the_pre_check_never_refuses_a_draft_the_arrays_would_take() -> None:
    refused = taken = 0
    for timings, k_max, a in itertools.product(CURVES, range(1, 9), np.linspace(0.0, 0.99, 67)):
        costs = _costs(timings)
        rates = pricing.rates(costs, k_max, float(a))
        pays = float(rates[1:].max()) > rates[0]
        if pricing.may_beat_plain(costs, k_max, float(a)):
            taken += pays
        else:
            refused += 1
            assert not pays, (timings, k_max, a, rates)
    assert refused > 100 and taken > 100  # both answers are exercised
