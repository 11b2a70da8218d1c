"""The lab bench: Tandem beside other programs, in one run, on the same prompts (`make bench-lab`).

    .venv/bin/python -m tools.lab.bench --model default --draft ngram --max-tokens 256 --out bench.md
    .venv/bin/python -m tools.lab.bench --model default-costly --draft default --sets copy,qa

The user's question ("how much faster is it here, on my model?") is `tandem bench`
(app/cli/bench.py). This is the maintainers' comparison, with more views of the same work:
- **Decode**: tokens per second once the prompt is in, in this process. Beside it the ceiling
  the machine allows right now: with every drafted token accepted, the best speedup is
  max over k of (k+1)·t(1)/t(k+1), where t(n) is one n-row verify batch, timed in the same run
  after the prompt and half the reply (where the reply's steps run: see measure_ceiling).
  Peers on the same prompts (tools/lab/bench_peers.py): llama-cpp-python's own prompt lookup
  (LlamaPromptLookupDecoding), llama.cpp's `llama-lookup` and `llama-server`'s n-gram kinds
  (built from the same vendored sources with the same flags).
- **Whole process**: `tandem generate` run as a separate process, plain and speculative, timed
  from outside: start-up, model load, any measuring, prefill and decode, all of it. The cost
  cache is warmed first by one run on another prompt and by timing the machine's verify batches
  (what the window does when first idle: Engine.calibrate), as it is for a user's second run, and
  every measured run, here or in a process, starts from that same cache (the bench keeps its
  own in a temporary folder: the user's is never touched). Beside it a first use: a process with
  an empty data folder, nothing timed or learned.

For every prompt and repeat the runs alternate (plain, speculative, peers) so machine noise hits
them alike, and every run starts from a fresh KV cache and fresh acceptance statistics (a draft
cache reused between runs of the same prompt inflates speculative numbers: llama.cpp PR #10455).
Speed claims live here, as ratios measured side by side, never in unit tests.

--again measures a request asked a second time (Regenerate, a client sending the same request):
a first answer, not timed (another seed when sampling), is what Tandem's reply memory drafts from
(engine.text_index) and what llama-lookup's dynamic n-gram cache (-lcd) holds. The plain run
neither drafts from it nor adds to it. In-process only: earlier answers live in a process.
--model-drafts-only measures a draft model alone (EngineConfig.draft_lookup off: no n-gram drafts
from the text beside it), in this process only: `tandem generate` has no such option.

The lab's models (tools/lab/models.py) are taken by name here: `default-f16`, `default-costly`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from app.cli.bench import (
    WARM_UP_FRESH_PROMPT,
    WARM_UP_PROMPT,
    document_spans_of,
    load_prompts,
    render_prompt,
)
from app.paths import resources_dir
from engine.chat import transcript
from engine.config import PLAIN_DECODING, DraftChoice, SamplingParams
from engine.errors import TandemError
from engine.events import Finished, Speculation, TextPiece
from engine.session import Engine
from tools.lab.bench_peers import (
    SERVER_KINDS,
    ProcessRun,
    ServerRun,
    find_tool,
    run_llama_lookup,
    run_llama_server,
    run_peer,
)
from tools.lab.bench_report import PromptResult, _fmt, summarize, to_markdown

# Sets whose plain replies are checked for doing the work their prompt names (copied from the
# prompt, not looping): copy and edit prompts, the held-out ones, and mixed work (a Markdown table
# or an HTML list made from the prompt's data: short copies between new text, where llama-server's
# n-gram kinds draft little and a drafter that guesses wrong is slower than plain decoding).
CHECKED_SETS = ("copy", "held-out", "mixed")
CEILING_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def _run(
    engine: Engine,
    prompt: str,
    max_tokens: int,
    params: SamplingParams,
    speculate: bool,
    again: bool = False,
    document_spans: tuple[tuple[int, int], ...] = (),
) -> Finished:
    """One reply, started as a new process would (the caller resets the cost cache). again: the
    engine keeps the earlier replies it was given (a regenerate); a plain run then neither drafts
    from them nor is kept, so the speculative run has only the first answer to draft from."""
    engine.reset_cache(keep_memory=again)
    *_, finished = engine.generate(
        prompt,
        params,
        max_tokens=max_tokens,
        speculate=speculate,
        use_memory=speculate or not again,
        document_spans=document_spans,
    )
    assert isinstance(finished, Finished)
    return finished


def measure_ceiling(
    engine: Engine, prompt: str, max_tokens: int, sizes: Sequence[int] = CEILING_SIZES
) -> tuple[float | None, dict[int, float]]:
    """max over k of (k+1)·t(1)/t(k+1): the decode speedup if every drafted token were accepted,
    and the verify batch costs t(n) (seconds) it comes from.

    Timed where the reply's steps run: after the prompt and half the reply. A verify batch's
    attention grows with the text before it (AVX2, Gemma 3 270M: 64 rows cost 283 ms after 64
    tokens, 305 after 256, 332 after 512, while one row stays at 21 ms), so a ceiling timed
    after the prompt alone is one no reply of max_tokens could reach."""
    engine.reset_cache()
    tokens = engine.tokenize(prompt)
    at = min(len(tokens) + max_tokens // 2, engine.n_ctx - max(sizes) - 2)
    context = (tokens * (1 + at // max(len(tokens), 1)))[: max(at, 1)]
    costs = engine.target.time_batches(sizes, context, repeats=3)
    engine.reset_cache()
    t1 = costs.get(1)
    if not t1:
        return None, costs
    return max(n * t1 / t for n, t in costs.items()), costs


def copy_and_loop_shares(reply: tuple[int, ...], source: list[int], n: int = 6) -> tuple[float, float]:
    """Does a reply do the work its prompt names? (share of the reply's tokens inside n-grams that
    occur in the source documents, share of its n-grams it said before: a loop, which drafts fast
    and is no copy)."""
    if len(reply) < n:
        return 0.0, 0.0
    in_source = {tuple(source[i : i + n]) for i in range(len(source) - n + 1)}
    covered = [False] * len(reply)
    seen: set[tuple[int, ...]] = set()
    n_repeats = 0
    for i in range(len(reply) - n + 1):
        gram = tuple(reply[i : i + n])
        if gram in in_source:
            covered[i : i + n] = [True] * n
        n_repeats += gram in seen
        seen.add(gram)
    return sum(covered) / len(reply), n_repeats / (len(reply) - n + 1)


def run_process(
    model: str,
    draft: DraftChoice,
    prompt_file: str,
    max_tokens: int,
    args: argparse.Namespace,
    env: dict[str, str],
) -> ProcessRun:
    """One whole `tandem generate` process, timed from outside."""
    cmd = [
        sys.executable, "-m", "app.main", "generate", "--model", model, "--draft", draft.text,
        "--prompt-file", prompt_file, "--max-tokens", str(max_tokens), "--ctx", str(args.ctx),
        "--draft-max", str(args.draft_max), "--temperature", str(args.temperature), "--json",
    ]  # fmt: skip
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.temperature > 0:
        cmd += ["--seed", str(args.seed)]
    if getattr(args, "repeat_penalty", 1.0) != 1.0:
        cmd += ["--repeat-penalty", str(args.repeat_penalty)]
    if args.fixed_draft:
        cmd.append("--fixed-draft")
    if getattr(args, "gpu_layers", 0):
        cmd += ["--gpu-layers", str(args.gpu_layers)]
    if getattr(args, "rpc", None):
        cmd += ["--rpc", args.rpc]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise TandemError(f"tandem generate failed (exit {done.returncode}): {tail[0]}")
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return ProcessRun(
        wall_s=wall,
        load_s=r["load_s"],
        prefill_s=r["prefill_s"],
        decode_s=r["decode_s"],
        catch_up_s=r.get("draft_catch_up_s", 0.0),
        n_generated=r["n_generated"],
        token_ids=tuple(r["token_ids"]),
    )


def follow_up_latency(engine: Engine, n_turns: int, max_tokens: int = 32) -> list[float]:
    """Time to first token (s) for each turn of a growing conversation, with the KV cache kept."""
    engine.reset_cache()
    questions = [
        "What is a good name for a cat?", "Why do cats purr?", "How long do cats sleep?",
        "What do cats eat?", "Are cats good pets for children?", "How do I trim a cat's claws?",
        "Why do cats knead?", "How often should a cat see a vet?", "Do cats like water?",
        "What toys do cats like?", "How do cats see in the dark?", "Why do cats chase lasers?",
    ]  # fmt: skip
    messages: list[dict[str, str]] = []
    ttft = []
    for turn in range(n_turns):
        # The window's own base-model transcript (engine.chat), growing turn by turn.
        messages.append({"role": "user", "content": questions[turn % len(questions)]})
        prompt = transcript("", messages)
        t0 = time.perf_counter()
        first = None
        reply = ""
        for event in engine.generate(prompt, SamplingParams(), max_tokens=max_tokens, stop=["\nUser:"]):
            if isinstance(event, TextPiece) and first is None:
                first = time.perf_counter() - t0
            if isinstance(event, Finished):
                reply = event.text
        ttft.append(first if first is not None else time.perf_counter() - t0)
        messages.append({"role": "assistant", "content": reply})
    return ttft


def _decode_rate(run: ProcessRun) -> float:
    return run.n_generated / run.decode_s if run.decode_s > 0 else 0.0


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    from app.cli.options import engine_config

    workdir = Path(tempfile.mkdtemp(prefix="tandem-bench-"))
    # Measured runs never touch the user's cost cache: they share one of their own, reset before
    # every run to what the warm-up left, so each starts as a user's second process would.
    home = workdir / "home"
    costs, snapshot = home / "costs", workdir / "costs-after-warm-up"
    config = dataclasses.replace(
        engine_config(args), cost_cache_dir=str(costs), draft_lookup=not args.model_drafts_only
    )
    env = {**os.environ, "TANDEM_HOME": str(home)}

    def restore_costs() -> None:
        shutil.rmtree(costs, ignore_errors=True)
        if snapshot.is_dir():
            shutil.copytree(snapshot, costs)

    def snapshot_costs() -> None:
        shutil.rmtree(snapshot, ignore_errors=True)
        if costs.is_dir():
            shutil.copytree(costs, snapshot)

    prompts = load_prompts(args.prompts, args.sets)
    params = SamplingParams(
        temperature=args.temperature,
        seed=args.seed if args.temperature > 0 else None,
        repeat_penalty=getattr(args, "repeat_penalty", 1.0),
    )
    first_params = dataclasses.replace(params, seed=params.seed + 1 if params.seed is not None else None)
    is_ngram = config.speculation is Speculation.NGRAM
    log = sys.stderr
    lookup_bin = find_tool("llama-lookup") if is_ngram and not args.no_lookup else None
    placement: tuple[str, ...] = ()
    if getattr(args, "gpu_layers", 0):
        placement += ("-ngl", str(args.gpu_layers))
    if getattr(args, "rpc", None):
        placement += ("--rpc", args.rpc)
    if is_ngram and not args.no_lookup and lookup_bin is None:
        print("llama-lookup not found (make setup builds it): skipping that peer", file=log)
    server_bin = find_tool("llama-server") if is_ngram and not getattr(args, "no_server", False) else None
    if is_ngram and not getattr(args, "no_server", False) and server_bin is None:
        print("llama-server not found (make setup builds it): skipping its n-gram kinds", file=log)
    # A user's second run: the cost cache and the OS file cache already hold what a first run
    # leaves there. Warm both on a prompt that is not measured.
    warm, warm_fresh = workdir / "warm-up.txt", workdir / "warm-up-fresh.txt"
    warm.write_text(WARM_UP_PROMPT, encoding="utf-8")
    warm_fresh.write_text(WARM_UP_FRESH_PROMPT, encoding="utf-8")
    run_process(config.target_path, PLAIN_DECODING, str(warm), 64, args, env)
    if not is_ngram:
        run_process(config.target_path, config.draft, str(warm_fresh), 64, args, env)
    run_process(config.target_path, config.draft, str(warm), 64, args, env)
    engine = Engine(config)
    # The window times this machine's verify batches the first time it is idle with a model
    # (Engine.calibrate, once per machine and model): a user's second run starts from them too.
    calibrate_s = time.perf_counter()
    engine.calibrate()
    print(f"verify batches timed in {time.perf_counter() - calibrate_s:.1f} s", file=sys.stderr)
    snapshot_costs()
    prompts = [render_prompt(engine, p) for p in prompts]
    if args.again:
        # A user who has had an answer given again before: the cost cache knows how earlier
        # answers' drafts fare (their acceptance), as it knows the rest from the runs above.
        restore_costs()
        _run(engine, WARM_UP_FRESH_PROMPT, 64, first_params, speculate=True)
        _run(engine, WARM_UP_FRESH_PROMPT, 64, params, speculate=True, again=True)
        snapshot_costs()
    use_peer = is_ngram and not args.no_peer
    results: list[PromptResult] = []
    try:
        for p in prompts:
            prompt_file = workdir / f"{p.name}.txt"
            prompt_file.write_text(p.prompt, encoding="utf-8")
            ceiling, batch_s = measure_ceiling(engine, p.prompt, args.max_tokens) if is_ngram else (None, {})
            spans = document_spans_of(engine, p)
            plain, spec, peer_rates, lookup_rates, lookup_acc = [], [], [], [], []
            proc_plain: list[ProcessRun] = []
            proc_spec: list[ProcessRun] = []
            proc_lookup: list[ProcessRun] = []
            proc_first: list[ProcessRun] = []
            server_rates: dict[str, list[float]] = {kind: [] for kind in SERVER_KINDS} if server_bin else {}
            server_runs: dict[str, ServerRun] = {}
            finals = []
            for _ in range(args.repeat):
                if args.again:
                    # The first answer (another seed when sampling: a Regenerate), not timed.
                    restore_costs()
                    _run(engine, p.prompt, args.max_tokens, first_params, speculate=True)
                restore_costs()
                a = _run(engine, p.prompt, args.max_tokens, params, False, args.again, spans)
                restore_costs()
                b = _run(engine, p.prompt, args.max_tokens, params, True, args.again, spans)
                plain.append(a.stats.decode_tokens_per_s)
                spec.append(b.stats.decode_tokens_per_s)
                finals.append((a, b))
                if use_peer:
                    peer_rates.append(
                        run_peer(
                            config.target_path,
                            str(prompt_file),
                            args.max_tokens,
                            min(engine.n_ctx, 2048),
                            engine.n_threads,
                            config.n_gpu_layers,
                        )
                    )
                if lookup_bin is not None:
                    lookup_extra = placement
                    if args.again:
                        # llama-lookup's own memory of earlier text: its dynamic n-gram cache,
                        # written by the first run and read by the timed one.
                        cache = workdir / f"{p.name}.lcd"
                        cache.unlink(missing_ok=True)
                        lookup_extra = (*placement, "-lcd", str(cache))
                        run_llama_lookup(
                            lookup_bin, config.target_path, str(prompt_file), args.max_tokens,
                            engine.n_threads, min(engine.n_ctx, 4096), lookup_extra,
                        )  # fmt: skip
                    rate, acc, run = run_llama_lookup(
                        lookup_bin, config.target_path, str(prompt_file), args.max_tokens,
                        engine.n_threads, min(engine.n_ctx, 4096), lookup_extra,
                    )  # fmt: skip
                    if rate is not None:
                        lookup_rates.append(rate)
                        proc_lookup.append(run)
                    if acc is not None:
                        lookup_acc.append(acc)
                if server_bin is not None:
                    for kind in SERVER_KINDS:
                        served = run_llama_server(
                            server_bin, config.target_path, p.prompt, args.max_tokens,
                            engine.n_threads, min(engine.n_ctx, 4096), kind, placement,
                        )  # fmt: skip
                        server_rates[kind].append(served.tokens_per_s)
                        server_runs[kind] = served
                # Earlier replies live in a process; `tandem generate` drafts from the text too.
                if not args.no_process and not args.again and not args.model_drafts_only:
                    for draft, runs in ((PLAIN_DECODING, proc_plain), (config.draft, proc_spec)):
                        restore_costs()
                        runs.append(
                            run_process(
                                config.target_path, draft, str(prompt_file), args.max_tokens, args, env
                            )
                        )
                    # A first use on a new machine: a data folder of its own, nothing timed or learned.
                    first_home = Path(tempfile.mkdtemp(prefix="tandem-first-use-"))
                    try:
                        proc_first.append(
                            run_process(
                                config.target_path, config.draft, str(prompt_file), args.max_tokens, args,
                                {**env, "TANDEM_HOME": str(first_home)},
                            )
                        )  # fmt: skip
                    finally:
                        shutil.rmtree(first_home, ignore_errors=True)
            a, b = finals[-1]
            s = b.stats
            copied = looped = None
            opening = ""
            if not p.documents and p.set in CHECKED_SETS:
                # Copy and edit prompts: the work is the prompt's own text, copied or edited.
                copied, looped = copy_and_loop_shares(a.token_ids, engine.tokenize(p.prompt, False))
                opening = " ".join(a.text.split()[:8])
            if p.documents:
                from app.library.documents import read_document

                source = [
                    t
                    for d in p.documents
                    for t in engine.tokenize(read_document(resources_dir() / d).text, False)
                ]
                copied, looped = copy_and_loop_shares(a.token_ids, source)
                opening = " ".join(a.text.split()[:8])
            same_processes = None
            if proc_plain and proc_spec:
                same_processes = proc_plain[-1].token_ids == proc_spec[-1].token_ids
            r = PromptResult(
                name=p.name,
                set=p.set,
                plain_tokens_per_s=statistics.median(plain),
                spec_tokens_per_s=statistics.median(spec),
                ceiling=ceiling,
                peer_tokens_per_s=_median(peer_rates),
                lookup_tokens_per_s=_median(lookup_rates),
                lookup_acceptance=_median(lookup_acc),
                acceptance_rate=s.acceptance_rate,
                mean_accepted_length=s.mean_accepted_length,
                n_generated=s.n_generated,
                same_text=a.token_ids == b.token_ids,
                same_text_processes=same_processes,
                step_overhead_ms_median=s.step_overhead_ms_median,
                accepted_from_text=(
                    s.n_accepted_text / s.n_accepted
                    if s.n_accepted and s.speculation is Speculation.DRAFT
                    else None
                ),
                accepted_from_memory=(
                    (s.n_accepted_memory / s.n_accepted if s.n_accepted else 0.0) if args.again else None
                ),
                plain_process_s=_median([x.wall_s for x in proc_plain]),
                spec_process_s=_median([x.wall_s for x in proc_spec]),
                lookup_process_s=_median([x.wall_s for x in proc_lookup]),
                spec_load_s=_median([x.load_s for x in proc_spec]),
                spec_catch_up_s=_median([x.catch_up_s for x in proc_spec]),
                spec_prefill_s=_median([x.prefill_s for x in proc_spec]),
                spec_decode_s=_median([x.decode_s for x in proc_spec]),
                batch_ms={str(n): round(t * 1000, 2) for n, t in batch_s.items()},
                copied=copied,
                looped=looped,
                opening=opening,
                accepted_from_document=(s.n_accepted_document / s.n_accepted if s.n_accepted else 0.0)
                if p.documents
                else None,
                server_tokens_per_s={k: statistics.median(v) for k, v in server_rates.items() if v},
                server_accepted={k: f"{r.n_accepted}/{r.n_drafted}" for k, r in server_runs.items()},
                first_use_tokens_per_s=_median([_decode_rate(x) for x in proc_first]),
                warmed_tokens_per_s=_median([_decode_rate(x) for x in proc_spec]),
                first_use_process_s=_median([x.wall_s for x in proc_first]),
                first_use_prefill_s=_median([x.prefill_s for x in proc_first]),
                plain_process_tokens_per_s=_median([_decode_rate(x) for x in proc_plain]),
            )
            if r.best_server is not None:
                r = dataclasses.replace(r, server_same_text=server_runs[r.best_server[0]].text == a.text)
            results.append(r)
            extra = ""
            if r.ceiling:
                extra += f" (ceiling x{r.ceiling:.2f})"
            if r.peer_tokens_per_s:
                extra += f", llama-cpp-python lookup {r.peer_tokens_per_s:.1f}"
            if r.lookup_tokens_per_s:
                extra += f", llama-lookup {r.lookup_tokens_per_s:.1f}"
            if r.process_speedup:
                extra += f"; whole process x{r.process_speedup:.2f}"
            if r.best_server is not None:
                extra += (
                    f"; llama-server best {r.best_server[0]} {r.best_server[1]:.1f}, Tandem first use "
                    f"{_fmt(r.first_use_vs_server, '.2f', 'x')}, warmed {_fmt(r.warmed_vs_server, '.2f', 'x')}"
                )
            print(
                f"{p.name:16s} plain {r.plain_tokens_per_s:6.1f}  spec {r.spec_tokens_per_s:6.1f} tok/s"
                f"  x{r.speedup:.2f}{extra}  accepted {r.acceptance_rate:.0%}"
                + (f" ({r.accepted_from_text:.0%} from the text)" if r.accepted_from_text is not None else "")
                + (
                    f" ({r.accepted_from_memory:.0%} from the earlier answer)"
                    if r.accepted_from_memory is not None
                    else ""
                ),
                file=log,
            )
        restore_costs()
        ttft = follow_up_latency(engine, args.turns) if args.turns > 0 else []
    finally:
        engine.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return summarize(results, ttft, config.target_path, config.draft, args)


def build_parser() -> argparse.ArgumentParser:
    from app.cli.bench import add_bench_args
    from app.cli.cli_base import Parser

    b = Parser(prog="python -m tools.lab.bench", description=__doc__.split("\n")[0])
    add_bench_args(b, "draft GGUF path, `ngram`, or a lab model (`default-f16`...)")
    b.add_argument("--no-peer", action="store_true", help="skip llama-cpp-python's prompt lookup")
    b.add_argument("--no-lookup", action="store_true", help="skip llama.cpp's llama-lookup")
    b.add_argument(
        "--no-server", action="store_true", help="skip llama-server's n-gram kinds (--spec-type ngram-*)"
    )
    b.add_argument(
        "--no-process", action="store_true", help="skip the whole-process runs (`tandem generate`, timed)"
    )
    b.add_argument(
        "--model-drafts-only",
        action="store_true",
        help="with a draft model: no n-gram drafts from the text beside it (in this process only)",
    )
    b.add_argument("--turns", type=int, default=10, help="turns in the follow-up latency test (0: skip)")
    b.add_argument(
        "--again",
        action="store_true",
        help="measure each request asked a second time (Regenerate): the first answer, not timed, "
        "is what Tandem drafts from (and llama-lookup's dynamic n-gram cache); in this process only",
    )
    b.add_argument("--json", action="store_true")
    b.add_argument("--out", default=None, help="also write the report as Markdown here")
    return b


def cmd_bench(args: argparse.Namespace) -> int:
    from app.cli.bench import check_bench_args
    from tools.lab.models import lab_draft, lab_model

    check_bench_args(args)
    args.model, args.draft = lab_model(args.model), lab_draft(args.draft)
    report = run_bench(args)
    markdown = to_markdown(report)
    if args.out:
        Path(args.out).write_text(markdown, encoding="utf-8")
    if args.json:
        print(json.dumps(report))
    else:
        print(markdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    from app.cli.cli_base import at_the_edge

    args = build_parser().parse_args(argv)
    return at_the_edge(lambda: cmd_bench(args))


if __name__ == "__main__":
    sys.exit(main())
