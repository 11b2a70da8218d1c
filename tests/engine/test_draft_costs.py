"""engine/draft_costs.py and engine/pricing.py on their own: what a draft model costs (decodes,
refusals, load, prompt reads) and what a draft of k tokens is worth. Pure numbers, no model."""

from __future__ import annotations

import numpy as np
import pytest

from engine import pricing
from engine.acceptance import Acceptance
from engine.costs import VerifyCosts
from engine.draft_costs import PRIOR_DRAFT_COST, REMEASURE_FIRST, DraftModelCosts


def test_n_gram_drafts_cost_nothing_and_a_draft_model_its_prior_until_measured() -> None:
    assert DraftModelCosts().draft_cost(0.05) == 0.0 == DraftModelCosts().draft_first_cost(0.05)
    model = DraftModelCosts(enabled=True)
    assert model.draft_cost(0.05) == pytest.approx(PRIOR_DRAFT_COST * 0.05)


def test_a_drafts_first_decode_is_priced_apart_and_a_refusal_is_an_ask_that_drafted_nothing() -> None:
    model = DraftModelCosts(enabled=True)
    model.note_step(n_drafted=5, draft_s=0.04 + 4 * 0.01, first_s=0.04, n_more=4, plain_s=0.1)
    assert model.draft_first_ratio == pytest.approx(0.4) and model.draft_ratio == pytest.approx(0.1)
    assert model.refusal_rate() == 0.0
    model.note_step(n_drafted=0, draft_s=0.04, first_s=None, n_more=0, plain_s=0.1)
    assert model.refusal_rate() > 0.0
    untold = DraftModelCosts(enabled=True)
    untold.note_step(n_drafted=4, draft_s=0.08, first_s=None, n_more=0, plain_s=0.1)  # all alike
    assert untold.draft_first_ratio == pytest.approx(0.2) == untold.draft_ratio


def test_a_load_and_a_prompt_read_keep_the_lowest_timing_and_short_reads_are_ignored() -> None:
    model = DraftModelCosts(enabled=True)
    model.note_load(2.0)
    model.note_load(5.0)  # a busy moment
    assert model.load_s == 2.0
    model.note_prefill(0.001, 8, 0.1, 100)  # too short to time
    assert model.prefill_ratio is None and model.one_off_s(1.0) == pytest.approx(2.0 + PRIOR_DRAFT_COST)
    model.note_prefill(0.01, 100, 0.1, 100)
    model.note_prefill(0.05, 100, 0.1, 100)
    assert model.prefill_ratio == pytest.approx(0.1) and model.one_off_s(1.0, loaded=True) == pytest.approx(
        0.1
    )
    assert model.target_read_s(300, plain_s=0.05) == pytest.approx(0.3)  # at the target's prefill, 1 ms


def test_a_draft_model_found_too_slow_is_timed_afresh_ever_more_rarely() -> None:
    model = DraftModelCosts(enabled=True, draft_ratio=5.0)
    for _ in range(REMEASURE_FIRST - 1):
        model.begin_reply(never_pays=True)
    assert model.draft_ratio == 5.0
    model.begin_reply(never_pays=True)
    assert model.draft_ratio is None and model.remeasure_every == 2 * REMEASURE_FIRST


def test_a_drafts_worth_is_its_expected_tokens_over_its_step() -> None:
    costs = VerifyCosts()
    costs.seed({"1": 0.010, "9": 0.020})
    rates = pricing.rates(costs, 8, a=0.5)
    k = np.arange(9)
    assert np.allclose(rates, (1 - 0.5 ** (k + 1)) / 0.5 / costs.costs(9)[1:])
    assert [pricing.rate(costs, j, 0.5) for j in range(9)] == pytest.approx(list(rates))
    model = DraftModelCosts(enabled=True, draft_ratio=0.5)
    assert np.all(pricing.rates(costs, 8, 0.5, draft=model)[1:] < rates[1:])  # decodes cost
    assert pricing.rates(costs, 8, 0.5, survival=np.ones(8))[8] == pytest.approx(9 / 0.020)


def test_a_draft_model_too_slow_at_full_acceptance_never_pays_and_a_one_off_is_repaid_or_not() -> None:
    costs = VerifyCosts()
    costs.seed({"1": 0.010, "4": 0.012, "8": 0.014})
    assert not pricing.never_pays(costs, DraftModelCosts(enabled=True), 8)  # priors never decide
    assert pricing.never_pays(costs, DraftModelCosts(enabled=True, draft_ratio=1.0), 8)
    fast = DraftModelCosts(enabled=True, draft_ratio=0.05)
    assert not pricing.never_pays(costs, fast, 8)
    a = Acceptance(prior=0.8).rate()
    assert pricing.pays_back(costs, fast, 8, a, n_tokens=512, one_off_s=0.1)
    assert not pricing.pays_back(costs, fast, 8, a, n_tokens=16, one_off_s=0.1)
