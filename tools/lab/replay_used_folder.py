"""A used data folder against a clean one, replayed: mixed work and the Python copy before a pure
copy (issue 48, Why 3). What earlier replies leave in the cost cache (their copies' departures,
acceptance) prices the next reply's copies; a folder warmed by mixed work should copy within a
few percent of a clean one.

The chain: the kept warm-up trace, then the bench's mixed set (a CSV written as a Markdown table,
a reading list as HTML: Gemma's own greedy replies, kept in resources/replay/mixed), then the kept
Python copy; each reply's controller export seeds the next, as the cost cache does between
processes. Then each pure copy (the kept held-out prose and copy-report traces) from the used folder and from the
warm-up alone, both with the idle calibration (engine.replay.calibrated).

    python -m tools.lab.replay_used_folder                  # every kept Gemma and stand-in curve
    python -m tools.lab.replay_used_folder --departures 2,1.2   # a folder's departures as measured
"""

from __future__ import annotations

import argparse
import statistics

from engine.replay import CostCurve, Trace, calibrated, load_traces, replay
from tools.lab.replay import load_curves, replay_dir


def mixed_traces() -> list[Trace]:
    """The bench's mixed set as Gemma 3 270M Q4_K_M answered it (greedy, 256 tokens), recorded by
    `python -m tools.lab.replay record-traces --sets mixed --out resources/replay/mixed`."""
    return load_traces(replay_dir() / "mixed")


def used_seed(curve: CostCurve, before: list[Trace], warm: Trace) -> dict[str, object]:
    """What the folder holds after the warm-up and `before`, one process each."""
    _, controller = replay(warm, curve)
    seed = controller.export()
    for trace in before:
        _, controller = replay(trace, curve, seed)
        seed = controller.export()
    return seed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--departures", help="breaks,exposure: set the used folder's departures to these")
    args = parser.parse_args()
    kept = {t.name: t for t in load_traces(replay_dir() / "traces")}
    curves = load_curves(replay_dir() / "curves") + load_curves(replay_dir() / "standins" / "curves")
    before = [*mixed_traces(), kept["held-copy-python"]]
    ratios = []
    for curve in curves:
        _, warm = replay(kept["warm-up"], curve)
        clean = calibrated(warm.export(), curve)
        used = used_seed(curve, before, kept["warm-up"])
        if args.departures:
            used["departures"] = [float(x) for x in args.departures.split(",")]
        used = calibrated(used, curve)
        cells = []
        for name in ("held-copy-prose", "copy-report"):
            a, _ = replay(kept[name], curve, clean)
            b, _ = replay(kept[name], curve, used)
            ratios.append(a.decode_s / b.decode_s)
            cells.append(f"{name} x{a.decode_s / b.decode_s:.3f} ({len(a.steps)} -> {len(b.steps)} steps)")
        print(f"{curve.name:40s} departures {used['departures']}  " + "  ".join(cells))
    print(
        f"used folder's copy speed against a clean one: median x{statistics.median(ratios):.3f}, lowest x{min(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
