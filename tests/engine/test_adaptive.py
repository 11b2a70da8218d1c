"""The draft-length controller: long drafts when they pay, plain decoding when they don't, and a
throughput guard that drops a drafter within a bounded loss, whatever its estimates said."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from engine.adaptive import FIRST_REPLY_MIN_TOKENS, LOSS_BUDGET_TOKENS, Choice, DraftLengthController, Offer
from engine.costs import TRUSTED_SAMPLES
from engine.kinds import DrafterKind

# Step costs measured on a 2-core CPU with Gemma 3 270M Q4_K_M (rows verified -> seconds).
CPU_VERIFY = {1: 0.012, 2: 0.031, 4: 0.041, 8: 0.057, 16: 0.091, 32: 0.147}


# Verify batches on 2 Xeon cores, AVX2 build, Gemma 3 270M Q4_K_M, each size timed alone (the
# fastest of 3): odd sizes cost more than the next even one.
AVX2_ALONE = {
    **{1: 0.0212, 2: 0.0250, 3: 0.0398, 4: 0.0340, 5: 0.0504, 6: 0.0455, 7: 0.0609, 8: 0.0545},
    **{16: 0.0879, 32: 0.1565, 64: 0.3022},
}


def cpu_verify(rows: int) -> float:
    """A verify batch's cost on that CPU, between the sizes timed: linear."""
    sizes = sorted(CPU_VERIFY)
    return float(np.interp(rows, sizes, [CPU_VERIFY[n] for n in sizes]))


def seeded(**kw: object) -> DraftLengthController:
    c = DraftLengthController(**kw)  # type: ignore[arg-type]
    c.seed({"step_s": {str(n): s for n, s in CPU_VERIFY.items()}})
    return c


def fresh(c: DraftLengthController) -> DraftLengthController:
    """A controller with c's measured costs and nothing else (a new process seeded without acceptance)."""
    new = DraftLengthController(c.k_max, c.adaptive, c.draft_costs_time)
    new.seed({key: value for key, value in c.export().items() if key != "acceptance"})
    return new


def target_read_s(c: DraftLengthController, n_tokens: int) -> float:
    """What reading n_tokens costs the target, as the engine prices it (at a plain step's cost
    until a prefill is timed)."""
    return c.draft.target_read_s(n_tokens, c.costs.cost(1))


def pick(c: DraftLengthController, *offers: tuple[int, int]) -> tuple[int, int]:
    """choose_among over (tokens available, kind) offers: (k, kind)."""
    choice = c.choose_among([Offer(DrafterKind(kind), n) for n, kind in offers])
    return choice.k, choice.kind


def test_the_first_step_is_plain_where_no_plain_step_is_known() -> None:
    c = DraftLengthController(k_max=32)
    assert c.choose(available=32, kind=5) == 0  # the guard's reference, timed
    c.record(5, 0, 0, CPU_VERIFY[1])
    assert c.choose(available=32, kind=5) > 0


def test_a_cached_plain_step_is_timed_afresh_before_the_guard_suspends() -> None:
    # A cost cache's plain step: speculation starts at once (a reply's first step at plain speed
    # costs copying 2%), but no drafter is suspended on a reference timed in another process.
    c = seeded(k_max=32)
    c.seed({"step_s": {}, "acceptance": {"5": [200.0, 200.0]}})
    choices = []
    for _ in range(50):
        k = c.choose(available=32, kind=5)
        choices.append(k)
        if k == 0:
            break
        c.record(5, k, 0, cpu_verify(k + 1), learn=False)  # drafts that lose
    assert choices[0] > 0 and choices[-1] == 0 and len(choices) > 3
    assert not c.guard.suspended  # a plain step first, timed now...
    c.record(5, 0, 0, CPU_VERIFY[1])
    k = c.choose(available=32, kind=5)
    c.record(5, k, 0, cpu_verify(k + 1), learn=False)
    assert c.guard.suspended  # ...then the loss, judged against it, suspends the drafter


def test_long_drafts_when_everything_is_accepted() -> None:
    c = seeded(k_max=32)
    c.record(5, 0, 0, CPU_VERIFY[1])
    for _ in range(10):
        k = c.choose(available=32, kind=5)
        c.record(5, k, k, cpu_verify(k + 1))
    assert c.acceptance(5) > 0.95
    assert c.choose(available=32, kind=5) >= 16


def test_falls_back_to_plain_when_drafts_are_rejected() -> None:
    c = seeded(k_max=32)
    c.record(1, 0, 0, CPU_VERIFY[1])
    for _ in range(10):
        k = c.choose(available=8, kind=1)
        c.record(1, k, 0, CPU_VERIFY[8] if k > 4 else CPU_VERIFY[4] if k else CPU_VERIFY[1])
    choices = [c.choose(available=8, kind=1) for _ in range(100)]
    assert choices.count(0) >= 90  # plain decoding...
    assert any(choices)  # ...with a probe now and then, so the estimates can recover


def test_a_draft_model_is_judged_on_measurements_not_priors() -> None:
    c = seeded(k_max=16, draft_costs_time=True)
    c.record(0, 0, 0, CPU_VERIFY[1])
    assert not c.never_pays  # nothing measured about the draft model yet: it gets a probe
    k = next((k for k in (c.choose(available=16) for _ in range(10)) if k), 0)
    assert k > 0
    # The probe shows a drafted token costs nearly a whole plain step: no length can pay.
    draft_s = 0.0114 * k
    c.record(0, k, k, draft_s + c.costs.cost(k + 1), draft_s)
    assert c.never_pays
    assert [c.choose(available=16) for _ in range(200)] == [0] * 200


def test_a_draft_model_known_too_slow_is_never_tried() -> None:
    c = seeded(k_max=16, draft_costs_time=True)
    c.seed({"draft_ratio": 0.95})  # measured by an earlier process on this machine
    assert c.never_pays
    c.record(0, 0, 0, CPU_VERIFY[1])
    assert [c.choose(available=16) for _ in range(200)] == [0] * 200


def test_a_fast_draft_model_is_used() -> None:
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.seed({"step_s": {"1": 0.030, "2": 0.031, "4": 0.032, "8": 0.034, "16": 0.040}, "draft_ratio": 0.07})
    c.record(0, 0, 0, 0.030)
    assert not c.never_pays
    assert c.choose(available=16) >= 3


def test_fixed_length_when_not_adaptive() -> None:
    c = DraftLengthController(k_max=5, adaptive=False)
    assert c.choose(available=9) == 5
    assert c.choose(available=3) == 3
    assert c.choose(available=0) == 0


def test_verify_cost_interpolates_between_measured_sizes() -> None:
    c = DraftLengthController(k_max=32)
    c.seed({"step_s": {"1": 1.0, "5": 3.0}})
    assert c.costs.cost(3) == 2.0
    assert c.costs.cost(6) > 3.0  # beyond the largest measured: a mild slope


def test_unmeasured_lengths_are_explored_step_by_step() -> None:
    # Nothing cached: a guess at 64 rows could cost 20 plain steps, so lengths grow step by step,
    # doubling the largest batch measured until what one more row costs is known (two sizes of
    # 4 rows or more), then by four.
    c = DraftLengthController(k_max=64)
    lengths, largest = [], []
    for _ in range(12):
        largest.append(max(c.costs.median, default=1))
        k = c.choose(available=64, kind=5)
        lengths.append(k)
        c.record(5, k, k, 0.02 * (1 + 0.1 * k))
    assert lengths[0] == 0
    assert lengths[:5] == [0, 2, 4, 10, 44]
    assert all(k <= 2 * top for k, top in zip(lengths[:4], largest[:4]))
    assert all(k <= 4 * top for k, top in zip(lengths, largest))
    assert max(lengths) == 64


def test_a_short_match_drafts_only_at_timed_sizes_and_on_this_replys_evidence() -> None:
    # A first use: only a plain step is timed, so every larger batch is a guess at the prior slope
    # (+5% a row, where this CPU charges +160% for a second row). A short match in open text is
    # not drafted on that guess, however its kind's prior prices it; a copy is.
    c = DraftLengthController(k_max=32)
    c.record(3, 0, 0, CPU_VERIFY[1])
    assert [c.choose(available=8, kind=kind) for kind in (1, 2, 3, 4, 6)] == [0] * 5
    assert c.choose(available=32, kind=5) > 0
    # Once this machine has timed batches, a short match is priced on them (and on CPU_VERIFY, at
    # its kinds' priors, still not drafted: a second row costs more than a 1-token match saves).
    d = seeded(k_max=32)
    d.record(3, 0, 0, CPU_VERIFY[1])
    assert d.choose(available=8, kind=1) == 0
    # What other text taught (a phrase always right in earlier replies) does not price a reply's
    # first phrase above its prior; once this reply has drafted one, the evidence counts.
    d.seed({"acceptance": {"4": [50.0, 50.0]}})
    assert d.choose(available=8, kind=4) == 0
    d.record(4, 3, 3, cpu_verify(4))
    assert d.choose(available=8, kind=4) > 0
    d.begin_reply()
    assert d.choose(available=8, kind=4) == 0


def test_a_short_match_waits_for_a_plain_step_of_a_text_far_from_the_plain_price() -> None:
    # A question about a long document after a short chat: the plain price is the short text's
    # until a plain step of this text is timed (engine.costs.TEXT_JUMP); a short match priced on it
    # waits for that step, a copy does not. The cost cache says after what text it was timed.
    d = seeded(k_max=32)
    d.costs.note_text(100)
    d.record(3, 0, 0, CPU_VERIFY[1])
    d.seed({"acceptance": {"4": [50.0, 50.0]}})
    d.record(4, 3, 3, cpu_verify(4))
    assert d.choose(available=8, kind=4) > 0
    d.costs.note_text(2100)
    assert d.choose(available=8, kind=4) == 0 and d.choose(available=32, kind=5) > 0
    d.record(3, 0, 0, CPU_VERIFY[1])  # (this text's plain step, as dear as before here)
    assert d.choose(available=8, kind=4) > 0
    assert d.export()["plain_text_tokens"] == 2100
    again = fresh(d)
    again.costs.note_text(100)
    assert again.costs.plain_stale


def test_a_reply_that_repeats_itself_drafts_its_short_matches_on_a_first_use() -> None:
    # Nothing timed but a plain step; the reply's phrase offers are right at their first token
    # step after step (an open reply that loops): they are drafted, explored as a copy's are.
    c = DraftLengthController(k_max=32)
    c.record(4, 0, 0, CPU_VERIFY[1])
    lengths = []
    for _ in range(4):
        lengths.append(c.choose(available=8, kind=4))
        c.observe(4, True)
    assert lengths == [0] * 4
    assert c.choose(available=8, kind=4) > 0
    c.observe(4, False)  # a wrong one ends the streak: its batch is a guess again
    c.begin_reply()
    assert c.choose(available=8, kind=4) == 0


def simulate(
    c: DraftLengthController,
    true_step_s: dict[int, float] | None,
    accept: float,
    n_steps: int,
    rng: np.random.Generator,
    draft_token_s: float = 0.0,
) -> tuple[float, int, float]:
    """Run the controller against a world with these real costs; (seconds, tokens, plain seconds)."""

    def cost(rows: int) -> float:
        assert true_step_s is not None
        return true_step_s.get(rows, true_step_s[1] * (1 + 0.6 * (rows - 1)))

    spent, tokens = 0.0, 0
    for _ in range(n_steps):
        k = c.choose(available=16, kind=2)
        n_acc = 0
        while n_acc < k and rng.random() < accept:
            n_acc += 1
        draft_s = k * draft_token_s
        step = cost(k + 1) + draft_s
        c.record(2, k, n_acc, step, draft_s)
        spent += step
        tokens += n_acc + 1
    return spent, tokens, tokens * cost(1)


def test_the_guard_drops_a_drafter_whose_cache_lies_within_the_loss_budget() -> None:
    # The cache says verify batches are nearly free (measured on another day, say); on this
    # machine now they cost 0.6 plain steps a row and drafts are rarely right.
    c = DraftLengthController(k_max=16)
    c.seed(
        {"step_s": {"1": 0.02, "2": 0.021, "4": 0.022, "8": 0.023, "16": 0.024}, "acceptance": {"2": [9, 10]}}
    )
    rng = np.random.default_rng(0)
    true = {1: 0.02}
    spent, tokens, plain = 0.0, 0, 0.0
    # Until the first suspension, the loss against plain decoding stays within the budget.
    while c.guard.n_suspensions == 0:
        s, t, p = simulate(c, true, 0.2, 1, rng)
        spent, tokens, plain = spent + s, tokens + t, plain + p
        assert tokens < 2000
    worst_step = 0.02 * (1 + 0.6 * 16)
    assert spent - plain <= LOSS_BUDGET_TOKENS * 0.02 + worst_step


def test_speculation_that_never_pays_costs_almost_nothing_over_a_long_reply() -> None:
    for draft_token_s in (0.0, 0.015):  # n-gram lookup, then a slow draft model
        c = DraftLengthController(k_max=16, draft_costs_time=draft_token_s > 0)
        spent, tokens, plain = simulate(c, {1: 0.02}, 0.3, 3000, np.random.default_rng(1), draft_token_s)
        assert spent / plain < 1.03, (draft_token_s, spent / plain)


def test_one_stalled_step_does_not_suspend_a_drafter_that_pays() -> None:
    # Copying on a busy machine: drafts accepted whole, and one 2-row step stalls for 1.7 s
    # (another program had the cores). Plain decoding would have stalled as long: the drafter
    # stays on. The same stall every step is not a stall but the cost, and suspends it.
    c = seeded(k_max=32)
    c.record(5, 0, 0, CPU_VERIFY[1])
    k = c.choose(available=32, kind=5)
    c.record(5, k, k, c.costs.cost(k + 1))
    c.record(5, 1, 1, 1.7)
    for _ in range(20):
        k = c.choose(available=32, kind=5)
        assert k > 0
        c.record(5, k, k, c.costs.cost(k + 1))
    assert c.guard.n_suspensions == 0
    slow = seeded(k_max=32)
    slow.record(5, 0, 0, CPU_VERIFY[1])
    for _ in range(5):
        slow.record(5, 1, 1, 1.7)
    assert slow.guard.n_suspensions >= 1


def test_after_a_suspension_a_failing_probe_costs_a_few_tokens_not_a_whole_budget() -> None:
    # Steps that lose half a plain token each: the first suspension takes the whole loss budget
    # (16 plain tokens' worth); after it, the probe may lose only 2 more before the next one.
    c = seeded(k_max=16)
    c.record(5, 0, 0, CPU_VERIFY[1])
    losing = CPU_VERIFY[1] * 1.5  # one draft, rejected: 1 token for 1.5 plain steps

    def steps_to_suspension() -> int:
        before, n = c.guard.n_suspensions, 0
        while c.guard.n_suspensions == before:
            c.record(5, 1, 0, losing)
            n += 1
            assert n < 100
        return n

    assert steps_to_suspension() >= 32
    while c.guard.suspended:
        assert c.choose(available=16, kind=5) == 0
    assert steps_to_suspension() <= 5


def test_a_draft_model_that_never_drafts_is_still_found_too_slow() -> None:
    # Asked every step, unsure of its first token every time: its decode is its cost, measured.
    # At a target step's cost, no draft length could pay even if all were accepted: not run.
    c = seeded(k_max=16, draft_costs_time=True)
    c.record(0, 0, 0, CPU_VERIFY[1])
    assert not c.never_pays  # nothing measured of the draft yet: priors never decide this
    c.record(0, 0, 0, CPU_VERIFY[1] * 2, draft_s=CPU_VERIFY[1])
    assert c.never_pays
    assert c.choose(available=16) == 0


def test_a_draft_model_seldom_sure_of_its_first_token_is_seldom_asked() -> None:
    # A draft at 0.3 of a target step would pay if it drafted, but it is unsure every time (it
    # drafts nothing): each ask is a decode for no token, counted as a refusal, so asks become
    # rare probes instead of a 30% loss on every token.
    # Verify rows nearly free beside a round trip (a target on an RPC server): drafts would pay.
    cheap = {"1": 0.012, "2": 0.013, "4": 0.014, "8": 0.016, "16": 0.02}
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.seed({"step_s": cheap, "draft_ratio": 0.3})
    c.record(0, 0, 0, CPU_VERIFY[1])
    asks = 0
    for _ in range(60):
        if c.choose(available=16) > 0:
            asks += 1
            c.record(0, 0, 0, CPU_VERIFY[1] * 1.3, draft_s=CPU_VERIFY[1] * 0.3)
        else:
            c.record(0, 0, 0, CPU_VERIFY[1])
    assert not c.never_pays
    assert asks <= 12


# Verify batches of a costly target (Gemma 3 270M F16 with 72 zero-output layers), measured on
# 2 AVX-512 cores: 5 rows cost 2.3x one. Its Q4_K_M draft: 0.02 s a token, 0.4 of a target step.
COSTLY_VERIFY = {1: 0.0506, 2: 0.0957, 3: 0.1007, 4: 0.1192, 5: 0.1178, 6: 0.1249, 8: 0.176, 9: 0.2}


def test_a_draft_model_unsure_once_is_still_run_where_it_pays() -> None:
    # Seen with that pair: the draft offered nothing for a reply's first token, then had every
    # draft accepted; counted as a rejected draft, that one refusal kept its acceptance estimate
    # too low to draft ever again in the reply (plain speed; drafting 4 a step gave 1.34x).
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    d = 0.020

    def cost(rows: int) -> float:
        return COSTLY_VERIFY.get(rows, 0.2 * rows / 9)

    c.record(0, 0, 0, cost(1))  # the plain reference step
    c.record(0, 0, 0, cost(1) + d, draft_s=d)  # asked, unsure: nothing drafted
    c.record(0, 1, 1, cost(2) + d, draft_s=d)
    spent, tokens = 0.0, 0
    for _ in range(100):
        k = c.choose(available=16)
        step = cost(k + 1) + k * d
        c.record(0, k, k, step, draft_s=k * d)
        spent += step
        tokens += k + 1
    assert tokens / spent > 1.15 / cost(1)


def test_speculation_that_pays_is_kept() -> None:
    c = DraftLengthController(k_max=16)
    cheap = {n: 0.02 * (1 + 0.08 * (n - 1)) for n in range(1, 18)}
    spent, tokens, plain = simulate(c, cheap, 0.8, 2000, np.random.default_rng(2))
    assert plain / spent > 2.0
    assert c.guard.n_suspensions == 0


def test_export_and_seed_round_trip() -> None:
    c = seeded(k_max=16, draft_costs_time=True)
    c.record(0, 0, 0, 0.012)
    c.record(0, 2, 1, 0.05, 0.02)
    d = DraftLengthController(k_max=16, draft_costs_time=True)
    d.seed(c.export())
    assert d.costs.cost(3) == c.costs.cost(3)
    assert d.draft.draft_ratio == c.draft.draft_ratio
    assert d.acceptance(0) == c.acceptance(0)


def test_vectorised_estimates_match_the_scalar_ones() -> None:
    for step_s in ({}, {"1": 1.0}, {"1": 1.0, "5": 3.0, "9": 4.0}, {"4": 2.0, "16": 3.0}):
        c = DraftLengthController(k_max=64, draft_costs_time=True)
        c.seed({"step_s": step_s, "draft_ratio": 0.3})
        costs = c.costs.costs(40)
        assert np.allclose(costs[1:], [c.costs.cost(n) for n in range(1, 41)])
        for kind in (3, 0):
            rates = c.expected_rates(30, kind=kind)
            assert np.allclose(rates, [c.expected_rate(k, kind=kind) for k in range(31)])
        c.record(0, 0, 0, 1.0, draft_s=0.3)  # a draft model asked and refusing: a refusal rate
        assert c.draft.refusal_rate() > 0
        rates = c.expected_rates(30, kind=0)
        assert np.allclose(rates, [c.expected_rate(k, kind=0) for k in range(31)])


def test_a_one_off_cost_is_paid_only_where_the_reply_can_repay_it() -> None:
    # Costly target (60 ms a token), a draft at a third of its cost, 70% acceptance: drafting is
    # ~1.3x faster, saving ~14 ms a token. Loading the draft (0.5 s) repays itself over a long
    # reply, never over a 16-token one.
    costly = {1: 0.060, 2: 0.075, 4: 0.090, 8: 0.130}
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    # With nothing measured (a first use), only a reply long enough to measure the pair loads
    # it; a shorter one cannot repay the load, whatever the pair.
    assert c.pays_back(FIRST_REPLY_MIN_TOKENS, 0.5), "with nothing measured, a long reply measures"
    assert not c.pays_back(FIRST_REPLY_MIN_TOKENS - 1, 0.5)
    assert c.pays_back(16, 0.0), "a loaded, caught-up draft model costs nothing to try"
    c.seed({"step_s": {str(n): s for n, s in costly.items()}, "draft_ratio": 0.3, "draft_load_s": 0.5})
    one_off = c.draft.one_off_s(prompt_s=0.1)
    assert 0.5 < one_off < 0.6  # the load and the draft's share of reading the prompt
    assert c.pays_back(512, one_off)
    assert not c.pays_back(16, one_off)
    # Once the draft's own prompt read is measured, that ratio stands in for the decode ratio:
    # a prefill-bound draft far cheaper than its decode ratio suggests is loaded sooner.
    c.draft.note_prefill(0.002, 8, 0.1, 100)  # too short to time: ignored
    assert c.draft.one_off_s(prompt_s=0.1) == one_off
    c.draft.note_prefill(0.010, 100, 0.1, 100)  # a tenth of the target's cost per prompt token
    c.draft.note_prefill(0.050, 100, 0.1, 100)  # a read on a busy moment: the lowest ratio stays
    assert c.draft.one_off_s(prompt_s=1.0) == pytest.approx(0.5 + 0.1)
    assert c.export()["draft_prefill_ratio"] == pytest.approx(0.1)
    assert fresh(c).draft.one_off_s(prompt_s=1.0) == pytest.approx(0.6)
    # A loaded draft catching up mid-reply pays only the reading, at the target's measured
    # prefill cost per token (a millisecond here), never the load again.
    assert target_read_s(c, 300) == pytest.approx(0.3)
    assert c.draft.one_off_s(target_read_s(c, 300), loaded=True) == pytest.approx(0.03)
    assert target_read_s(fresh(c), 300) == pytest.approx(0.3)
    assert not c.pays_back(8, c.draft.one_off_s(target_read_s(c, 3000), loaded=True))
    # A draft that cannot beat plain decoding at any length never repays anything.
    slow = DraftLengthController(k_max=16, draft_costs_time=True)
    slow.seed({"step_s": {str(n): s for n, s in costly.items()}, "draft_ratio": 2.0})
    assert not slow.pays_back(10_000, 0.0)
    assert slow.export()["draft_load_s"] is None


# A costly target on this EPYC (AVX-512, 2 cores): the F16 Gemma 3 270M with 72 zero-output
# layers, its Q4_K_M as the draft at ~0.3 of a plain step a token. A verify row costs a third
# of a plain step, so the pair pays only near full acceptance (the Q4 is accepted ~99%).
EPYC_COSTLY = {1: 0.039, 2: 0.091, 3: 0.097, 4: 0.098, 5: 0.104, 8: 0.148, 12: 0.180, 16: 0.233, 33: 0.43}


def epyc_costly(rows: int) -> float:
    sizes = sorted(EPYC_COSTLY)
    return float(np.interp(rows, sizes, [EPYC_COSTLY[n] for n in sizes]))


def test_a_draft_model_not_yet_judged_is_tried_where_a_long_reply_can_repay_it() -> None:
    # At the prior acceptance (0.7) no draft of this pair beats a plain step: priced so, it was
    # never loaded or drafted, and so never measured (1.06x on an open prompt). Until it has been
    # judged on _HOPEFUL_TRIALS tokens it is priced at what it may be: loaded for a long reply
    # (never for a short one: a 32-token reply cannot repay its load) and drafted, within the
    # reply's ramp; a draft the target rejects loses that hope within a few drafts.
    c = DraftLengthController(k_max=32, draft_costs_time=True)
    c.seed({"step_s": {str(n): s for n, s in EPYC_COSTLY.items()}, "draft_ratio": 0.3, "draft_load_s": 0.5})
    assert all(c.expected_rate(k, 0) < c.expected_rate(0, 0) for k in range(1, 17))  # at the prior
    one_off = c.draft.one_off_s(target_read_s(c, 20))
    assert c.pays_back(256, one_off)
    assert not c.pays_back(32, one_off)
    c.record(0, 0, 0, EPYC_COSTLY[1])
    k, kind = pick(c, (32, 0))
    assert kind == 0 and k == 4  # the ramp's first draft
    useless = fresh(c)
    for _ in range(6):  # accepted whole: long drafts, and the hope becomes the measure
        k, _ = pick(c, (32, 0))
        c.record(0, k, k, epyc_costly(k + 1) + 0.3 * 0.039 * k, draft_s=0.3 * 0.039 * k)
    assert pick(c, (32, 0))[0] >= 8 and c.acceptance(0) > 0.9
    # A useless draft: rejected at its first token, and the pair is no longer tried.
    useless.record(0, 0, 0, EPYC_COSTLY[1])
    for _ in range(3):
        k, _ = pick(useless, (32, 0))
        if k:
            useless.record(0, k, 0, epyc_costly(k + 1) + 0.3 * 0.039 * k, draft_s=0.3 * 0.039 * k)
    assert pick(useless, (32, 0))[0] == 0
    assert not useless.pays_back(256, one_off)


def test_a_reply_starts_with_short_drafts_until_one_is_accepted_whole() -> None:
    # Acceptance learned elsewhere (here: everything accepted before) may not hold for this reply:
    # its first draft is short, and drafts grow once one is accepted whole.
    c = seeded(k_max=64)
    c.seed({"step_s": {}, "acceptance": {"5": [50.0, 50.0]}})
    c.record(5, 0, 0, CPU_VERIFY[1])
    c.begin_reply()
    lengths = []
    for _ in range(4):
        k = c.choose(available=64, kind=5)
        lengths.append(k)
        c.record(5, k, k, cpu_verify(k + 1))
    assert lengths[0] <= 4
    assert lengths == sorted(lengths) and lengths[-1] >= 4 * lengths[0]
    # A rejection early on falls back to short drafts; a new reply starts short again.
    c.begin_reply()
    assert c.choose(available=64, kind=5) <= 4


# SmolLM2-135M on 2 AMD EPYC cores, AVX-512 build (tandem bench dev cost-curve): every verified row
# costs about half a plain step.
STEEP = {1: 0.0087, 2: 0.0160, 4: 0.0250, 8: 0.0417, 16: 0.0754, 32: 0.1302, 64: 0.2494}


def _copying_on_steep_costs() -> DraftLengthController:
    """A controller on the STEEP curve whose drafts were accepted whole so far, at a reply's start."""
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in STEEP.items()}, "acceptance": {"5": [80.0, 80.0]}})
    c.record(5, 0, 0, STEEP[1])
    c.begin_reply()
    return c


def steep_verify(rows: int) -> float:
    """What a verify batch of this many rows costs on the STEEP curve (interpolated)."""
    sizes = sorted(STEEP)
    return float(np.interp(rows, sizes, [STEEP[n] for n in sizes]))


def test_a_draft_risks_no_more_than_the_reply_has_saved() -> None:
    # Copying accepted whole so far (acceptance ~1): on a steep curve a long draft is still priced
    # well, but one rejected at its first token would lose 10 plain tokens. Within a reply a draft
    # may risk only what the reply's drafts saved, plus what a first 4-token draft risks.
    c = _copying_on_steep_costs()
    plain = STEEP[1]

    saved = 0.0
    allowance = steep_verify(5) - plain  # what a first 4-token draft risks
    lengths = []
    for _ in range(6):
        k = c.choose(available=63, kind=5)
        lengths.append(k)
        assert steep_verify(k + 1) - plain <= saved + allowance + 1e-9, (lengths, saved)
        c.record(5, k, k, steep_verify(k + 1))
        saved += (k + 1) * plain - steep_verify(k + 1)
    assert lengths[-1] > 2 * lengths[0]  # what copying saves, it may risk: drafts grow
    # A long draft rejected at its first token spends what was saved: the next one is short again.
    k = c.choose(available=63, kind=5)
    c.record(5, k, 0, steep_verify(k + 1))
    saved += plain - steep_verify(k + 1)
    assert steep_verify(c.choose(available=63, kind=5) + 1) - plain <= max(saved, 0.0) + allowance + 1e-9


def test_a_reply_in_the_red_whose_copies_keep_breaking_risks_half_as_much_each_time() -> None:
    # An edit that breaks each copy at its first token: a reply that has saved nothing may risk
    # what a first 4-token draft risks, then half that after one break, a quarter after two (it
    # cannot lose the allowance afresh at every break: SmolLM2's edit replies, 2026-12-06).
    c = _copying_on_steep_costs()
    plain = STEEP[1]

    allowance = steep_verify(5) - plain
    risked = []
    for breaks in range(3):
        k = c.choose(available=63, kind=5, match_len=5)
        assert steep_verify(k + 1) - plain <= allowance * 0.5**breaks + 1e-9, (breaks, k)
        risked.append(steep_verify(k + 1) - plain)
        c.record(5, k, 0, steep_verify(k + 1))
    assert risked[0] > risked[1] > risked[2]


def test_a_draft_model_found_too_slow_is_measured_again_now_and_then() -> None:
    # A draft timed on a busy machine may look too slow for good: every few replies (doubling)
    # its cost is measured afresh instead of trusted forever.
    c = seeded(k_max=16, draft_costs_time=True)
    c.seed({"step_s": {}, "draft_ratio": 5.0})
    assert c.never_pays
    remeasured = []
    for reply in range(1, 40):
        c.begin_reply()
        if not c.never_pays:
            remeasured.append(reply)
            c.seed({"step_s": {}, "draft_ratio": 5.0})  # measured again: still too slow
    assert remeasured == [8, 24]


def test_short_drafts_accepted_whole_release_the_limit_whatever_their_length() -> None:
    # Where a 3-row verify costs more than a 4-row one (AVX2), the
    # model may draft 3 or fewer: those accepted whole must still end the reply's short start.
    c = seeded(k_max=32)
    c.record(5, 0, 0, CPU_VERIFY[1])
    c.begin_reply()
    for _ in range(2):
        c.record(5, 2, 2, CPU_VERIFY[4])
    assert c.budget.ramp == 32


def test_a_drafts_first_decode_is_priced_apart_from_the_rest() -> None:
    # After a draft accepted whole, the draft reads 2 tokens in its first decode (~2x one on a
    # CPU): averaged over short drafts, that made every drafted token look twice as dear.
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.record(0, 0, 0, 0.050)
    for _ in range(20):
        c.record(0, 1, 1, 0.100 + 0.030, draft_s=0.030, draft_first_s=0.030, n_more=0)
        c.record(0, 8, 8, 0.200 + 0.030 + 7 * 0.015, draft_s=0.030 + 7 * 0.015, draft_first_s=0.030, n_more=7)
    assert c.draft.draft_first_cost(c.costs.cost(1)) == pytest.approx(0.030, rel=0.05)
    assert c.draft.draft_cost(c.costs.cost(1)) == pytest.approx(0.015, rel=0.05)


def test_a_draft_models_acceptance_carries_into_the_next_process() -> None:
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.record(0, 0, 0, 0.050)
    for _ in range(6):
        c.record(0, 4, 4, 0.2, draft_s=0.06, draft_first_s=0.03, n_more=3)
    fresh = DraftLengthController(k_max=16, draft_costs_time=True)
    fresh.seed(c.export())
    assert fresh.acceptance(0) > 0.9
    ngram = DraftLengthController(k_max=16)  # an n-gram match's worth is the text's: carried lightly
    ngram.seed({"step_s": {"1": 0.05}, "acceptance": {"4": [24.0, 24.0]}})
    assert ngram.acceptance(4) < fresh.acceptance(0)


def test_beside_a_draft_model_a_long_text_match_drafts_for_free() -> None:
    # A draft model costing a twentieth of a plain step per token, right 95% of the time; an
    # n-gram match in the text (kind 5) that has been right every time costs nothing to draft:
    # the match wins. A short match that is seldom right (kind 1) loses to the model.
    c = seeded(k_max=32, draft_costs_time=True)
    c.seed({"draft_ratio": 0.05, "acceptance": {"0": [95.0, 100.0], "5": [40.0, 40.0], "1": [1.0, 10.0]}})
    c.record(0, 0, 0, CPU_VERIFY[1])
    model = c.expected_rates(32, 0)[1:].max()
    lookup = c.expected_rates(32, 5)[1:].max()
    assert lookup > model  # the free drafts are priced free...
    k, kind = pick(c, (32, 0), (20, 5))
    assert kind == 5 and 0 < k <= 20  # ...and chosen, no longer than the match
    k, kind = pick(c, (32, 0), (20, 1))
    assert kind == 0 and k > 0
    # A draft model found too slow to ever pay is not run; the text's drafts still are.
    c.seed({"draft_ratio": 10.0, "draft_first_ratio": 10.0})
    assert c.never_pays
    assert c.choose_among([Offer(DrafterKind.MODEL, 32)]) == Choice(0)
    k, kind = pick(c, (32, 0), (20, 5))
    assert kind == 5 and k > 0


def test_while_the_text_drafts_the_draft_model_is_still_probed_now_and_then() -> None:
    # The text repeats itself and its drafts win every step: the draft model, judged on priors
    # only, would never be measured. It gets a short probe after a few steps, then ever more
    # rarely (its probes are not reset by the text's drafts paying).
    c = seeded(k_max=32, draft_costs_time=True)
    c.seed({"draft_ratio": 0.3, "acceptance": {"5": [40.0, 40.0]}})
    c.record(0, 0, 0, CPU_VERIFY[1])
    probes = []
    for step in range(300):
        k, kind = pick(c, (32, 0), (20, 5))
        if k == 0:  # a plain step now and then keeps the guard's reference fresh
            c.record(0, 0, 0, CPU_VERIFY[1])
        elif kind == 0:
            assert c.probes.probing and k <= 4
            probes.append(step)
            c.record(0, k, 0, 3 * CPU_VERIFY[4], 0.3 * k * CPU_VERIFY[1])  # all rejected
        else:
            c.record(kind, k, k, CPU_VERIFY[16])
    assert probes and probes[0] < 16
    assert len(probes) <= 7  # 8, 16, 32, 64, 64, ... steps apart


def test_free_offers_that_are_observed_are_not_probed() -> None:
    # Fresh text: n-gram offers each step, rarely right. Observed for free (the emitted token
    # checked against the offer's first token), they are never drafted: no one-token probe,
    # which on AVX2 costs a 2-row step (~2x a plain one) each time it fails.
    c = seeded(k_max=16)
    c.record(2, 0, 0, CPU_VERIFY[1])
    choices = []
    for i in range(300):
        k = c.choose(available=8, kind=2)
        choices.append(k)
        c.record(2, k, 0, CPU_VERIFY[2] if k else CPU_VERIFY[1])
        if not k:
            c.observe(2, accepted=i % 10 == 0)
    assert c.acceptance(2) < 0.3 and choices.count(0) >= 295 and not any(choices[10:])
    # When the text starts repeating itself, observations alone make it draft.
    n_observed = 0
    while not c.choose(available=8, kind=2) and n_observed < 40:
        c.record(2, 0, 0, CPU_VERIFY[1])
        c.observe(2, accepted=True)
        n_observed += 1
    assert 3 <= n_observed < 40 and c.acceptance(2) >= 0.5
    # A draft model's offers cost decodes: they are never learned that way.
    m = seeded(k_max=16, draft_costs_time=True)
    m.observe(0, accepted=True)
    assert m.acceptance(0) == pytest.approx(0.7)


def test_longer_drafts_are_priced_from_what_a_row_more_costs() -> None:
    # AVX2, Gemma 3 270M: past a few rows a verify batch costs a fixed part plus 5-6 ms a row
    # (5, 11, 21 rows: 60, 94, 150 ms; 41 rows were 250). Copying, accepted whole, drafts past
    # the largest size measured at that slope, where a flat guess kept it at 21 rows.
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {"1": 0.024, "5": 0.060, "11": 0.094, "21": 0.150}, "acceptance": {"5": [2.0, 2.0]}})
    c.record(5, 0, 0, 0.024)
    assert c.costs.cost(41) == pytest.approx(0.150 + 20 * (0.150 - 0.060) / (21 - 5))
    for _ in range(4):
        c.record(5, 20, 20, 0.150)
    assert c.choose(available=63, kind=5) > 21
    # A slope measured lower than a quarter of a row's average cost is taken as that (noise).
    flat = DraftLengthController(k_max=63)
    flat.seed({"step_s": {"1": 0.024, "10": 0.150, "20": 0.150}})
    assert flat.costs.cost(40) == pytest.approx(0.150 + 20 * 0.25 * 0.150 / 20)


def test_a_draft_models_drafts_where_the_text_was_copied_do_not_count_toward_its_acceptance() -> None:
    # Probed while the text copies, a draft model copies too (100%); on fresh text, where it is
    # chosen, it was accepted 70-89% (costly pair, AVX2). Counted, the copy made a 32-token
    # fresh reply load it (1 s) and decode at 0.92x.
    c = seeded(k_max=32, draft_costs_time=True)
    c.seed({"draft_ratio": 0.3, "acceptance": {"0": [3.0, 4.0]}})
    before = c.acceptance(0)
    for _ in range(5):
        c.record(0, 4, 4, CPU_VERIFY[4], 0.3 * 4 * CPU_VERIFY[1], learn=False)
    assert c.acceptance(0) == before
    c.record(0, 4, 4, CPU_VERIFY[4], 0.3 * 4 * CPU_VERIFY[1])
    assert c.acceptance(0) > before


def test_an_observed_offer_that_is_usually_right_has_its_cost_measured_again() -> None:
    # Verify batches once timed at 40x their cost (a busy moment): a loop the text offers every
    # step, observed right every time, is not drafted on those figures. After a while a short
    # probe times a batch afresh, and the loop drafts from then on.
    c = DraftLengthController(k_max=16)
    c.seed({"step_s": {"1": CPU_VERIFY[1], **{str(n): 40 * n * CPU_VERIFY[1] for n in (2, 4, 8, 16)}}})
    c.record(5, 0, 0, CPU_VERIFY[1])
    choices = []
    for _ in range(400):
        k = c.choose(available=16, kind=5)
        choices.append(k)
        if k:
            c.record(5, k, k, cpu_verify(k + 1))
        else:
            c.record(5, 0, 0, CPU_VERIFY[1])
            c.observe(5, accepted=True)
    probes = [i for i, k in enumerate(choices) if k]
    assert probes and 16 <= probes[0] <= 40 and choices[probes[0]] == 4
    assert sum(1 for k in choices[-100:] if k) > 50  # drafting, once the costs were re-measured
    # Fresh text, rarely right: never probed that way (see the test above).


def test_a_cost_probe_risks_no_more_than_the_reply_may() -> None:
    # As above, batches timed at 40x their cost; but this reply's copy broke on a 4-token draft and
    # it has saved nothing: its probe of the observed offer is held to what the reply may still
    # risk (1 token here), not a first draft's 4 (the probe was the one draft the limit did not bound).
    c = DraftLengthController(k_max=16)
    c.seed({"step_s": {"1": CPU_VERIFY[1], **{str(n): 40 * n * CPU_VERIFY[1] for n in (2, 4, 8, 16)}}})
    c.record(5, 0, 0, CPU_VERIFY[1])
    c.begin_reply()
    c.choose(available=16, kind=5, match_len=20)
    c.record(5, 4, 0, 40 * 5 * CPU_VERIFY[1])
    choices = []
    for _ in range(60):
        k = c.choose(available=16, kind=5)
        choices.append(k)
        if k:
            break
        c.record(5, 0, 0, CPU_VERIFY[1])
        c.observe(5, accepted=True)
    assert choices[-1] == 1, choices


def test_a_replys_first_copy_draft_is_not_held_back_by_a_copy_that_ended() -> None:
    # AVX2 costs (3 rows dearer than 4). The cache carries a copy kind that a copy's end left
    # near 50%: at that estimate one token a step is best, and a reply copying from its first token
    # spent its start at 14 ms a token where copying costs 5. Its first copy draft is judged at
    # the prior; a later copy offer in the same reply by what this reply has shown.
    avx2 = {1: 0.0229, 2: 0.0273, 3: 0.0440, 4: 0.0389, 6: 0.0497, 8: 0.0597, 16: 0.0933}
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in avx2.items()}, "acceptance": {"5": [0.2, 2.0], "7": [0.2, 2.0]}})
    c.record(5, 0, 0, avx2[1])
    assert c.acceptance(5) < 0.6
    assert c.expected_rate(1, 5) > c.expected_rate(3, 5)  # the estimate alone: 1 token
    c.begin_reply()
    assert c.choose(available=63, kind=5) == 4  # the ramp's longest, at the prior
    c.record(5, 4, 0, 0.0443)  # this copy was wrong at once
    assert c.choose(available=63, kind=5) == 1
    c.begin_reply()
    assert c.choose(available=63, kind=7) == 4  # a new reply: its first copy offer again


def test_a_replys_first_draft_is_bounded_by_cost_not_by_length() -> None:
    # 2 AVX2 cores, Gemma 3 270M (timed alone): an odd batch costs more than the next even one.
    # The ramp's 4 tokens are 5 rows at 50 ms; 5 tokens, 6 rows, cost 45 and are drafted instead.
    avx2 = {n: s for n, s in AVX2_ALONE.items() if n <= 8}
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in avx2.items()}})
    c.record(5, 0, 0, avx2[1])
    c.begin_reply()
    assert c.choose(available=63, kind=5) == 5
    # Where more rows cost more (most GPUs, this test's other CPU), the ramp's length holds.
    d = seeded(k_max=63)
    d.record(5, 0, 0, CPU_VERIFY[1])
    d.begin_reply()
    assert d.choose(available=63, kind=5) <= 4


def test_one_slow_step_does_not_make_a_batch_size_look_dear() -> None:
    # 2 AVX2 cores, Gemma 3 270M, copying: 64 rows cost 302 ms alone. One 64-row step slowed by
    # the machine (another program) must not make shorter drafts look cheaper a token from then on.
    avx2 = {n: AVX2_ALONE[n] for n in (1, 2, 4, 8, 16, 32, 64)}
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in avx2.items()}, "acceptance": {"5": [200.0, 200.0]}})
    c.record(5, 0, 0, avx2[1])
    c.record(5, 7, 7, avx2[8])  # the reply's first draft, accepted whole: the ramp is over
    for _ in range(3):
        c.record(5, 31, 31, avx2[32])
    assert c.choose(available=63, kind=5) >= 60
    c.record(5, 63, 63, 1.2 * avx2[64])  # its first 64-row step this process, slowed
    assert c.choose(available=63, kind=5) >= 60


def test_a_draft_model_is_loaded_for_a_short_reply_only_where_it_surely_repays() -> None:
    # The cost cache a real warm-up left on 2 AVX2 cores (a costly target, ~74 ms a token, with
    # its Q4 draft): the draft accepted 7 of 7, in a warm-up reply that looped. On fresh text it
    # was accepted 68-85%, and loading it (0.4-0.7 s) for 32 tokens cost 0.83-0.94x plain over
    # the whole process. For 512 tokens it repays its load many times over.
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.seed(
        {
            "step_s": {
                "1": 0.0742,
                "2": 0.1084,
                "3": 0.1237,
                "4": 0.1388,
                "5": 0.1519,
                "8": 0.1912,
                "15": 0.3095,
            },
            "draft_ratio": 0.2928,
            "draft_first_ratio": 0.2848,
            "draft_load_s": 0.3816,
            "draft_prefill_ratio": 0.1728,
            "target_prefill_token_s": 0.0105,
            "acceptance": {"0": [7.1523, 7.1523]},
        }
    )
    one_off = c.draft.one_off_s(target_read_s(c, 20))
    assert 0.4 < one_off < 0.5
    assert not c.pays_back(32, one_off)
    assert c.pays_back(512, one_off)


def test_a_copy_whose_context_matched_long_drafts_long_from_its_first_step() -> None:
    # The text so far agrees with an earlier stretch over L tokens (a regenerate, a copy that
    # began in the prompt): that copy is expected to run about as far again, and each next token
    # to agree with probability (L + 1) / (L + 2). Its first draft takes the batch the machine
    # checks best rather than the 4 tokens of a reply's first drafts, priced at that acceptance
    # rather than what other copies left in the cost cache (capped at 2 trials: 0.975 here).
    # A short match, or a reply whose copy already departed from its source once, starts short.
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in AVX2_ALONE.items()}, "acceptance": {"5": [80.0, 80.0]}})
    c.record(5, 0, 0, AVX2_ALONE[1])
    c.begin_reply()
    short = c.choose(available=63, kind=5, match_len=6)
    at_rate = 1 + int(np.argmax(c.expected_rates(63, 5)[1:]))  # the best length at the cache's rate
    long = c.choose(available=63, kind=5, match_len=40)
    regenerate = c.choose(available=63, kind=7, match_len=700)  # an earlier reply, given again
    assert short <= 5 and at_rate >= 3 * short
    assert long >= at_rate and regenerate >= 3 * at_rate
    # A phrase (not a copy) is not carried by its match length.
    assert c.choose(available=63, kind=4, match_len=40) <= 8
    c.record(5, long, 3, AVX2_ALONE[32])  # this reply's copy departs after 3 tokens
    assert c.choose(available=63, kind=5, match_len=40) < long


def test_a_first_reply_on_a_machine_never_timed_times_a_few_batches_once() -> None:
    from engine.adaptive import FIRST_REPLY_SIZES

    c = DraftLengthController(k_max=63)
    assert c.first_reply_sizes(n_batch=512) == list(FIRST_REPLY_SIZES)
    assert c.first_reply_sizes(n_batch=8) == [n for n in FIRST_REPLY_SIZES if n <= 8]
    assert c.first_reply_sizes(n_batch=512, max_tokens=32) == []  # a short reply cannot repay it
    c.note_timings({n: STEEP.get(n, 0.02) for n in FIRST_REPLY_SIZES})
    assert c.first_reply_sizes(n_batch=512) == []
    # A cost cache that knows more than a plain step: nothing is timed before the reply.
    known = seeded(k_max=63)
    assert known.first_reply_sizes(n_batch=512) == []
    assert DraftLengthController(k_max=63, adaptive=False).first_reply_sizes(512) == []


def test_a_step_that_grew_llamas_buffers_does_not_price_its_size_where_timings_do() -> None:
    # A 26-row step that grew llama.cpp's logits buffer, 80 ms slower than 26 rows cost after:
    # between timed sizes it prices nothing; past the largest timed size it is all there is, and
    # the next step of its size corrects it (a size is priced at its lowest timing).
    c = seeded(k_max=63)
    c.record(5, 25, 25, 0.3, timed=False)
    assert 26 not in c.costs.low and c.costs.cost(26) < 0.15
    c.record(5, 63, 63, 0.5, timed=False)
    assert c.costs.low[64] == 0.5
    c.record(5, 63, 63, 0.25)
    assert c.costs.low[64] == 0.25


def test_a_replys_losses_count_against_its_cost_probes() -> None:
    # Mixed work (a CSV made a Markdown table, 2026-12-06): short matches whose first token is
    # usually right (the observed offer gets a cost probe every _COST_PROBE_STEPS) but whose drafts
    # break after it. Each 4-token probe lost a first draft's allowance afresh, because a reply in
    # the red was allowed that allowance again: 7 probes, 228 ms over a 256-token reply. A probe now
    # risks only what the reply's losses left of its allowance, and a short match's allowance past
    # the reply's first tokens, until its drafts have saved time, is what a 1-token draft risks:
    # this reply's probes, all wrong, lose one such draft's worth in all.
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in STEEP.items()}})
    c.record(3, 0, 0, STEEP[1])
    c.begin_reply()
    plain = STEEP[1]
    allowance = steep_verify(2) - plain  # what a 1-token draft risks
    rng = np.random.default_rng(0)
    lost = 0.0
    probes = []
    for _ in range(300):
        k = c.choose(available=20, kind=3, match_len=3)
        if k:
            assert c.probes.probing  # (priced, these short matches never pay on this curve)
            probes.append(k)
            step = steep_verify(k + 1)
            c.record(3, k, 0, step)  # wrong after its first token: one token emitted, as a plain step
            lost += step - plain
        else:
            c.record(3, 0, 0, plain)
            c.observe(3, accepted=rng.random() < 0.6)
    assert probes and set(probes) == {1}, probes
    assert lost <= allowance * (1 + 1e-9), (lost, allowance)


def test_a_short_match_risks_what_the_replys_losses_left_but_a_copy_keeps_its_allowance() -> None:
    # Short matches priced as usually right (acceptance carried from a copy) that the reply keeps
    # getting wrong: once what they lost passes the first draft's allowance, a short match drafts
    # one token at most. A copy offered in that reply still risks its allowance (a copy in the red
    # is bounded by the halving per break instead): losses elsewhere must not hold a copy that
    # begins late to one-token drafts.
    flat = {1: 0.010, 2: 0.011, 4: 0.012, 8: 0.014, 16: 0.018, 32: 0.026, 64: 0.042}  # rows cheap
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in flat.items()}})
    c.record(3, 0, 0, flat[1])
    c.begin_reply()

    def verify(rows: int) -> float:
        return float(np.interp(rows, sorted(flat), [flat[n] for n in sorted(flat)]))

    allowance = verify(5) - flat[1]
    lost, lengths = 0.0, []
    while lost <= allowance:
        k = c.choose(available=20, kind=3, match_len=3)
        assert k > 0, lengths  # priced as paying: drafted until the losses tell
        lengths.append(k)
        c.record(3, k, 0, verify(k + 1), learn=False)  # wrong at its first token
        lost += verify(k + 1) - flat[1]
    assert c.choose(available=20, kind=3, match_len=3) <= 1, lengths
    assert c.choose(available=63, kind=5, match_len=40) > 1


# Verify batches on this EPYC (2 cores, AVX-512 build, Gemma 3 270M Q4_K_M), the lowest of the
# idle calibration's timings: a second row costs 0.9 of a plain step.
EPYC = {1: 0.0119, 2: 0.0224, 3: 0.0256, 4: 0.0341, 8: 0.0464, 16: 0.0713, 32: 0.14, 64: 0.237}


def epyc_verify(rows: int) -> float:
    sizes = sorted(EPYC)
    return float(np.interp(rows, sizes, [EPYC[n] for n in sizes]))


def _mixed_reply(c: DraftLengthController, right: float, steps: int, seed: int) -> tuple[float, int]:
    """A reply of short matches right at each token with chance `right` (a CSV written as a table):
    (its seconds less plain decoding's for the tokens it emitted, how many drafts it ran)."""
    rng = np.random.default_rng(seed)
    c.begin_reply()
    lost, drafts = 0.0, 0
    for _ in range(steps):
        k = c.choose(available=20, kind=3, match_len=3)
        if k:
            kept = 0
            while kept < k and rng.random() < right:
                kept += 1
            step = epyc_verify(k + 1)
            c.record(3, k, kept, step)
            lost += step - (kept + 1) * EPYC[1]
            drafts += 1
        else:
            c.record(3, 0, 0, EPYC[1])
            c.observe(3, accepted=bool(rng.random() < right))
    return lost, drafts


def test_short_matches_right_two_times_in_three_lose_next_to_nothing_where_a_second_row_costs_a_plain_step() -> (
    None
):
    # Mixed work warmed (2026-12-06): short matches right ~65% of the time, observed between
    # drafts; a right 1-token draft saves 1.5 ms here, a wrong one loses 10.5. What such a reply
    # loses against plain decoding over 250 steps stays within three plain steps (a cost probe
    # every _COST_PROBE_STEPS, each a coin flip for one of them, lost up to 65 ms).
    lost = []
    for seed in range(5):
        c = DraftLengthController(k_max=63)
        c.seed({"step_s": {str(n): s for n, s in EPYC.items()}, "acceptance": {"3": [50.0, 50.0]}})
        c.record(3, 0, 0, EPYC[1])
        c.budget.drafted_kinds.add(
            3
        )  # the reply drafted this kind already (its first was priced at its prior)
        lost.append(_mixed_reply(c, right=0.65, steps=250, seed=seed)[0])
    assert max(lost) <= 3 * EPYC[1], lost


def _replies(
    c: DraftLengthController, step_s: Callable[[int], float], replies: int, accept: bool
) -> list[tuple[int, int, int, bool]]:
    """Replies of 80 steps offering 3-token matches right at their first token 60% of the time:
    (reply, step, k, probing) of each draft; accept=False: every draft rejected at its first token."""
    rng = np.random.default_rng(1)
    drafts = []
    for reply in range(replies):
        c.begin_reply()
        for step in range(80):
            k = c.choose(available=20, kind=3, match_len=3)
            right = bool(rng.random() < 0.6)
            if k:
                drafts.append((reply, step, k, c.probes.probing))
                c.record(3, k, int(right and accept), step_s(k + 1))
            else:
                c.record(3, 0, 0, step_s(1))
                c.observe(3, accepted=right)
    return drafts


def test_a_cost_probe_times_a_size_until_its_timings_are_trusted() -> None:
    # An observed offer usually right that is not drafted gets a cost probe every
    # _COST_PROBE_STEPS, to time its batch afresh (a busy moment's timing must not price it out for
    # good). A size this process's steps have timed TRUSTED_SAMPLES times has its price: no probe
    # again (the cache's price and two probes here, one a reply: each lost, and a reply in the red
    # does not probe a size timed here again).
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): s for n, s in EPYC.items()}})
    c.record(3, 0, 0, EPYC[1])
    drafts = _replies(c, epyc_verify, replies=5, accept=False)
    assert [(reply, k) for reply, _, k, probing in drafts if probing] == [(0, 1), (1, 1)], drafts
    assert len(c.costs.samples[2]) == TRUSTED_SAMPLES


def test_a_size_one_slow_step_of_this_process_priced_is_timed_again() -> None:
    # A tiny model's first 2-row batch after load cost 0.88 ms beside plain steps of 0.3 (a slow
    # first step). Priced at that one timing, no 1-token draft could pay, and as this process had
    # timed the size, no cost probe timed it again: the observed offer, right 60% of the time, was
    # not drafted again in that process. Now a size with fewer than TRUSTED_SAMPLES timings gets a
    # cost probe in a reply not in the red, and once found cheap, the offer is drafted.
    tiny = {1: 0.0003, 2: 0.00036, 3: 0.0007, 4: 0.0009, 8: 0.0016, 16: 0.003, 32: 0.0058, 64: 0.011}
    sizes = sorted(tiny)

    def tiny_verify(rows: int) -> float:
        return float(np.interp(rows, sizes, [tiny[n] for n in sizes]))

    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {str(n): tiny[n] for n in sizes if n != 2}})
    c.record(3, 0, 0, tiny[1])
    c.record(3, 1, 0, 0.00088)  # the slow 2-row step, of this process
    drafts = _replies(c, tiny_verify, replies=5, accept=True)
    assert c.costs.prices()[2] == pytest.approx(tiny[2])
    last = [k for reply, _, k, probing in drafts if reply == 4 and not probing]
    assert last.count(1) > 40, drafts  # a 1-token draft right 60% pays here (longer: exploring)


def test_a_copy_held_back_by_prices_from_a_busy_moment_times_its_first_draft_again() -> None:
    # Issue 48, Why 2: every batch priced once in a busy moment, each dearer than the plain steps its
    # draft could save (an idle calibration while another program ran; a reply's one slowed step
    # prices its size alike). A copy right at every step was never drafted: nothing re-timed a size
    # timed before. After RAMP_FIRST right plain steps its first draft's batch is timed again...
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {"1": 0.02, **{str(n): (n + 1) * 0.02 for n in range(2, 65)}}})
    c.begin_reply()
    for _ in range(4):
        assert c.choose(30, DrafterKind.COPY, match_len=16) == 0
        c.observe(DrafterKind.COPY, True)
    assert c.choose(30, DrafterKind.COPY, match_len=20) == 4 and c.probes.probing
    c.record(DrafterKind.COPY, 4, 4, 0.045)  # ...and found as cheap as it is when quiet
    assert c.choose(30, DrafterKind.COPY, match_len=25) >= 4 and not c.probes.probing
    # A size timed often enough is priced as it is: no more probes of it, however long it stays out.
    c = DraftLengthController(k_max=63)
    c.seed({"step_s": {"1": 0.02, **{str(n): (n + 1) * 0.02 for n in range(2, 65)}}})
    for _ in range(2):
        c.record(DrafterKind.COPY, 4, 4, 0.1)
    c.begin_reply()
    for _ in range(12):
        assert c.choose(30, DrafterKind.COPY, match_len=16) == 0
        c.observe(DrafterKind.COPY, True)
