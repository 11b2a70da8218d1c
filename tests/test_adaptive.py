"""The draft-length controller: long drafts when they pay, plain decoding when they can't."""

from __future__ import annotations

from engine.adaptive import DraftLengthController

# Costs measured on a 2-core CPU with Gemma 3 270M Q4_K_M (verify batch size -> seconds).
CPU_VERIFY = {1: 0.012, 2: 0.031, 4: 0.041, 8: 0.057, 16: 0.091, 32: 0.147}


def test_long_drafts_when_everything_is_accepted() -> None:
    c = DraftLengthController(k_max=32)
    c.calibrate(CPU_VERIFY, None)
    for _ in range(10):
        k = c.choose(available=32, bucket=4)
        c.record(4, k, k, CPU_VERIFY.get(k + 1, 0.1))
    assert c.acceptance(4) > 0.95
    assert c.choose(available=32, bucket=4) >= 16


def test_falls_back_to_plain_when_drafts_are_rejected() -> None:
    c = DraftLengthController(k_max=32)
    c.calibrate(CPU_VERIFY, None)
    for _ in range(10):
        k = c.choose(available=8, bucket=1)
        if k:
            c.record(1, k, 0, CPU_VERIFY[8] if k > 4 else CPU_VERIFY[4])
    choices = [c.choose(available=8, bucket=1) for _ in range(100)]
    assert choices.count(0) >= 90  # plain decoding...
    assert any(choices)  # ...with a probe now and then, since n-gram drafts could pay


def test_a_draft_model_that_cannot_pay_is_never_tried() -> None:
    # Draft decode nearly as slow as the target's: no draft length beats plain even at 100%.
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.calibrate(CPU_VERIFY, draft_token_s=0.011)
    assert not c.could_pay(16)
    assert [c.choose(available=16) for _ in range(200)] == [0] * 200


def test_a_fast_draft_model_is_used() -> None:
    c = DraftLengthController(k_max=16, draft_costs_time=True)
    c.calibrate({1: 0.030, 2: 0.031, 4: 0.032, 8: 0.034, 16: 0.040}, draft_token_s=0.002)
    assert c.could_pay(16)
    assert c.choose(available=16) >= 3


def test_fixed_length_when_not_adaptive() -> None:
    c = DraftLengthController(k_max=5, adaptive=False)
    assert c.choose(available=9) == 5
    assert c.choose(available=3) == 3
    assert c.choose(available=0) == 0


def test_verify_cost_interpolates_between_measured_sizes() -> None:
    c = DraftLengthController(k_max=32)
    c.calibrate({1: 1.0, 5: 3.0}, None)
    assert c.verify_cost(3) == 2.0
    assert c.verify_cost(6) > 3.0  # beyond the largest measured: a mild slope
