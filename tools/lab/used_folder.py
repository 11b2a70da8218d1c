"""A data folder used by mixed work, then a copy, against a clean folder's copy: real processes.

    python -m tools.lab.used_folder [REPEATS]

Issue 48's target: a folder warmed by mixed work then a copy copies within 3% of a clean folder's
copy speed. tools/lab/replay_used_folder.py replays it on recorded curves; this runs it. Both
folders get what `tandem bench` leaves before its warmed runs (tools.lab.trace_reply.warm); the
used one then answers the mixed set and the Python copy (256 tokens, n-gram drafts), whose breaks
it carries. Each copy prompt is then generated in both folders, alternately, REPEATS times (3), the
cost cache restored after each run so every run starts from the same state. Prints decode tok/s
(tokens over decode seconds, as `tandem generate --json` reports them) and the used/clean ratio
of the medians. Time it with nothing else running.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.lab.trace_reply import MODEL, _prompt, costs_kept, warm

MIXED_WORK = ("mixed-table", "mixed-html", "held-copy-python")
COPIES = ("held-copy-prose", "copy-report")
MAX_TOKENS = 256


def generate(home: Path, name: str) -> dict[str, object]:
    prompt = home.parent / f"{home.name}-{name}.txt"
    prompt.write_text(_prompt(name), encoding="utf-8")
    argv = [sys.executable, "-m", "app.main", "generate", "--model", MODEL, "--draft", "ngram"]
    argv += ["--prompt-file", str(prompt), "--max-tokens", str(MAX_TOKENS), "--json"]
    out = subprocess.run(
        argv, check=True, capture_output=True, text=True, env={**os.environ, "TANDEM_HOME": str(home)}
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measured(home: Path, name: str) -> float:
    """One run's decode tok/s, the folder's cost cache as it was before."""
    with costs_kept(home):
        r = generate(home, name)
    return float(r["n_generated"]) / float(r["decode_s"])  # type: ignore[arg-type]


def main(repeats: int = 3) -> None:
    root = Path(tempfile.mkdtemp(prefix="tandem-used-"))
    clean, used = root / "clean", root / "used"
    for home in (clean, used):
        home.mkdir()
        warm(str(home))
    for name in MIXED_WORK:
        r = generate(used, name)
        print(
            f"used folder: {name} {r['n_generated']} tokens, {r['n_accepted']} of {r['n_drafted']} drafted kept"
        )
    print("| prompt | clean tok/s | used tok/s | used / clean |\n|---|---|---|---|")
    for name in COPIES:
        speeds: dict[Path, list[float]] = {clean: [], used: []}
        for _ in range(repeats):
            for home in (clean, used):
                speeds[home].append(measured(home, name))
        c, u = statistics.median(speeds[clean]), statistics.median(speeds[used])
        runs = " / ".join(f"{s:.1f}" for s in speeds[clean]), " / ".join(f"{s:.1f}" for s in speeds[used])
        print(f"| {name} | {c:.1f} ({runs[0]}) | {u:.1f} ({runs[1]}) | x{u / c:.3f} |")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
