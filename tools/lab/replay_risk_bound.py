"""The best any policy bound by the per-reply risk limit could do on a kept trace and cost curve,
knowing what each offer will have accepted: how much of the gap to the hindsight-best (tools/lab/replay.py)
the limit itself takes, whatever the controller does within it.

The risk limit (engine.reply_budget.ReplyBudget.risk_limit) lets a step draft k tokens only
where t(k + 1) - t(1), its loss were the draft rejected at its first token, is within what the
reply's drafts have saved so far (sum of (accepted + 1)·t(1) - t(rows) over its drafting steps)
plus what a first 4-token draft risks, t(5) - t(1); a copy's tokens that this reply's own copies
say are sure (`engine.copies.Departures.sure_run`) count as emitted in that loss. A forward dynamic programme
over positions keeps, at each, the states (time so far, savings so far) that no other state beats
on both; of the reply's copies so far, each position keeps the record that allows the most (the
fewest departures, the longest agreement), so the limit it applies is never tighter than the
controller's: what it returns is still a bound.

    python -m tools.lab.replay_risk_bound                    # every kept Gemma curve, Python x1 and x3.5
    python -m tools.lab.replay_risk_bound epyc-slow-avx2     # some of them
    python -m tools.lab.replay_risk_bound --set smollm2      # SmolLM2's replies on its curves
    python -m tools.lab.replay_risk_bound --set standins     # the real-size curves, on the copy traces
"""

from __future__ import annotations

import argparse
import math
import statistics

from engine.copies import RISK_DOUBT, RISK_PRIOR, RISK_PRIOR_EXPOSURE, Departures
from engine.replay import K_MAX, CostCurve, Trace, load_traces
from engine.reply_budget import RAMP_FIRST as FIRST_DRAFT  # a reply's allowance before it saves anything
from tools.lab.replay import PYTHON_SCALES, hindsight_best, load_curves, offers, replay_dir, slower_python


def _pareto(states: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(elapsed, saved) states no other beats on both: less time so far, more saved."""
    kept: list[tuple[float, float]] = []
    best_saved = float("-inf")
    for elapsed, saved in sorted(states, key=lambda s: (s[0], -s[1])):
        if saved > best_saved + 1e-9:
            kept.append((elapsed, saved))
            best_saved = saved
    return kept


def risk_limited_best(trace: Trace, curve: CostCurve) -> float:
    """The least decode time of any choice of draft lengths that obeys the risk limit."""
    held = offers(trace, K_MAX)
    n = len(trace.reply)
    step = [curve.step_s(rows) for rows in range(K_MAX + 2)]
    t1 = step[1]
    loss = [step[k + 1] - t1 for k in range(K_MAX + 1)]
    base = loss[FIRST_DRAFT]
    frontier: list[list[tuple[float, float]]] = [[] for _ in range(n + 1)]
    frontier[0] = [(0.0, 0.0)]
    # The reply's copies so far, the most allowing record reaching each position: (departures,
    # log-length agreed beyond the prior).
    record: list[tuple[float, float] | None] = [None] * (n + 1)
    record[0] = (0.0, 0.0)

    def reach(pos: int, breaks: float, exposure: float) -> None:
        old = record[pos]
        record[pos] = (breaks, exposure) if old is None else (min(old[0], breaks), max(old[1], exposure))

    for pos in range(n):
        states = _pareto(frontier[pos])
        available, matched, age = held[pos]
        breaks, exposure = record[pos] or (0.0, 0.0)
        reach(pos + 1, breaks, exposure)  # a plain step
        sure = 0
        if age > 0:
            mine = Departures(RISK_PRIOR + breaks, RISK_PRIOR_EXPOSURE + exposure)
            sure = int(min(K_MAX, mine.sure_run(age, RISK_DOUBT)))
        for k in range(1, available + 1):
            a = min(k, matched)
            end = min(n, pos + a + 1)
            if age > 0:
                reach(end, breaks + (a < k), exposure + math.log1p(a / (age + 1)))
            else:
                reach(end, breaks, exposure)
        for elapsed, saved in states:
            allowed = max(saved, 0.0) + base
            frontier[pos + 1].append((elapsed + t1, saved))  # a plain step
            for k in range(1, available + 1):
                if loss[k] - min(k, sure) * t1 > allowed + 1e-12:
                    continue
                a = min(k, matched)
                frontier[min(n, pos + a + 1)].append(
                    (elapsed + step[k + 1], saved + (a + 1) * t1 - step[k + 1])
                )
    return min(elapsed for elapsed, _ in frontier[n])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("curves", nargs="*", help="curve names (default: every kept curve of the set)")
    parser.add_argument(
        "--set", default="", help="a kept set under resources/replay (smollm2, standins); default Gemma's"
    )
    args = parser.parse_args(argv)
    folder = replay_dir() / args.set if args.set else replay_dir()
    curves = [c for c in load_curves(folder / "curves") if not args.curves or c.name in args.curves]
    # A set of curves alone (standins) is replayed on the copy traces, as `python -m tools.lab.replay replay` does.
    traces_dir = folder / "traces" if (folder / "traces").is_dir() else replay_dir() / "traces"
    traces = [t for t in load_traces(traces_dir) if t.name != "warm-up"]
    print("| curve | Python x | risk-limited best of the hindsight-best, per prompt | median |")
    print("|---|---|---|---|")
    for curve in curves:
        for scale in PYTHON_SCALES:
            slower = slower_python(curve, scale)
            shares = {t.name: hindsight_best(t, slower) / risk_limited_best(t, slower) for t in traces}
            cells = ", ".join(f"{name} {100 * s:.1f}%" for name, s in shares.items())
            print(f"| {curve.name} | {scale:g} | {cells} | {100 * statistics.median(shares.values()):.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
