"""engine/reply_budget.py on its own: a reply's ramp from short drafts, the risk limit of what its
drafts saved, and short matches priced on its own evidence. Pure numbers: no model, no process."""

from __future__ import annotations

import pytest

from engine.acceptance import Acceptance
from engine.costs import VerifyCosts
from engine.kinds import PRIOR_ACCEPT, DrafterKind
from engine.reply_budget import RAMP_FIRST, SHORT_STREAK, ReplyBudget

# A 2-core CPU's verify batches (Gemma 3 270M): a second row costs more than half a plain step.
CPU = {1: 0.012, 2: 0.031, 4: 0.041, 8: 0.057, 16: 0.091, 32: 0.147}


def cpu() -> VerifyCosts:
    costs = VerifyCosts()
    costs.seed({str(n): s for n, s in CPU.items()})
    return costs


def test_the_ramp_opens_on_tokens_accepted_whole_and_halves_on_a_rejection() -> None:
    budget = ReplyBudget()
    budget.note_draft(DrafterKind.COPY, 2, 2, k_max=32, short=False)
    assert budget.ramp == RAMP_FIRST  # 2 tokens accepted whole: not yet
    budget.note_draft(DrafterKind.COPY, 2, 2, k_max=32, short=False)
    assert budget.ramp == 32 and budget.copy_drafted
    budget.note_draft(DrafterKind.COPY, 32, 5, k_max=32, short=False)
    assert budget.ramp == 16
    budget.note_draft(DrafterKind.COPY, 16, 0, k_max=32, short=False)
    budget.note_draft(DrafterKind.COPY, 8, 0, k_max=32, short=False)
    assert budget.ramp == RAMP_FIRST  # never below a first draft
    budget.begin_reply()
    assert (budget.ramp, budget.whole_tokens, budget.copy_drafted) == (RAMP_FIRST, 0, False)


def test_no_draft_risks_more_than_the_reply_saved_plus_a_first_drafts_risk() -> None:
    costs, budget = cpu(), ReplyBudget()
    first = budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False)
    assert first == RAMP_FIRST  # nothing saved: a first draft's batch
    budget.saved_s = 0.2
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False) == 32
    budget.saved_s = 0.0
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=2.0, keeps=False) < first  # halved per break
    budget.saved_s = -0.1  # in the red: a short match risks what the losses left, a copy keeps its allowance
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False) == 1
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=True) == first
    assert (
        budget.risk_limit(costs, 32, None, sure=16, breaks=0.0, keeps=True) > first
    )  # sure tokens count as emitted
    assert (
        budget.risk_limit(VerifyCosts(), 32, None, sure=0, breaks=0.0, keeps=False) == 32
    )  # no plain step timed


def test_the_ramp_stretches_a_free_draft_to_any_batch_priced_no_dearer() -> None:
    costs = VerifyCosts()
    costs.seed({"1": 0.021, "5": 0.050, "6": 0.045, "7": 0.061, "8": 0.055, "9": 0.070})
    budget = ReplyBudget()
    assert budget.ramp_limit(costs, 32, floor=0, free=True) == RAMP_FIRST + 1  # 6 rows cost less than 5
    assert budget.ramp_limit(costs, 32, floor=0, free=False) == RAMP_FIRST  # a draft model's decodes cost
    assert budget.ramp_limit(costs, 32, floor=24, free=False) == 24  # a copy's first draft or sure run


def test_a_short_match_is_priced_at_its_prior_until_the_reply_drafts_it_or_copies() -> None:
    budget = ReplyBudget()
    carried = Acceptance(PRIOR_ACCEPT[DrafterKind.PHRASE], accepted=50.0, trials=50.0)
    assert budget.short_match_rate(DrafterKind.PHRASE, carried) == PRIOR_ACCEPT[DrafterKind.PHRASE]
    budget.note_draft(DrafterKind.PHRASE, 3, 3, k_max=32, short=True)
    assert budget.short_match_rate(DrafterKind.PHRASE, carried) == pytest.approx(carried.rate())


def test_a_reply_whose_short_matches_keep_being_right_repeats_itself() -> None:
    budget = ReplyBudget()
    for _ in range(SHORT_STREAK - 1):
        budget.note_offer(short=True, accepted=True)
    budget.note_offer(short=False, accepted=False)  # a copy's offer says nothing of the streak
    assert not budget.repeating
    budget.note_offer(short=True, accepted=True)
    assert budget.repeating
    budget.note_offer(short=True, accepted=False)
    assert not budget.repeating


def test_a_short_match_past_the_replys_first_tokens_risks_one_tokens_loss_until_drafts_agree() -> None:
    # SmolLM2 answering about a document (the replay's doc-question-port): a 3-token phrase, 11
    # tokens in, wrong at its first token, lost a plain step of a 19-token answer. Past the reply's
    # first RAMP_FIRST tokens a short match risks what a 1-token draft does beyond what the reply's
    # drafts saved, until its drafts accepted whole hold GUESS_WHOLE tokens (long-question-trademark:
    # one 1-token win, 3 ms, let a 3-token phrase risk 16 ms). In its first tokens (a reply that
    # starts by copying) and for a copy, a RAMP_FIRST-token draft's allowance.
    costs, budget = cpu(), ReplyBudget()
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False, short=True) == RAMP_FIRST
    budget.written = RAMP_FIRST
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False, short=True) == 1
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=True) == RAMP_FIRST
    budget.note_draft(DrafterKind.MATCH_1, 1, 1, k_max=32, short=True)
    budget.saved_s = 0.005  # one 1-token win: a copy's allowance grows by what it saved, a guess's stays 1
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False, short=True) == 1
    assert budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False) > RAMP_FIRST
    budget.note_draft(DrafterKind.MATCH_2, 2, 2, k_max=32, short=True)
    budget.saved_s = 0.03  # drafts accepted whole hold GUESS_WHOLE tokens: the usual allowance
    usual = budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False)
    assert (
        budget.risk_limit(costs, 32, None, sure=0, breaks=0.0, keeps=False, short=True) == usual > RAMP_FIRST
    )
    budget.begin_reply()
    assert budget.written == 0
