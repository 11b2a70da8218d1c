"""SmolLM2's replies replayed with a shared machine's timing noise: how many end slower than plain.

`tests/integration/test_replay.py` guards SmolLM2's slowest reply without noise (the test's 102 replays: 17
replies, 3 curves, the warm-up's seed before and after the app times the batches). That minimum is
one reply's luck: a change that moves which batch sizes the warm-up timed moves it by 0.02x. This
replays the same replies under the lab's noise (tools.lab.replay.noisy_replay: each step's time
scaled by exp(N(0, 0.08)), one step in 50 stalled 3x) for 5 seeds besides the noiseless run, 612 replays in all, and prints
the share of them under 0.95x and 0.97x plain, the 1st and 5th percentiles and the median: figures
two versions of the controller can be compared by.

    python -m tools.lab.replay_guard_noise
"""

from __future__ import annotations

import numpy as np

from engine.replay import calibrated, load_traces
from tools.lab.replay import load_curves, noisy_replay, replay_sets

NOISE = 0.08
SEEDS = 5


def speedups() -> list[float]:
    folder = dict(replay_sets())["smollm2"]
    traces = load_traces(folder / "traces")
    warm = next(t for t in traces if t.name == "warm-up")
    out = []
    for curve in load_curves(folder / "curves"):
        for run in range(SEEDS + 1):
            noise = NOISE if run else 0.0
            _, seeded = noisy_replay(warm, curve, None, noise, 100 + run)
            for seed in (seeded.export(), calibrated(seeded.export(), curve)):
                for trace in traces:
                    if trace is not warm:
                        out.append(noisy_replay(trace, curve, seed, noise, run)[0].speedup)
    return out


def main() -> int:
    a = np.array(sorted(speedups()))
    print(
        f"{a.size} replies: under 0.95x {(a < 0.95).sum()}, under 0.97x {(a < 0.97).sum()}; "
        f"lowest {a[0]:.3f}x, 1st percentile {np.percentile(a, 1):.3f}x, 5th {np.percentile(a, 5):.3f}x, "
        f"median {np.median(a):.3f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
