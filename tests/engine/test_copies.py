"""engine/copies.py on its own: how far a copy runs (a Lindy law over a Gamma posterior), what a
reply's copies may risk, and a copy resumed after an edit. Pure numbers: no model, no process."""

from __future__ import annotations

import numpy as np
import pytest

from engine.copies import (
    DEPART_CARRIED,
    DEPART_CARRIED_ALPHA,
    MATCH_MIN,
    MATCH_RUN,
    RESUME_AGE,
    RESUME_BREAKS,
    RESUME_WITHIN,
    RISK_DOUBT,
    CopySurvival,
    CopyTrail,
    Departures,
)
from engine.kinds import DrafterKind
from engine.reply_budget import RAMP_FIRST


def test_the_longer_a_copy_has_run_the_longer_it_is_expected_to_go_on() -> None:
    d = Departures()
    young, old = d.survival(age=4, n=16), d.survival(age=64, n=16)
    assert np.all(np.diff(young) < 0) and np.all(old > young)
    # The sure run is where survival falls to 1 - doubt.
    run = d.sure_run(age=64, doubt=RISK_DOUBT)
    assert d.survival(64, int(run))[-1] >= 1 - RISK_DOUBT > d.survival(64, int(run) + 2)[-1]


def test_departures_make_copies_priced_shorter_and_agreement_longer() -> None:
    d = Departures()
    d.learn(age=16, n_drafted=8, n_accepted=3)  # broke after 3 tokens
    broken = d.survival(16, 8)
    assert d.breaks == 2.0 and np.all(broken < Departures().survival(16, 8))
    d.learn(age=16, n_drafted=8, n_accepted=8)
    assert np.all(d.survival(16, 8) > broken)


def test_a_new_reply_carries_what_earlier_ones_taught_at_a_bounded_weight() -> None:
    d = Departures(breaks=10.0, exposure=50.0)
    carried = d.carried()
    assert carried.breaks == pytest.approx(DEPART_CARRIED)
    assert carried.exposure / carried.breaks == pytest.approx(d.exposure / d.breaks)  # the same rate


def test_earlier_work_whose_copies_kept_breaking_prices_copies_no_worse_than_the_rule_of_succession() -> None:
    # A folder after mixed work (issue 48: 2 breaks in 1.2 of exposure, alpha 1.7): a new reply
    # starts from alpha 1 at worst; within the reply, its own breaks count in full.
    used = Departures(breaks=2.0, exposure=1.2).carried()
    assert used.breaks / used.exposure == pytest.approx(DEPART_CARRIED_ALPHA)
    assert np.all(used.survival(16, 32) > Departures(2.0, 1.2).survival(16, 32))
    used.learn(age=16, n_drafted=8, n_accepted=2)
    assert used.breaks / used.exposure > DEPART_CARRIED_ALPHA
    assert Departures().carried() == Departures()  # the optimistic prior is carried as it is


def test_a_copy_that_matched_long_may_risk_a_long_first_draft_until_a_draft_breaks() -> None:
    c = CopySurvival(match_len=4 * MATCH_MIN)
    assert c.first_draft(DrafterKind.COPY, k_max=64) == int(MATCH_RUN * 4 * MATCH_MIN)
    assert c.first_draft(DrafterKind.PHRASE, k_max=64) == RAMP_FIRST  # not a copy
    c.learn(DrafterKind.PHRASE, n_drafted=3, n_accepted=1)  # any rejected draft of the reply
    assert c.broke and c.first_draft(DrafterKind.COPY, k_max=64) == RAMP_FIRST
    assert c.reply_breaks == 0  # ...but only a copy's departure is learned
    c.learn(DrafterKind.COPY, n_drafted=8, n_accepted=2)
    assert c.reply_breaks == 1 and c.departures.breaks == 2.0
    c.begin_reply()
    assert not c.broke and c.reply_breaks == 0 and c.departures.breaks <= DEPART_CARRIED


def test_only_a_copy_is_priced_by_survival_and_credited_sure_tokens() -> None:
    c = CopySurvival(match_len=200)
    assert c.survival(DrafterKind.MATCH_2, 8) is None and c.sure_run(DrafterKind.MATCH_2, 64) == 0
    survival = c.survival(DrafterKind.MEMORY_COPY, 8)
    assert survival is not None and len(survival) == 8
    assert 0 < c.sure_run(DrafterKind.COPY, 64) <= 64


def test_a_copy_broken_by_an_edit_resumes_where_its_source_went_on() -> None:
    trail = CopyTrail()
    assert trail.resume(DrafterKind.MATCH_2, 2, at=100, n_ctx=500, breaks=0) == (DrafterKind.MATCH_2, 2)
    trail.offered(DrafterKind.COPY, at=100, n_ctx=500, match_len=RESUME_AGE)
    trail.agreed(10)  # the copy agreed 10 tokens, then broke; the reply went on 6 tokens
    kind, age = trail.resume(DrafterKind.MATCH_2, 2, at=116, n_ctx=516, breaks=RESUME_BREAKS)
    assert kind is DrafterKind.COPY and age == RESUME_AGE + 10 + 6
    memory, _ = trail.resume(DrafterKind.MEMORY_PHRASE, 5, at=116, n_ctx=516, breaks=0)
    assert memory is DrafterKind.MEMORY_COPY
    # Elsewhere in the source, too late, after too many breaks, or too short a match: not resumed.
    assert trail.resume(DrafterKind.MATCH_2, 2, at=300, n_ctx=516, breaks=0)[0] is DrafterKind.MATCH_2
    late = 510 + RESUME_WITHIN + 1
    assert trail.resume(DrafterKind.MATCH_2, 2, at=116, n_ctx=late, breaks=0)[0] is DrafterKind.MATCH_2
    assert (
        trail.resume(DrafterKind.MATCH_2, 2, at=116, n_ctx=516, breaks=RESUME_BREAKS + 1)[0]
        is DrafterKind.MATCH_2
    )
    assert trail.resume(DrafterKind.MATCH_1, 1, at=116, n_ctx=516, breaks=0)[0] is DrafterKind.MATCH_1
    young = CopyTrail()
    young.offered(DrafterKind.COPY, at=100, n_ctx=500, match_len=RESUME_AGE - 1)
    assert young.resume(DrafterKind.MATCH_2, 2, at=100, n_ctx=500, breaks=0)[0] is DrafterKind.MATCH_2
    trail.clear()
    assert trail.resume(DrafterKind.MATCH_2, 2, at=116, n_ctx=516, breaks=0)[0] is DrafterKind.MATCH_2


def test_a_copy_that_agrees_again_after_a_break_earns_back_what_the_break_halved() -> None:
    c = CopySurvival(match_len=16)
    c.learn(DrafterKind.COPY, n_drafted=4, n_accepted=1)  # the copy broke: a reply's allowance halves
    assert c.risk_breaks == 1
    for right in (True, True, True, False, True, True, True):  # plain steps: the copy's offer checked
        c.observe(DrafterKind.COPY, right)
    assert c.risk_breaks == 1  # not RAMP_FIRST in a row yet
    c.observe(DrafterKind.COPY, True)
    assert c.risk_breaks == 0 and c.reply_breaks == 1  # forgiven for the limit, still a break
    c.observe(DrafterKind.PHRASE, True)  # only a copy's offers count
    c.learn(DrafterKind.COPY, n_drafted=8, n_accepted=2)
    assert c.risk_breaks == 1
    c.begin_reply()
    assert c.risk_breaks == 0 and c.forgiven == 0
