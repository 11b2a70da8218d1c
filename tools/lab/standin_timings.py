"""Issue 39's timings on this machine, in one run: a 7B pair measured on stand-ins the quick way
(the pair doctor's `--measure`: its wall time, the disk it held, what it says), then each
Qwen2.5 shape's full curve (every batch size 1-64, `python -m tools.lab.replay cost-curve
--standin`) kept in resources/replay/standins/curves, and the quick figures against the 7B's full
curve.

    nice -n -15 .venv/bin/python -m tools.lab.standin_timings [--shapes qwen2.5-7b,qwen2.5-0.5b,...]
        [--build avx512] [--skip-quick] [--out /tmp/standin-timings.json]

Run only when the machine is quiet: every number is a timing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def quick_pair(pair: str = "qwen2.5-7b-0.5b") -> dict[str, object]:
    """`tandem models check --pair PAIR --measure --json` as a user runs it: its wall time, the
    disk it held (sampled every 0.2 s), its progress lines and figures."""
    import subprocess

    from app.library import standin

    folder = standin.standins_dir()
    peak = [0]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.2):
            peak[0] = max(peak[0], folder_bytes(folder))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    lines: list[tuple[float, str]] = []
    process = subprocess.Popen(
        [sys.executable, "-m", "app.main", "models", "check", "--pair", pair, "--measure", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None and process.stdout is not None
    for line in process.stderr:
        lines.append((round(time.perf_counter() - t0, 2), line.rstrip()))
    out = process.stdout.read()
    process.wait()
    wall_s = time.perf_counter() - t0
    stop.set()
    watcher.join()
    here = json.loads(out)["here"]
    return {
        "command": f"tandem models check --pair {pair} --measure --json",
        "exit": process.returncode,
        "wall_s": round(wall_s, 1),
        "progress_lines": len(lines),
        "first_last_progress": [lines[0], lines[-1]] if lines else [],
        "peak_disk_bytes": peak[0],
        "left_after_bytes": folder_bytes(folder),
        "t_ms": here["target_t_ms"],
        "draft_t1_ms": here["draft_t_ms"]["1"],  # JSON keys are strings
        "plain_tokens_per_s": here["plain_tokens_per_s"],
        "ceiling": here["ngram_ceiling"],
        "copy_speedup": here["copy_speedup"],
        "draft_speedup": here["draft"]["speedup"],
        "draft_len": here["draft"]["draft_len"],
        "draft_pays": here["draft"]["pays"],
    }


def cancel_trial(shape: str, quant: str, after_s: float = 2.0) -> dict[str, object]:
    """Cancel a measurement of a real-size stand-in `after_s` into its timing: how long until
    measure_pair returns, and what is left on disk."""
    from app.library import measure, measure_run, standin
    from tools.lab.shapes import KNOWN_SHAPES, plan_from_shape

    plan = plan_from_shape(shape, KNOWN_SHAPES[shape], quant)
    cancel = threading.Event()
    timing = threading.Event()
    took: list[float] = []

    def progress(p: measure.MeasureProgress) -> None:
        if p.stage == "time":
            timing.set()

    def work() -> None:
        try:
            measure_run.measure_pair((shape, plan), cancel=cancel, on_progress=progress, save=False)
        except measure.MeasureCancelled:
            took.append(time.perf_counter())

    thread = threading.Thread(target=work)
    thread.start()
    timing.wait(300)
    time.sleep(after_s)
    t0 = time.perf_counter()
    cancel.set()
    thread.join(30)
    return {
        "shape": f"{shape}:{quant}",
        "cancel_to_return_s": round(took[0] - t0, 3) if took else None,
        "left_after_bytes": folder_bytes(standin.standins_dir()),
    }


def full_curve(shape: str, quant: str, name: str) -> dict[str, object]:
    from tools.lab.replay import main

    t0 = time.perf_counter()
    code = main(["cost-curve", "--standin", f"{shape}:{quant}", "--curve-name", name])
    return {"shape": shape, "exit": code, "wall_s": round(time.perf_counter() - t0, 1)}


def compare(quick: dict[str, object], curve_path: Path) -> dict[str, object]:
    from app.library import measure
    from tools.lab.replay import load_curve

    curve = load_curve(curve_path)
    full = measure.MeasuredCosts("full", curve.t_ms, 0, "", "", 0)
    draft = measure.MeasuredCosts("draft", {1: float(quick["draft_t1_ms"])}, 0, "", "", 0)  # type: ignore[arg-type]
    v = measure.draft_verdict(full, draft)
    figures = {
        "plain_tokens_per_s": (quick["plain_tokens_per_s"], full.plain_tokens_per_s),
        "ceiling": (quick["ceiling"], full.ceiling),
        "copy_speedup": (quick["copy_speedup"], measure.copy_speedup(full)),
        "draft_speedup": (quick["draft_speedup"], v.speedup),
    }
    return {
        k: {"quick": a, "full": b, "off_by": round(float(a) / float(b) - 1, 4)}  # type: ignore[arg-type]
        for k, (a, b) in figures.items()
    } | {"draft_pays": (quick["draft_pays"], v.pays)}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="qwen2.5-7b,qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-3b,qwen2.5-14b")
    p.add_argument("--quant", default="Q4_K_M")
    p.add_argument("--build", default="avx512")
    p.add_argument("--skip-quick", action="store_true")
    p.add_argument("--deadline", default="", help="HH:MM UTC: start no curve after it")
    p.add_argument("--out", default="/tmp/standin-timings.json")
    args = p.parse_args()
    import os

    home = tempfile.mkdtemp(prefix="standin-timings-")
    os.environ["TANDEM_HOME"] = home  # nothing of the user's is touched
    out: dict[str, object] = {"started": time.strftime("%H:%M:%S", time.gmtime())}

    def save() -> None:
        Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")

    try:
        if not args.skip_quick:
            out["quick"] = quick_pair("qwen2.5-7b-0.5b")
            save()
            print(json.dumps(out["quick"], default=str), flush=True)
            out["cancel"] = cancel_trial("qwen2.5-7b", "Q4_K_M")
            save()
            print(json.dumps(out["cancel"]), flush=True)
        curves = []
        for shape in args.shapes.split(","):
            if args.deadline and time.strftime("%H:%M", time.gmtime()) >= args.deadline:
                curves.append({"shape": shape, "skipped": "past the deadline"})
                continue
            name = f"this-epyc-{args.build}-{shape}-{args.quant.lower()}"
            curves.append(full_curve(shape, args.quant, name))
            out["curves"] = curves
            save()
            print(json.dumps(curves[-1]), flush=True)
            if shape == "qwen2.5-7b" and "quick" in out:
                from tools.lab.replay import STANDIN_SET, replay_dir

                path = replay_dir() / STANDIN_SET / "curves" / f"{name}.json"
                out["quick_vs_full_7b"] = compare(out["quick"], path)  # type: ignore[arg-type]
                save()
                print(json.dumps(out["quick_vs_full_7b"], default=str), flush=True)
    finally:
        out["ended"] = time.strftime("%H:%M:%S", time.gmtime())
        save()
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
