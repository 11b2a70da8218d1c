"""The replay: the draft policy's decisions against a machine's cost curve (engine.replay), and the
best any policy could do in hindsight (the lab's, tools/lab/replay.py). No model needed: traces are
token ids, but for measuring a curve."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.cli.cli import main
from engine.adaptive import CALIBRATION_SIZES
from engine.replay import CostCurve, Trace, calibrated, load_traces, replay
from tests.cli_process import lab
from tools.lab.replay import hindsight_best, load_curves, noisy_replay
from tools.lab.replay import main as lab_replay

REPLAY = Path(__file__).resolve().parents[2] / "resources" / "replay"


def copy_trace(n_reply: int = 128, fresh: int = 0) -> Trace:
    """A prompt holding a document and the start of its copy; the reply copies the rest."""
    rng = np.random.default_rng(0)
    doc = [int(t) for t in rng.integers(100, 5000, 400)]
    tail = [int(t) for t in rng.integers(5000, 9000, fresh)]
    return Trace("copy", tuple([*doc, 1, 2, 3, *doc[:5]]), tuple(doc[5 : 5 + n_reply] + tail))


def test_the_best_in_hindsight_drafts_the_cheapest_batches_that_are_accepted() -> None:
    # A linear curve: per token, 64-row batches are cheapest. 128 copied tokens: two steps of 63
    # drafted tokens and the target's own each, however the offers run.
    curve = CostCurve("linear", {1: 11.0, 64: 74.0}, fixed_ms=0.0, row_ms=0.0)
    assert hindsight_best(copy_trace(128), curve) == pytest.approx(2 * 0.074)
    # With nothing to copy, plain steps: one a token.
    fresh = Trace("fresh", (1, 2, 3), tuple(range(10, 50)))
    assert hindsight_best(fresh, curve) == pytest.approx(40 * 0.011)


def test_the_controller_replays_as_the_engine_decides_and_no_better_than_hindsight() -> None:
    curve = CostCurve("linear", {1: 11.0, 64: 74.0}, fixed_ms=0.2, row_ms=0.05)
    trace = copy_trace(256, fresh=16)
    result, _ = replay(trace, curve)
    assert sum(a + 1 for _, a in result.steps) == len(trace.reply)  # every token emitted once
    assert result.decode_s >= hindsight_best(trace, curve) - 1e-9
    assert any(k >= 16 for k, _ in result.steps)  # a copy is drafted long
    assert result.speedup > 1.5


def test_where_a_curve_says_how_steps_grow_with_the_text_the_replay_and_hindsight_pay_it() -> None:
    # SmolLM2 on the Xeon: a plain step gains 5.9 ms per 1,000 tokens of text, 64 rows 103 ms.
    grows = CostCurve("grows", {1: 11.0, 64: 74.0}, 0.0, 0.0, at_tokens=100, growth_ms={1: 6.0, 64: 102.0})
    assert grows.verify_s(1) == pytest.approx(0.011) and grows.verify_s(1, 100) == pytest.approx(0.011)
    assert grows.verify_s(1, 1100) == pytest.approx(0.017) and grows.verify_s(64, 600) == pytest.approx(0.125)
    assert grows.verify_s(2, 1100) == pytest.approx(0.012 + 0.006 + 0.096 / 63)  # (both linear between sizes)
    fresh = Trace("fresh", tuple(range(1000)), tuple(range(2000, 2040)))  # nothing to copy: plain steps
    result, _ = replay(fresh, grows)
    expected = sum(0.011 + 0.006 * (1000 + i - 100) / 1000 for i in range(40))
    assert result.plain_s == pytest.approx(expected)
    assert hindsight_best(fresh, grows) == pytest.approx(expected)
    flat = CostCurve("flat", {1: 11.0, 64: 74.0}, 0.0, 0.0)
    assert replay(fresh, flat)[0].plain_s == pytest.approx(40 * 0.011)  # (no growth said: none)


def test_on_a_slow_machine_whose_rows_get_cheaper_only_at_the_largest_batches_copying_finds_them() -> None:
    # The slow AVX2 EPYC (issue 27): 17-48 rows cost 26-27 ms a row, 64 rows 21.8. Doubling from
    # a best of 16 priced 32 alike and never timed 64: 84% of the best in hindsight on copy-report.
    curves = {c.name: c for c in load_curves(REPLAY / "curves")}
    traces = {t.name: t for t in load_traces(REPLAY / "traces")}
    curve = curves["epyc-slow-avx2"]
    _, warm = replay(traces["warm-up"], curve)
    for name in ("copy-report", "edit-letter"):
        result, _ = replay(traces[name], curve, warm.export())
        assert hindsight_best(traces[name], curve) / result.decode_s >= 0.87, name
        assert max(k for k, _ in result.steps) == 63


def test_with_this_machines_batches_timed_while_idle_copying_drafts_the_cheap_sizes_at_once() -> None:
    # This EPYC, AVX2: even batches cost less than the odd ones below them (12 rows 76 ms, 11 rows
    # 84). What a first reply leaves timed (odd sizes mostly: 3, 5, 11, 15) priced longer drafts
    # along a slope 30% too steep, and copying kept to 11-token drafts for 60 tokens (86% of the
    # best in hindsight). Engine.calibrate's sizes, timed while the app is idle, end the guess.
    curves = {c.name: c for c in load_curves(REPLAY / "curves")}
    traces = {t.name: t for t in load_traces(REPLAY / "traces")}
    curve, trace = curves["this-epyc-avx2"], traces["copy-report"]
    _, warm = replay(traces["warm-up"], curve)
    seed = calibrated(warm.export(), curve)
    assert {str(n) for n in CALIBRATION_SIZES} <= set(seed["step_s"])  # type: ignore[arg-type]
    result, _ = replay(trace, curve, seed)
    assert hindsight_best(trace, curve) / result.decode_s >= 0.9


def test_the_risk_limits_own_bound_lies_between_the_hindsight_best_and_the_controller() -> None:
    # tools.lab.replay_risk_bound: the best any policy obeying the per-reply risk limit could do,
    # knowing acceptance. On the slow EPYC's in-run curve it is 95.3% of the hindsight-best (92.7%
    # before a reply's proven copies counted their sure tokens as emitted in the limit).
    from tools.lab.replay_risk_bound import risk_limited_best

    curves = {c.name: c for c in load_curves(REPLAY / "curves")}
    traces = {t.name: t for t in load_traces(REPLAY / "traces")}
    curve, trace = curves["epyc-slow-avx2"], traces["copy-report"]
    _, warm = replay(traces["warm-up"], curve)
    controller, _ = replay(trace, curve, calibrated(warm.export(), curve))
    best, bound = hindsight_best(trace, curve), risk_limited_best(trace, curve)
    assert best < 0.96 * bound and bound <= controller.decode_s
    # Rows that cost nothing past the first: no draft risks anything, and the limit never binds.
    flat = CostCurve("flat", {1: 10.0, 64: 10.0}, fixed_ms=0.0, row_ms=0.0)
    assert risk_limited_best(trace, flat) == pytest.approx(hindsight_best(trace, flat))


def test_the_replay_needs_no_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert lab_replay(["replay", "--python-scale", "1"]) == 0
    out = capsys.readouterr().out
    assert "| epyc-slow-avx2 | 1 | copy-report |" in out
    assert "### smollm2: 28 traces, 4 cost curves" in out  # each kept set against its own curves
    # Real sizes: stand-ins of Qwen2.5 0.5B-14B shapes timed here (AVX-512; 0.5B-7B on AVX2 too),
    # on the copy traces.
    assert "### real sizes (stand-ins) on the copy traces: 7 traces, 10 cost curves" in out
    assert "| this-epyc-avx512-qwen2.5-7b-q4_k_m | 1 | copy-report |" in out
    assert "| this-epyc-avx512-qwen2.5-14b-q4_k_m | 1 | copy-report |" in out
    assert "| this-epyc-avx2-qwen2.5-7b-q4_k_m | 1 | copy-report |" in out
    assert "| this-epyc-avx2-smollm2 | 1 | demo-repeat |" in out
    assert "| this-epyc-avx2-smollm2 | 1 | copy-report |" not in out
    assert "of the hindsight-best" in out
    assert "before this machine's batches were timed" in out


@pytest.mark.parametrize(
    ("old", "flag"),
    [
        (["--replay"], "--replay"),
        (["--python-scale", "1"], "--python-scale"),
        (["--cost-curve", "--curve-name", "x"], "--cost-curve"),
        (["--standin", "qwen2.5-7b"], "--standin"),
        (["--model", "default", "--record-traces"], "--record-traces"),
    ],
)
def test_the_replay_flags_tandem_bench_had_are_unknown_options(
    old: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # They are the lab's (`python -m tools.lab.replay`): one line naming the flag, no usage, exit 2.
    assert main(["bench", *old]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: unknown option '{flag}' for bench (see tandem help bench)"]


def test_bench_help_is_the_users_bench_and_the_dev_commands_are_the_labs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    bench_help = " ".join(capsys.readouterr().out.split())
    assert "--max-tokens" in bench_help
    for flag in (
        "--replay",
        "--cost-curve",
        "--record-traces",
        "--standin",
        "--curves",
        "--python-scale",
        "dev",
    ):
        assert flag not in bench_help
    for old in (["bench", "dev", "replay"], ["bench", "dev", "cost-curve"]):
        with pytest.raises(SystemExit) as ended:
            main(old)
        assert ended.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        # The parser's usual usage mistake: its usage, then one `error:` line naming the arguments.
        assert [line for line in err if line.startswith("error: ")] == [
            f"error: unrecognized arguments: {' '.join(old[1:])}"
        ]
        assert err[-1].startswith("error: ")
    with pytest.raises(SystemExit):
        lab_replay(["--help"])
    lab_help = capsys.readouterr().out
    assert all(command in lab_help for command in ("replay", "cost-curve", "record-traces"))


def test_where_a_row_costs_half_a_plain_step_no_reply_ends_much_slower_than_plain() -> None:
    # SmolLM2-135M: its replies to the demo tasks, documents, edit requests (many copy a stretch,
    # then depart from it) and questions about documents (short answers), on its curves of this
    # EPYC and the Xeon. Long copy drafts priced well by acceptance, rejected after 2-3 tokens, made
    # short replies 0.85x plain before a draft could risk no more than its reply's drafts had
    # saved; a first phrase guessed 11 tokens into a 19-token answer, 0.92x before a short match
    # past a reply's first tokens risked a 1-token draft until drafts saved time (issue 48: no
    # reply under 0.95x).
    folder = REPLAY / "smollm2"
    traces = [t for t in load_traces(folder / "traces") if not t.name.startswith("long-")]
    warm = next(t for t in traces if t.name == "warm-up")
    speedups = []
    for curve in load_curves(folder / "curves"):
        _, seeded = replay(warm, curve)
        for seed in (seeded.export(), calibrated(seeded.export(), curve)):  # and after an idle moment
            speedups += [replay(t, curve, seed)[0].speedup for t in traces if t is not warm]
    assert len(speedups) == 2 * 4 * 21
    assert min(speedups) >= 0.95, sorted(speedups)[:5]
    assert sorted(speedups)[len(speedups) // 2] >= 1.1  # and most still gain


# Each real-size curve's median share of the hindsight-best as replayed on 2026-12-06 late (Python
# x1), less a point: a floor, so a change that loses on a curve fails here. Issue 39's target, 90%
# on every curve, is not reached (0.5B, 1.5B and 3B on AVX-512, 3B on AVX2); within the risk limit
# no policy reaches 90% on the AVX-512 1.5B curve (89.2%, tools/lab/replay_risk_bound.py). The
# figures themselves: `python -m tools.lab.replay replay` (docs/design-engine.md, "Where it stands").
STANDIN_FLOORS = {
    "this-epyc-avx2-qwen2.5-0.5b-q4_k_m": 0.927,
    "this-epyc-avx2-qwen2.5-1.5b-q4_k_m": 0.912,
    "this-epyc-avx2-qwen2.5-3b-q4_k_m": 0.878,
    "this-epyc-avx2-qwen2.5-7b-q4_k_m": 0.905,
    "this-epyc-avx2-qwen2.5-14b-q4_k_m": 0.917,
    "this-epyc-avx512-qwen2.5-0.5b-q4_k_m": 0.874,
    "this-epyc-avx512-qwen2.5-1.5b-q4_k_m": 0.833,
    "this-epyc-avx512-qwen2.5-3b-q4_k_m": 0.870,
    "this-epyc-avx512-qwen2.5-7b-q4_k_m": 0.904,
    "this-epyc-avx512-qwen2.5-14b-q4_k_m": 0.912,
}


def test_the_controller_holds_on_real_size_curves_of_stand_ins() -> None:
    # Qwen2.5 0.5B-14B shapes (stand-ins, random weights) timed on this EPYC at every batch size
    # 1-64 (`python -m tools.lab.replay cost-curve --standin`), both builds, against the kept copy traces
    # (the held-out ones among them): what drafting offers does not depend on the model's size,
    # what a batch costs does. (Was a strict xfail on issue 39's 90%: a report cannot XPASS.)
    import statistics

    from tools.lab.replay import run_replay, standin_set

    found = standin_set()
    assert found is not None
    _, curves_dir, traces_dir = found
    curves = load_curves(curves_dir)
    assert {c.name for c in curves} == set(STANDIN_FLOORS)
    traces = load_traces(traces_dir)
    rows = run_replay(curves, traces, (1.0,))
    below_target = []
    for curve in curves:
        shares = [r.share for r in rows if r.curve == curve.name]
        assert len(shares) == len(traces) - 1, curve.name  # every trace but the warm-up
        median = statistics.median(shares)
        assert median >= STANDIN_FLOORS[curve.name], (curve.name, shares)
        if median < 0.9:
            below_target.append(curve.name)
    assert len(below_target) <= 4, below_target  # issue 39's 90%: four curves short of it today


def chat_short_copy(restarts: bool) -> Trace:
    """The held-out prose prompt as a chat (Gemma 3's turn tokens around it), answered by a copy of
    one sentence, 17 tokens, then the end of the turn. restarts: the reply first repeats the
    prompt's last line (which the user's turn ends with, then the turn's end: two equal matches,
    the later one wrong at the line's end) and copies on from there; else it copies on at once."""
    held = next(t for t in load_traces(REPLAY / "traces") if t.name == "held-copy-prose")
    bos, start, end, newline, user, model = 2, 105, 106, 107, 2364, 4368
    prompt = (bos, start, user, newline, *held.prompt[1:], end, newline, start, model, newline)
    last_line = held.prompt[len(held.prompt) - held.prompt[::-1].index(newline) :]
    reply = (*last_line, *held.reply)[:17] if restarts else held.reply[:17]
    return Trace("chat-short-copy", prompt, (*reply, end))


@pytest.mark.parametrize("restarts", [False, True])
def test_a_short_copy_in_a_chat_is_drafted_from_its_first_tokens_on_every_kept_curve(restarts: bool) -> None:
    # Issue 48: Gemma 3 270M answering the held-out prose prompt as a chat copies one sentence,
    # 17 tokens; fe57681 drafted 11 and kept 7, later code drafted 3 and kept 0. Replayed, a reply
    # that echoes the prompt's last line first breaks its copy once at the line's end, in the red:
    # a draft was then held to one token, which a CPU's second row never repays, for the rest of
    # the reply (this EPYC's AVX2 curve: 3 tokens kept). A copy that agrees again earns back what
    # the break halved (engine.copies.CopySurvival.observe).
    trace = chat_short_copy(restarts)
    curves = load_curves(REPLAY / "curves") + load_curves(REPLAY / "standins" / "curves")
    warm_trace = next(t for t in load_traces(REPLAY / "traces") if t.name == "warm-up")
    for curve in curves:
        _, warm = replay(warm_trace, curve)
        for seed in (None, warm.export(), calibrated(warm.export(), curve)):
            result, _ = replay(trace, curve, seed)
            kept = sum(a for _, a in result.steps)
            assert kept >= 7, (curve.name, result.steps)


def test_a_short_copy_is_drafted_after_a_busy_moment_priced_the_batches_it_drafted() -> None:
    # Issue 48: the short copy drafted 3 and kept 0 (generate), 0 (serve). On a shared machine (the
    # lab's noisy replay: each step's time scaled by exp(N(0, 0.3)), one in 50 stalled 3x) a first
    # reply times each size it drafts once; a stalled one priced that size out, nothing timed it again,
    # and the next reply, seeded from those costs as the cost cache and a server's next reply are,
    # was offered the copy at every step and drafted none: 0 kept at worst on 16 of the 17 kept
    # curves, at the median on two. A copy held back times its first draft again (_retime_copy).
    trace = chat_short_copy(restarts=False)
    for curve in load_curves(REPLAY / "curves") + load_curves(REPLAY / "standins" / "curves"):
        kept = []
        for seed in range(20):
            _, first = noisy_replay(trace, curve, None, 0.3, seed)
            result, _ = noisy_replay(trace, curve, first.export(), 0.3, 100 + seed)
            kept.append(sum(a for _, a in result.steps))
        assert min(kept) >= 4 and sorted(kept)[len(kept) // 2] >= 7, (curve.name, kept)


def test_a_folder_used_by_mixed_work_copies_within_3_percent_of_a_clean_one() -> None:
    # Issue 48, Why 3: departures carried from mixed work and a Python copy whose copies broke price
    # a later pure copy as likely to break. tools/lab/replay_used_folder.py chains them as the cost
    # cache does (Gemma's own greedy replies to the mixed set) on this EPYC's curves.
    from tools.lab.replay_used_folder import mixed_traces, used_seed

    kept = {t.name: t for t in load_traces(REPLAY / "traces")}
    mixed = mixed_traces()
    assert sorted(t.name for t in mixed) == ["mixed-html", "mixed-table"]
    assert all(len(t.reply) == 256 for t in mixed)  # whole 256-token replies, as the bench asks
    for curve in (c for c in load_curves(REPLAY / "curves") if c.name.startswith("this-epyc")):
        _, warm = replay(kept["warm-up"], curve)
        clean = calibrated(warm.export(), curve)
        used = calibrated(used_seed(curve, [*mixed, kept["held-copy-python"]], kept["warm-up"]), curve)
        assert used["departures"] != clean["departures"]  # the folder did learn from them
        for name in ("held-copy-prose", "copy-report"):
            fresh, _ = replay(kept[name], curve, clean)
            after, _ = replay(kept[name], curve, used)
            assert fresh.decode_s / after.decode_s >= 0.97, (curve.name, name)


def test_a_folder_whose_copies_kept_breaking_still_copies_within_3_percent_of_a_clean_one() -> None:
    # The departures a real folder held after mixed work on this EPYC (issue 48: 2 breaks in 1.2 of
    # exposure) priced later pure copies as likely to break: 0.93x of a clean folder's speed on the
    # 3B AVX2 stand-in's curve. Carried, they price copies at alpha 1 at worst (DEPART_CARRIED_ALPHA).
    kept = {t.name: t for t in load_traces(REPLAY / "traces")}
    curves = load_curves(REPLAY / "curves") + load_curves(REPLAY / "standins" / "curves")
    for curve in curves:
        _, warm = replay(kept["warm-up"], curve)
        clean = calibrated(warm.export(), curve)
        used = {**clean, "departures": [2.0, 1.2]}
        for name in ("held-copy-prose", "copy-report"):
            fresh, _ = replay(kept[name], curve, clean)
            after, _ = replay(kept[name], curve, used)
            assert fresh.decode_s / after.decode_s >= 0.97, (curve.name, name)


def test_a_cost_curve_times_every_batch_size_a_draft_can_take(tiny_target: Path, tmp_path: Path) -> None:
    # Sampled at tiles only (1, 2, 3, 4, 6, 8, 12, ... 64) and read linearly between them, a curve
    # priced every size like a tile, where sizes between tiles cost more (AVX-512, this EPYC:
    # 15 rows 85 ms, 16 rows 73): the replay's hindsight-best could not use the difference.
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"name": "loop", "set": "copy", "prompt": "abc abc abc abc abc"}) + "\n")
    out = tmp_path / "curve.json"
    r = lab("replay", "cost-curve", "--model", str(tiny_target), "--prompts", str(prompts),
            "--max-tokens", "32", "--curve-name", "tiny", "--threads", "1", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    curve = json.loads(out.read_text())
    assert curve["name"] == "tiny" and sorted(int(n) for n in curve["t_ms"]) == list(range(1, 65))
    assert all(ms > 0 for ms in curve["t_ms"].values()) and "every batch size 1-64" in curve["source"]
