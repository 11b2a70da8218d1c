"""One `tandem generate` reply with every step traced: what was offered, drafted and kept, the
step's wall time and the controller's limits. Answers "why is this reply slower in this state".

    python -m tools.lab.trace_reply warm HOME                 # a warmed home, as `tandem bench` makes it
    python -m tools.lab.trace_reply run PROMPT_NAME [HOME]    # HOME absent: a first use (empty home)

TRACE_MAX_TOKENS sets the reply's length (256), TRACE_DRAFT the drafter (ngram), TRACE_DRAFT_MAX
the longest draft, TRACE_TEXT=1 prints the reply's text, TRACE_CHAT=1 sends the prompt as a chat
message, TRACE_PROMPTS names a JSONL file of more prompts (the bench's format).

Prints one line a step (match length after the step, drafted, kept, the step's ms and llama.cpp's
part of it, the ramp, what the reply had saved before the step) and the reply's decode tok/s, to
stderr. A warmed HOME's cost cache is restored after the run (the model's path is in its key, so
the home cannot be copied elsewhere).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

MODEL = "default"


def _prompt(name: str) -> str:
    """A bench prompt, or an open one of tools/lab/draft_model_prompts.jsonl (open-explain, open-list)."""
    from app.cli.bench import load_prompts

    prompts = [
        *load_prompts(None, None),
        *load_prompts(str(Path(__file__).with_name("draft_model_prompts.jsonl")), None),
        *(load_prompts(os.environ["TRACE_PROMPTS"], None) if os.environ.get("TRACE_PROMPTS") else []),
    ]
    return next(p.prompt for p in prompts if p.name == name)


def warm(home: str) -> None:
    """What `tandem bench` leaves in its home before its warmed runs."""
    from app.cli.bench import WARM_UP_PROMPT

    os.environ["TANDEM_HOME"] = home
    wd = Path(tempfile.mkdtemp())
    (wd / "w.txt").write_text(WARM_UP_PROMPT, encoding="utf-8")
    base = [
        sys.executable,
        "-m",
        "app.main",
        "generate",
        "--model",
        MODEL,
        "--prompt-file",
        str(wd / "w.txt"),
    ]
    subprocess.run([*base, "--draft", "none", "--max-tokens", "64"], check=True, capture_output=True)
    subprocess.run([*base, "--draft", "ngram", "--max-tokens", "64"], check=True, capture_output=True)
    from app.cli.cli import build_parser
    from app.cli.options import engine_config
    from engine.session import Engine

    args = build_parser().parse_args(["bench", "--model", MODEL])
    engine = Engine(engine_config(args))
    engine.calibrate()
    engine.close()


@contextlib.contextmanager
def costs_kept(home: Path) -> Iterator[None]:
    """A warmed home's cost cache as it was before, after whatever ran inside."""
    saved = Path(tempfile.mkdtemp(prefix="tandem-costs-"))
    shutil.copytree(home / "costs", saved, dirs_exist_ok=True)
    try:
        yield
    finally:
        shutil.rmtree(home / "costs")
        shutil.copytree(saved, home / "costs")
        shutil.rmtree(saved)


def run(name: str, home: str | None, max_tokens: int = 256) -> None:
    from engine import speculative

    tmp = None
    if home is None:
        tmp = home = tempfile.mkdtemp(prefix="tandem-first-")
    os.environ["TANDEM_HOME"] = home
    prompt_file = Path(tempfile.mkdtemp()) / "p.txt"
    prompt_file.write_text(_prompt(name), encoding="utf-8")

    lines: list[str] = []
    orig_step = speculative.SpeculativeDecoder._step
    orig_time = speculative.SpeculativeDecoder._time_first_batches

    def step(self, r):
        c, text = self.policy.controller, self.policy.text
        last_offer[:] = [0, None]
        t0 = time.perf_counter()
        n0, acc0 = r.counters.n_drafted, r.counters.n_accepted
        saved_s = c.budget.saved_s if c else 0.0
        llama0 = self.target.llama_s
        yield from orig_step(self, r)
        llama = self.target.llama_s - llama0
        dt = time.perf_counter() - t0
        k, kept = r.counters.n_drafted - n0, r.counters.n_accepted - acc0
        lines.append(
            f"{r.counters.n_steps:3d} gen={r.counters.n_generated:3d} L={text.match_len if text else 0:4d} "
            f"offer={last_offer[0]:2d} {last_offer[1]} k={k:2d} kept={kept:2d} {dt * 1000:6.1f}ms (llama {llama * 1000:6.1f}) "
            f"ramp={c.budget.ramp if c else 0:2d} saved={saved_s * 1000:6.1f}ms broke={int(c.copies.broke) if c else 0}"
            f"{' probe' if c and c.probes.probing else ''}"
        )

    def time_first(self, prompt, max_tokens, cancel):
        known = sorted(self.policy.controller.costs.low) if self.policy.controller else []
        s = orig_time(self, prompt, max_tokens, cancel)
        lines.append(f"first-batch timing {s * 1000:.0f} ms (sizes known before: {known})")
        return s

    from engine.drafters import NgramDrafter

    orig_offer = NgramDrafter.offer
    last_offer: list[object] = [0, None]

    def offer(self, ctx, k_max, use_memory=True):
        tokens, kind = orig_offer(self, ctx, k_max, use_memory)
        last_offer[:] = [len(tokens), kind.name]
        return tokens, kind

    NgramDrafter.offer = offer  # type: ignore[method-assign]
    speculative.SpeculativeDecoder._step = step  # type: ignore[method-assign]
    speculative.SpeculativeDecoder._time_first_batches = time_first  # type: ignore[method-assign]
    from app.main import main

    argv = [
        "generate",
        "--model",
        MODEL,
        "--draft",
        os.environ.get("TRACE_DRAFT", "ngram"),
        "--prompt-file",
        str(prompt_file),
    ]
    argv += ["--max-tokens", str(max_tokens), "--json"]
    if os.environ.get("TRACE_DRAFT_MAX"):
        argv += ["--draft-max", os.environ["TRACE_DRAFT_MAX"]]
    if os.environ.get("TRACE_CHAT"):
        argv.append("--chat")
    out = io.StringIO()
    try:
        with (
            contextlib.redirect_stdout(out),
            costs_kept(Path(home)) if tmp is None else contextlib.nullcontext(),
        ):
            main(argv)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    r = json.loads(out.getvalue().strip().splitlines()[-1])
    if os.environ.get("TRACE_TEXT"):
        print(r["text"], file=sys.stderr)
    for line in lines:
        print(line, file=sys.stderr)
    print(
        f"{name}: {r['n_generated'] / r['decode_s']:.1f} tok/s decode, prefill {r['prefill_s']:.2f} s, "
        f"load {r['load_s']:.2f} s, {r['n_generated']} tokens, {r['stop_reason']}, {len(lines)} lines",
        file=sys.stderr,
    )


if __name__ == "__main__":
    if sys.argv[1] == "warm":
        warm(sys.argv[2])
    else:
        run(
            sys.argv[2],
            sys.argv[3] if len(sys.argv) > 3 else None,
            int(os.environ.get("TRACE_MAX_TOKENS", "256")),
        )
