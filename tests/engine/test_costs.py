"""engine/costs.py on its own: what a verify batch of n rows costs, as the draft-length controller
prices it (before, tested only through the controller). Pure numbers: no model, no process."""

from __future__ import annotations

import numpy as np
import pytest

from engine.costs import (
    COST_SAMPLES,
    EXPLORE_FACTOR,
    EXPLORE_FACTOR_SLOPE,
    GROWTH_EXPONENT,
    PRIOR_SLOPE,
    SLOPE_FLOOR,
    TEXT_JUMP,
    TRUSTED_SAMPLES,
    VerifyCosts,
)


def costs_of(timings: dict[int, float]) -> VerifyCosts:
    c = VerifyCosts()
    for n, s in timings.items():
        c.add(n, s)
    return c


def test_a_size_is_priced_at_its_lowest_recent_timing_and_guarded_at_its_median() -> None:
    c = VerifyCosts()
    for s in (0.030, 0.010, 0.050):
        c.add(4, s)
    assert c.low[4] == 0.010  # a busy machine only slows a step down: the lowest is the price
    assert c.median[4] == 0.030  # what a step usually costs (the throughput guard's cap)
    assert c.cost(4) == 0.010
    for _ in range(COST_SAMPLES):  # the fast timing falls out of the last few
        c.add(4, 0.040)
    assert c.low[4] == 0.040 and len(c.samples[4]) == COST_SAMPLES


def test_a_plain_step_and_a_usual_cost_are_unknown_until_timed_often_enough() -> None:
    c = VerifyCosts()
    assert c.plain_s is None and c.usual(1) is None
    c.add(1, 0.02)
    assert c.plain_s == 0.02
    assert c.usual(1) is None  # one timing is no usual cost yet
    for _ in range(TRUSTED_SAMPLES - 1):
        c.add(1, 0.02)
    assert c.usual(1) == 0.02
    assert c.untimed([1, 2, 8]) == [2, 8]


def test_nothing_measured_prices_each_row_at_the_prior_slope() -> None:
    c = VerifyCosts()
    assert c.cost(1) == 1.0
    assert c.cost(11) == pytest.approx(1.0 + PRIOR_SLOPE * 10)
    assert list(c.costs(3)[1:]) == pytest.approx([1.0, 1.0 + PRIOR_SLOPE, 1.0 + 2 * PRIOR_SLOPE])
    assert c.explore_limit() == 1  # no draft longer than one row before anything is timed


def test_between_measured_sizes_the_cost_is_linear_and_below_the_smallest_it_is_cheaper() -> None:
    c = costs_of({2: 0.020, 6: 0.060})
    assert c.cost(4) == pytest.approx(0.040)  # halfway
    assert c.cost(3) == pytest.approx(0.030)
    assert c.cost(1) == pytest.approx(0.020 / (1 + PRIOR_SLOPE))  # below the smallest: the prior's shape
    c.add(4, 0.050)  # a size between them: its neighbours price the sizes around it from now on
    assert c.cost(3) == pytest.approx(0.035) and c.cost(5) == pytest.approx(0.055)


def test_past_the_largest_size_each_row_costs_the_measured_slope_at_least_the_floor() -> None:
    # No pair of sizes SLOPE_MIN_ROWS or more apart by half: PRIOR_SLOPE of the largest batch a row.
    c = costs_of({1: 0.010, 2: 0.012})
    assert c.row_cost_beyond() == pytest.approx(PRIOR_SLOPE * 0.012)
    assert c.cost(5) == pytest.approx(0.012 + 3 * PRIOR_SLOPE * 0.012)
    # 4 and 8 rows measured: one more row costs their slope.
    c = costs_of({4: 0.040, 8: 0.080})
    assert c.row_cost_beyond() == pytest.approx(0.010)
    assert c.cost(10) == pytest.approx(0.100)
    # A slope from noisy timings that comes out too low is raised to the floor.
    c = costs_of({4: 0.079, 8: 0.080})
    assert c.row_cost_beyond() == pytest.approx(SLOPE_FLOOR * 0.080 / 8)


def test_the_whole_curve_is_each_size_priced_alone_and_follows_a_new_timing() -> None:
    c = costs_of({1: 0.010, 4: 0.016, 8: 0.030, 16: 0.055})
    curve = c.costs(40)
    assert len(curve) == 41
    assert list(curve[1:]) == pytest.approx([c.cost(n) for n in range(1, 41)])
    with pytest.raises(ValueError):
        curve[3] = 0.0  # read-only: the controller reads it several times a step
    assert c.costs(20) is not None and np.shares_memory(c.costs(20), c.costs(40))  # sliced, not made again
    c.add(8, 0.020)  # a faster timing of 8 rows changes the price, and the curve with it
    assert c.costs(40)[8] == pytest.approx(0.020)
    c.add(8, 0.090)  # a slower one leaves the lowest as it was
    assert c.costs(40)[8] == pytest.approx(0.020)


def test_drafts_explore_two_or_four_times_past_the_largest_size_timed() -> None:
    assert costs_of({1: 0.01, 3: 0.02}).explore_limit() == EXPLORE_FACTOR * 3
    # 4 rows is at most half of 8 and SLOPE_MIN_ROWS or more: what one more row costs is known.
    assert costs_of({1: 0.01, 4: 0.02, 8: 0.03}).explore_limit() == EXPLORE_FACTOR_SLOPE * 8


def test_the_prices_kept_in_the_cost_cache_seed_the_next_process_alike() -> None:
    c = costs_of({1: 0.010, 4: 0.016, 16: 0.055})
    kept = c.export()
    assert kept == {"1": 0.010, "4": 0.016, "16": 0.055}
    again = VerifyCosts()
    again.seed(kept)
    assert again.low == c.low and [again.cost(n) for n in range(1, 30)] == [c.cost(n) for n in range(1, 30)]


def grown(low: float, n: int, then: float, plain: float) -> float:
    """A size's price after the plain step's moved from `then` to `plain` (engine.costs.prices)."""
    return max(low * plain / then, low + n**GROWTH_EXPONENT * (plain - then))


def priced_after(
    plain_then: float, timed: dict[int, float], plain_now: float, text_then: int, text_now: int
) -> VerifyCosts:
    """Plain steps of plain_then after text_then tokens, batches timed beside them while idle, then
    a reply after text_now tokens whose plain steps cost plain_now."""
    c = VerifyCosts()
    c.note_text(text_then)
    for _ in range(COST_SAMPLES):
        c.add(1, plain_then)
    c.add_timed(timed)
    c.note_text(text_now)
    for _ in range(COST_SAMPLES):
        c.add(1, plain_now)
    return c


def test_a_size_grows_with_the_text_by_its_rows_where_that_is_dearer_than_its_ratio() -> None:
    # SmolLM2 on this Xeon: 1 row 13.1 ms and 2 rows 17.3 after 256 tokens, 33.4 and 54.9 after
    # 4,096. Priced as timed, 2 rows after a long document looked cheaper than a plain step; priced
    # in proportion (the ratio to the plain step timed beside it), 44.1 ms.
    c = VerifyCosts()
    c.note_text(256)
    for _ in range(COST_SAMPLES):
        c.add(1, 0.0131)
    c.add_timed({2: 0.0173, 4: 0.0262})  # calibrated while idle, beside the plain step's price then
    assert c.cost(2) == 0.0173 and c.low[2] == 0.0173
    c.note_text(4096)
    for _ in range(COST_SAMPLES):  # the text grows: plain steps cost more, and every size with them
        c.add(1, 0.0334)
    assert c.low[2] == 0.0173  # (as timed)
    assert c.cost(2) == pytest.approx(0.0173 + 2**0.75 * (0.0334 - 0.0131))  # 51.4 ms, near the 54.9 it costs
    assert c.cost(2) > 0.0173 * 0.0334 / 0.0131 and c.cost(2) > c.cost(1)
    assert c.cost(3) == pytest.approx(
        (grown(0.0173, 2, 0.0131, 0.0334) + grown(0.0262, 4, 0.0131, 0.0334)) / 2
    )
    assert list(c.costs(4)[1:]) == pytest.approx([c.cost(n) for n in range(1, 5)])
    c.add(2, 0.0549)  # a step of the reply, beside the plain step of its moment: its own price
    assert c.cost(2) == pytest.approx(grown(0.0173, 2, 0.0131, 0.0334))  # (the lowest still prices it)
    again = VerifyCosts()  # the prices kept seed the next process alike
    again.seed(c.export())
    assert [again.cost(n) for n in range(1, 9)] == pytest.approx([c.cost(n) for n in range(1, 9)])
    # A plain price that moved with no jump in the text (Gemma 3 270M's barely grows with it; a
    # busy moment, a step's own work) moves every size in proportion, not multiplied by its rows.
    same = priced_after(0.0131, {2: 0.0173}, 0.0334, text_then=256, text_now=256)
    assert same.cost(2) == pytest.approx(0.0173 * 0.0334 / 0.0131)


def test_a_size_dearer_than_its_rows_grows_in_proportion_and_falls_in_proportion() -> None:
    # SmolLM2, 64 rows: 675 ms after 4,096 tokens, 278 after 256 (a plain step 36.5 and 13.9). As
    # the text shrinks, 64 ** 0.75 plain steps' fall (22.6 times 22.6 ms) would price it at 164 ms;
    # in proportion, 257: falling, every size falls in proportion (the dearer). A size whose ratio
    # exceeds its rows' share grows in proportion too.
    c = priced_after(0.0365, {64: 0.675, 2: 0.0576}, 0.0139, text_then=4096, text_now=256)
    assert c.cost(64) == pytest.approx(0.675 * 0.0139 / 0.0365)  # 257 ms (278 measured)
    assert c.cost(2) == pytest.approx(0.0576 * 0.0139 / 0.0365)  # 21.9 ms, not 19.6 (17.8 measured)
    # A second row dearer than 2 ** 0.75 plain steps (Gemma on an EPYC: 2.3x).
    slow = priced_after(0.010, {2: 0.023}, 0.020, text_then=256, text_now=4096)
    assert slow.cost(2) == pytest.approx(0.046)


def test_a_plain_price_timed_after_a_text_far_shorter_gives_way_to_this_texts_first_plain_step() -> None:
    # SmolLM2 in one process (`tandem bench`, this Xeon): plain steps of 11.1 ms after a short
    # prompt, then a question about a 2,273-token license whose plain steps cost 22-25 ms. While the
    # last five plain steps held the short text's, a 2-row check was priced 16.7 ms (it cost 37.7)
    # and an 11-row draft 42.9 (135.4), rejected: the 11-token answer ended 0.84x plain.
    c = VerifyCosts()
    c.note_text(40)
    for _ in range(COST_SAMPLES):
        c.add(1, 0.0111)
    c.add_timed({2: 0.0167, 11: 0.0429})
    c.note_text(40 + TEXT_JUMP)  # (within the jump: the price holds)
    assert not c.plain_stale
    c.note_text(2273)
    assert c.plain_stale and c.cost(1) == 0.0111
    c.add(1, 0.0252)  # this text's first plain step prices plain steps alone
    assert not c.plain_stale and c.cost(1) == 0.0252 and list(c.samples[1]) == [0.0252]
    assert c.cost(2) == pytest.approx(grown(0.0167, 2, 0.0111, 0.0252))  # 40.4 ms
    assert c.cost(11) == pytest.approx(grown(0.0429, 11, 0.0111, 0.0252))  # 128 ms
    c.note_text(2300)  # the next question on the same license
    assert not c.plain_stale
    again = VerifyCosts()  # a new process knows after what text the cache's plain price was timed
    again.seed(c.export(), c.plain_text)
    again.note_text(60)
    assert again.plain_stale
    unknown = VerifyCosts()  # (a cache that does not say: never stale)
    unknown.seed(c.export())
    unknown.note_text(60)
    assert not unknown.plain_stale


def test_a_first_uses_timings_are_priced_beside_the_replys_first_plain_step() -> None:
    # A first reply times a few sizes and a plain batch before its first step; timed batches lack
    # a step's own work around them, so the plain batch prices plain steps only until a step is
    # timed, and the sizes keep their timings beside that first step.
    c = VerifyCosts()
    c.add_timed({1: 0.010, 4: 0.025, 16: 0.060})
    assert c.cost(1) == 0.010 and c.cost(4) == 0.025 and c.plain_s == 0.010
    c.add(1, 0.0103)  # the reply's first plain step: 0.3 ms of Python around the batch
    assert c.cost(1) == 0.0103 and c.low[1] == 0.0103 and len(c.samples[1]) == 1
    assert c.cost(4) == 0.025 and c.cost(16) == 0.060  # priced as timed beside it
    for _ in range(COST_SAMPLES):
        c.add(1, 0.0206)
    assert c.cost(4) == pytest.approx(0.050)  # (no reply's text is known: in proportion)
    c.add_timed({1: 0.005, 8: 0.040})  # calibrated later: beside the plain step's price now
    assert c.cost(1) == 0.0206 and c.cost(8) == 0.040
