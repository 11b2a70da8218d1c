"""What the HTTP path costs: `tandem serve` against the same work in this process.

Runs one prompt through `tandem serve` (streamed by the real `openai` client, as another program
on this machine would) and through an in-process Engine with the same configuration and the same
cost cache, alternating, plain and with speculation. Prints per mode: the whole request (first
byte sent to last byte read), the time to the first streamed token, the decode rate each side
measured itself, and whether both produced the same text.

    .venv/bin/python -m tools.lab.http_bench                      # the embedded model, n-gram, 256 tokens
    .venv/bin/python -m tools.lab.http_bench --reps 5 --max-tokens 512

A benchmark: run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "resources" / "bench_prompts.jsonl"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prompt(name: str) -> str:
    for line in PROMPTS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["name"] == name:
            return str(row["prompt"])
    raise SystemExit(f"error: no prompt named {name} in {PROMPTS}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--draft", default="ngram")
    ap.add_argument(
        "--prompt", default="copy-report", help="a prompt's name in resources/bench_prompts.jsonl"
    )
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)

    # One fresh data folder for both sides: the same (empty, then shared) cost cache.
    home = tempfile.mkdtemp(prefix="tandem-http-bench-")
    os.environ["TANDEM_HOME"] = home
    from openai import OpenAI

    from app.cli.cli import build_parser
    from app.cli.options import engine_config
    from engine.config import SamplingParams
    from engine.events import Finished, TextPiece
    from engine.session import Engine

    engine_args = ["--model", args.model, "--draft", args.draft, "--threads", str(args.threads)]
    config = engine_config(build_parser().parse_args(["generate", *engine_args, "--prompt", "x"]))
    prompt = _prompt(args.prompt)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "app.main", "serve", *engine_args, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        deadline = time.monotonic() + 300
        while True:
            try:
                name = client.models.list().data[0].id
                break
            except Exception:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("error: tandem serve did not start") from None
                time.sleep(0.2)
        engine = Engine(config)

        def http(spec: str) -> tuple[float, float, float, str]:
            t0 = time.perf_counter()
            first, parts, rate = None, [], 0.0
            stream = client.completions.create(
                model=name, prompt=prompt, max_tokens=args.max_tokens, temperature=0, stream=True,
                extra_body={"speculation": spec},
            )  # fmt: skip
            for chunk in stream:
                if chunk.choices and chunk.choices[0].text:
                    first = first or time.perf_counter()
                    parts.append(chunk.choices[0].text)
                timings = (chunk.model_extra or {}).get("timings")
                if timings:
                    rate = float(timings["predicted_per_second"])
            end = time.perf_counter()
            return end - t0, (first or end) - t0, rate, "".join(parts)

        def local(spec: str) -> tuple[float, float, float, str]:
            t0 = time.perf_counter()
            first, done = None, None
            for event in engine.generate(
                prompt, SamplingParams(), max_tokens=args.max_tokens, speculate=spec == "on"
            ):
                if isinstance(event, TextPiece) and event.text:
                    first = first or time.perf_counter()
                elif isinstance(event, Finished):
                    done = event
            end = time.perf_counter()
            assert done is not None
            return end - t0, (first or end) - t0, done.stats.decode_tokens_per_s, done.text

        for spec in ("off", "on"):  # warm both sides: models in memory, prompt in the KV cache
            http(spec)
            local(spec)
        runs: dict[tuple[str, str], list[tuple[float, float, float, str]]] = {}
        for rep in range(args.reps):
            for spec in ("off", "on"):
                order = (("http", http), ("in-process", local))
                for kind, fn in order if rep % 2 == 0 else order[::-1]:
                    runs.setdefault((kind, spec), []).append(fn(spec))
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)

    print(f"{config.target_path}, draft {args.draft}, prompt {args.prompt}, {args.max_tokens} tokens greedy, "
          f"{args.threads} threads, median of {args.reps} alternating runs")  # fmt: skip
    print(
        "| speculation | whole request http / in-process | ratio | first token http / in-process "
        "| decode tok/s http / in-process | same text |"
    )
    print("|---|---|---|---|---|---|")
    for spec in ("off", "on"):
        h, l_ = runs[("http", spec)], runs[("in-process", spec)]
        hw, lw = statistics.median(r[0] for r in h), statistics.median(r[0] for r in l_)
        ht, lt = statistics.median(r[1] for r in h), statistics.median(r[1] for r in l_)
        hr, lr = statistics.median(r[2] for r in h), statistics.median(r[2] for r in l_)
        same = all(r[3] == l_[0][3] for r in h + l_)
        print(f"| {spec} | {hw:.3f} s / {lw:.3f} s | {hw / lw:.3f} | {ht * 1000:.0f} ms / {lt * 1000:.0f} ms "
              f"| {hr:.1f} / {lr:.1f} | {'yes' if same else 'NO'} |")  # fmt: skip
    print("Same text: every run of a mode, both sides. With speculation on a quantized target it may differ where "
          "the two best logits nearly tie (batched rows round differently: docs/findings.md).")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
