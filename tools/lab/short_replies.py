"""Whole `tandem generate` processes, plain against n-gram drafts, timed from outside: does a reply
(a short one of open text above all) ever end slower than plain decoding? Optionally against the
same drafts from another copy of the code (a before/after A/B), every variant alternating.

    python -m tools.lab.short_replies [--state first|warm] [--warm-home HOME] [--base DIR]
        [--rounds 2] [--max-tokens 32] PROMPT_NAME...

--state first: every process gets an empty data folder (a first use on a new machine: nothing
timed or learned); warm: a copy of HOME (`python -m tools.lab.trace_reply warm HOME` makes one),
its models folder linked. --base DIR: a checkout of the code to compare (`git archive REV | tar
-x -C DIR`), run with this interpreter from DIR. Run it under `flock -x /work/cpu.lock nice -n
-15`. Prompts: the bench's and tools/lab/draft_model_prompts.jsonl's (open-explain, open-list).
Prints every run and, per prompt, the medians: whole seconds, decode tok/s, and whether the
greedy text is plain's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.lab.trace_reply import _prompt

ROOT = Path(__file__).resolve().parents[2]


def _home(state: str, warm_home: Path | None) -> Path:
    home = Path(tempfile.mkdtemp(prefix="tandem-short-"))
    if state == "warm":
        assert warm_home is not None
        for item in warm_home.iterdir():
            if item.name == "models":
                (home / "models").symlink_to(item.resolve())
            elif item.is_dir():
                shutil.copytree(item, home / item.name)
            else:
                shutil.copy2(item, home / item.name)
    return home


def _run(code: Path, draft: str, model: str, prompt_file: Path, max_tokens: int, home: Path) -> dict:
    cmd = [sys.executable, "-m", "app.main", "generate", "--model", model, "--draft", draft]
    cmd += ["--prompt-file", str(prompt_file), "--max-tokens", str(max_tokens), "--json"]
    env = {**os.environ, "TANDEM_HOME": str(home)}
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=code, env=env, check=True, capture_output=True, text=True).stdout
    whole_s = time.perf_counter() - t0
    r = json.loads(out.strip().splitlines()[-1])
    return {
        "whole_s": whole_s,
        "tok_s": r["n_generated"] / r["decode_s"],
        "text": r["text"],
        "drafted": f"{r['n_accepted']}/{r['n_drafted']}",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--state", choices=("first", "warm"), default="first")
    ap.add_argument("--warm-home", type=Path)
    ap.add_argument("--base", type=Path, help="another checkout: its n-gram drafts as a variant")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--model", help="GGUF path (default: the assembled default model)")
    args = ap.parse_args()
    if args.state == "warm" and args.warm_home is None:
        ap.error("--state warm needs --warm-home")
    model = args.model or (
        "default"
        if args.state == "warm"
        else str(Path.home() / ".local/share/Tandem/models/gemma-3-270m-q4_k_m.gguf")
    )
    variants = [("plain", ROOT, "none"), ("ngram", ROOT, "ngram")]
    if args.base is not None:
        variants.append(("base", args.base.resolve(), "ngram"))
    work = Path(tempfile.mkdtemp(prefix="tandem-short-prompts-"))
    runs: dict[tuple[str, str], list[dict]] = {}
    for rnd in range(args.rounds):
        for name in args.prompts:
            prompt_file = work / f"{name}.txt"
            prompt_file.write_text(_prompt(name), encoding="utf-8")
            order = variants[rnd % len(variants) :] + variants[: rnd % len(variants)]  # rotated
            for label, code, draft in order:
                home = _home(args.state, args.warm_home)
                try:
                    r = _run(code, draft, model, prompt_file, args.max_tokens, home)
                finally:
                    shutil.rmtree(home, ignore_errors=True)
                runs.setdefault((name, label), []).append(r)
                print(
                    f"round {rnd} {name:14s} {label:5s} whole {r['whole_s']:.3f} s decode {r['tok_s']:6.1f} tok/s"
                    f" kept/drafted {r['drafted']}",
                    flush=True,
                )
    print(
        f"\nstate {args.state}, {args.max_tokens} tokens, {args.rounds} rounds (medians; whole and decode against plain)"
    )
    for name in args.prompts:
        plain = runs[(name, "plain")]
        pw = statistics.median(r["whole_s"] for r in plain)
        pd = statistics.median(r["tok_s"] for r in plain)
        line = f"{name:14s} plain {pw:.3f} s {pd:6.1f} tok/s"
        for label, _, _ in variants[1:]:
            rs = runs[(name, label)]
            w = statistics.median(r["whole_s"] for r in rs)
            d = statistics.median(r["tok_s"] for r in rs)
            same = all(r["text"] == plain[0]["text"] for r in rs)
            line += f" | {label} {w:.3f} s x{pw / w:.3f} whole, {d:6.1f} tok/s x{d / pd:.2f}, same text {'yes' if same else 'NO'}"
        print(line)
    # Pooled: every run of every prompt, whole seconds summed per round and variant (less noisy
    # than one prompt's median).
    totals = {
        label: [sum(runs[(n, label)][i]["whole_s"] for n in args.prompts) for i in range(args.rounds)]
        for label, _, _ in variants
    }
    plain_total = statistics.median(totals["plain"])
    print(
        "all prompts, whole seconds a round: "
        + ", ".join(
            f"{label} {[round(t, 2) for t in totals[label]]} median {statistics.median(totals[label]):.2f} x{plain_total / statistics.median(totals[label]):.3f}"
            for label, _, _ in variants
        )
    )


if __name__ == "__main__":
    main()
