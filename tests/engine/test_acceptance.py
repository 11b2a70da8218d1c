"""engine/acceptance.py on its own: how often each kind of draft is accepted, as the controller
prices it (a Beta posterior per kind over its prior). Pure numbers: no model, no process."""

from __future__ import annotations

import pytest

from engine.acceptance import (
    EMA,
    HOPEFUL_TRIALS,
    PRIOR_WEIGHT,
    SEED_TRIALS,
    SEED_TRIALS_DRAFT_MODEL,
    Acceptance,
    AcceptanceTable,
)
from engine.kinds import PRIOR_ACCEPT, DrafterKind


def test_with_nothing_measured_each_kind_is_priced_at_its_prior() -> None:
    table = AcceptanceTable()
    for kind in DrafterKind:
        assert table.rate(kind) == pytest.approx(PRIOR_ACCEPT[kind])
    assert table.rate(99) == pytest.approx(0.5)  # an unknown kind: even odds


def test_a_draft_counts_its_accepted_tokens_and_its_first_rejection() -> None:
    acc = Acceptance(prior=0.5)
    acc.learn(n_drafted=4, n_accepted=2)  # two successes, then one failure (the geometric model)
    assert (acc.accepted, acc.trials) == (2.0, 3.0)
    acc.learn(n_drafted=3, n_accepted=3)  # accepted whole: no failure
    assert (acc.accepted, acc.trials) == pytest.approx((EMA * 2 + 3, EMA * 3 + 3))
    acc.observe(False)  # an offer not drafted, its first token wrong: one trial, no success
    assert acc.trials == pytest.approx(EMA * (EMA * 3 + 3) + 1)
    assert acc.rate() == pytest.approx((acc.accepted + 0.5 * PRIOR_WEIGHT) / (acc.trials + PRIOR_WEIGHT))


def test_one_offs_are_judged_cautiously_and_an_unjudged_draft_model_hopefully() -> None:
    acc = Acceptance(prior=0.7)
    for _ in range(7):  # 7 of 7 accepted
        acc.learn(1, 1)
    assert acc.cautious_rate() < acc.rate() < acc.hopeful_rate()
    assert acc.cautious_rate() >= acc.prior  # never below the prior where the evidence is above it
    judged = Acceptance(prior=0.7, accepted=HOPEFUL_TRIALS * 0.8, trials=HOPEFUL_TRIALS)
    assert judged.hopeful_rate() == judged.rate()  # judged on enough tokens: the mean


def test_acceptance_carried_into_a_new_process_weighs_a_few_trials_a_draft_models_more() -> None:
    table = AcceptanceTable()
    table.seed({"5": [100.0, 100.0], "0": [100.0, 100.0]}, draft_model_costs=True)
    assert table[5].trials == pytest.approx(SEED_TRIALS)
    assert table[0].trials == pytest.approx(SEED_TRIALS_DRAFT_MODEL)
    free = AcceptanceTable()
    free.seed({"0": [100.0, 100.0]}, draft_model_costs=False)  # kind 0 without a draft model
    assert free[0].trials == pytest.approx(SEED_TRIALS)
    assert AcceptanceTable(table.kinds).export() == {"5": [2.0, 2.0], "0": [16.0, 16.0]}
