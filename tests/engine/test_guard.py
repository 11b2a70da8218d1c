"""The throughput guard (engine/guard.py) on its own: the CUSUM of losses against the live plain
step, the budget that suspends a drafter, the doubling back-off and its reset, the outlier cap,
and the plain reference it asks for. Timings are given, not measured: the rule is arithmetic."""

from __future__ import annotations

import pytest

from engine.costs import VerifyCosts
from engine.guard import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    LOSS_BUDGET_TOKENS,
    OUTLIER,
    PLAIN_REFRESH_STEPS,
    RESUME_BUDGET_TOKENS,
    ThroughputGuard,
)

PLAIN_S = 0.010  # a plain step: 10 ms


def timed(plain_s: float = PLAIN_S, live: bool = True, **sizes: float) -> VerifyCosts:
    """Costs with a plain step timed (in this process where live) and sizes like r4=0.012."""
    costs = VerifyCosts()
    for _ in range(3):
        costs.add(1, plain_s)
        for name, seconds in sizes.items():
            costs.add(int(name[1:]), seconds)
    if live:
        costs.live.add(1)
    return costs


def test_nothing_to_judge_by_before_a_plain_step_is_timed() -> None:
    guard = ThroughputGuard()
    assert guard.judge(VerifyCosts(), n_emitted=1, step_s=10.0) == 0.0
    assert guard.loss_s == 0.0 and not guard.suspended


def test_a_step_is_judged_against_its_tokens_at_the_plain_speed() -> None:
    guard = ThroughputGuard()
    costs = timed()
    assert guard.judge(costs, n_emitted=3, step_s=0.015) == pytest.approx(0.015)  # saved 15 ms
    assert guard.loss_s == 0.0  # gains do not bank credit...
    assert guard.judge(costs, n_emitted=1, step_s=0.014) == pytest.approx(-0.004)
    assert guard.loss_s == pytest.approx(0.004)  # ...so the next loss counts in full


def test_losses_past_the_budget_suspend_the_drafter_then_it_is_probed_after_the_back_off() -> None:
    guard = ThroughputGuard()
    costs = timed()
    loss_per_step = 0.75 * PLAIN_S  # each step 1.75 plain steps' time for one token
    steps = 0
    while not guard.suspended:
        guard.judge(costs, n_emitted=1, step_s=PLAIN_S + loss_per_step)
        steps += 1
    assert steps == int(LOSS_BUDGET_TOKENS / 0.75) + 1  # the first step past 16 plain tokens' worth
    assert guard.n_suspensions == 1 and guard.suspended_steps == BACKOFF_FIRST
    assert guard.backoff == 2 * BACKOFF_FIRST
    waited = 0
    while guard.wait(PLAIN_S):
        waited += 1
    assert waited == BACKOFF_FIRST and not guard.suspended
    # The probe may lose only RESUME_BUDGET_TOKENS more before it is suspended again.
    assert guard.loss_s == pytest.approx((LOSS_BUDGET_TOKENS - RESUME_BUDGET_TOKENS) * PLAIN_S)
    probes = 0
    while not guard.suspended:
        guard.judge(costs, n_emitted=1, step_s=PLAIN_S + loss_per_step)
        probes += 1
    assert probes == int(RESUME_BUDGET_TOKENS / 0.75) + 1
    assert guard.suspended_steps == 2 * BACKOFF_FIRST and guard.n_suspensions == 2


def test_the_back_off_doubles_to_its_cap_and_resets_once_drafting_pays_again() -> None:
    guard = ThroughputGuard()
    costs = timed()
    for _ in range(12):
        while not guard.suspended:
            guard.judge(costs, n_emitted=0, step_s=PLAIN_S)  # nothing emitted: a whole step lost
        while guard.wait(PLAIN_S):
            pass
    assert guard.backoff == BACKOFF_MAX
    # A patch where drafting pays more than the budget: a later bad patch is probed again soon.
    for _ in range(int(LOSS_BUDGET_TOKENS) + 1):
        guard.judge(costs, n_emitted=3, step_s=2 * PLAIN_S)
    assert guard.backoff == BACKOFF_FIRST


def test_without_a_plain_step_of_this_process_it_asks_for_one_before_suspending() -> None:
    # Plain steps timed in another process (the cost cache) may be another machine state's.
    guard = ThroughputGuard()
    costs = timed(live=False)
    while not guard.reference_due:
        guard.judge(costs, n_emitted=0, step_s=PLAIN_S)
    assert not guard.suspended and guard.reference_stale(costs)
    guard.note_plain_step()
    assert not guard.reference_due and not guard.reference_stale(costs)


def test_the_plain_reference_is_refreshed_every_so_many_speculative_steps() -> None:
    guard = ThroughputGuard()
    costs = timed()
    assert not guard.reference_stale(costs)
    for _ in range(PLAIN_REFRESH_STEPS):
        guard.note_speculative_step()
    assert guard.reference_stale(costs)
    assert ThroughputGuard().reference_stale(VerifyCosts())  # never timed: due at once


def test_a_step_the_machine_slowed_counts_at_most_outlier_times_its_usual_cost() -> None:
    costs = timed(r4=0.012)
    # A 4-row step that took a second (another program had the cores) counts as 3 x 12 ms + drafting.
    assert ThroughputGuard.usual(costs, 4, 1.0, 0.001) == pytest.approx(OUTLIER * 0.012 + 0.001)
    assert ThroughputGuard.usual(costs, 4, 0.013, 0.001) == 0.013  # an ordinary step as it was
    # A size not trusted yet is capped at that many plain steps.
    assert ThroughputGuard.usual(costs, 8, 1.0, 0.0) == pytest.approx(OUTLIER * 8 * PLAIN_S)
    assert ThroughputGuard.usual(VerifyCosts(), 8, 1.0, 0.0) == 1.0  # nothing to cap by
