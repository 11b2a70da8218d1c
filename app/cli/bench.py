"""`tandem bench`: how much faster is it here, on my model and my prompts?

Plain decoding against sped-up decoding (`--draft ngram` or a draft model) on the same prompts, in
one process, the two runs of each prompt side by side so machine noise hits them alike. One
table, two views of each reply's `Stats`: decode (tokens per second once the prompt is in) and
the whole request (seconds from asking to the last token). Every run starts from a fresh KV cache
and the same temporary cost cache, warmed first by one reply and by timing this machine's verify
batches, so each run starts as a user's second would; the user's own cost cache is never touched.

The maintainers' comparison (other programs, whole processes, the ceiling) is the lab bench:
`python -m tools.lab.bench` in a checkout (`make bench-lab`), with these prompts and warm-up.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.cli_base import Parser
from app.cli.options import add_draft_arg, add_engine_args
from app.paths import resources_dir
from engine.config import NGRAM_LOOKUP, DraftChoice, SamplingParams
from engine.errors import TandemError
from engine.events import Finished, Speculation, Stats

if TYPE_CHECKING:
    from engine.session import Engine

WARM_UP_PROMPT = (
    "Original text:\nThe river rises in the hills above the town and runs south to the sea.\n\n"
    "Copy of the original text:\nThe river rises"
)
# ...and, with a draft model, first a prompt with nothing to copy: beside a draft model the text's
# own drafts win on the copy prompt, and a user's first run would have measured the model on
# fresh text (without it, the cache knows nothing of the model's acceptance).
WARM_UP_FRESH_PROMPT = "Question: How do bees make honey, and why do they store it?\nAnswer:"


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    set: str
    prompt: str
    # The documents set: files under resources/ attached to `request`, the prompt made from them in
    # the model's own chat template (render_prompt) as the window and `generate --attach` make it.
    documents: tuple[str, ...] = ()
    request: str = ""


def render_prompt(engine: Engine, p: BenchPrompt) -> BenchPrompt:
    """A documents prompt as the model reads it: the documents and the request as one user message."""
    if not p.documents:
        return p
    from app.library.documents import read_document, with_documents
    from engine.chat import chat_prompt

    documents = [read_document(resources_dir() / d) for d in p.documents]
    message = with_documents(p.request, documents)
    prompt = chat_prompt(engine, [{"role": "user", "content": message}])
    return dataclasses.replace(p, prompt=prompt)


def document_spans_of(engine: Engine, p: BenchPrompt) -> tuple[tuple[int, int], ...]:
    """Where a documents prompt's documents lie, in tokens (drafts from them are counted apart)."""
    if not p.documents:
        return ()
    from app.library.documents import read_document
    from engine.chat import document_token_spans

    return document_token_spans(
        engine, p.prompt, [read_document(resources_dir() / d).text for d in p.documents]
    )


def load_prompts(path: str | None, sets: str | None) -> list[BenchPrompt]:
    source = Path(path) if path else resources_dir() / "bench_prompts.jsonl"
    if not source.is_file():
        raise TandemError(f"prompt file not found: {source}")
    prompts = []
    for i, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            documents = tuple(str(d) for d in item.get("documents", ()))
            prompts.append(
                BenchPrompt(
                    str(item.get("name", f"prompt-{i}")),
                    str(item.get("set", "custom")),
                    str(item.get("prompt", "") if documents else item["prompt"]),
                    documents,
                    str(item.get("request", "")),
                )
            )
        except (ValueError, KeyError, TypeError) as e:
            raise TandemError(f'{source}, line {i}: not a JSON object with a "prompt" field') from e
    if sets:
        wanted = {s.strip() for s in sets.split(",")}
        prompts = [p for p in prompts if p.set in wanted]
    if not prompts:
        raise TandemError(f"no prompts to run in {source}")
    return prompts


def same_text_note(report: dict[str, object]) -> str:
    """What the "same text" columns compare, and when a NO is expected."""
    flips = (
        "An F16 target gives the same tokens; a quantized one may flip where its two best logits "
        "nearly tie, because llama.cpp's batched and one-row kernels round differently (docs/findings.md)."
    )
    if not report["temperature"]:
        return f"Same text: greedy output with and without speculation. {flips}"
    note = (
        "Same text: sampled output with and without speculation, same seed. Each position's sample "
        "is keyed by (seed, position, token), so drafts from the text keep the text identical."
    )
    if DraftChoice.parse(str(report["draft"])).kind is not Speculation.NGRAM:
        note += (
            " The draft model's drafts are sampled and accepted by the speculative sampling rule, "
            "which keeps the target's distribution, not its tokens: NO is expected wherever the "
            "model drafted."
        )
    return f"{note} {flips}"


@dataclass(frozen=True)
class Timed:  # one reply: its numbers, its tokens and the whole request's seconds
    stats: Stats
    token_ids: tuple[int, ...]
    request_s: float


def timed_reply(
    engine: Engine,
    prompt: str,
    max_tokens: int,
    params: SamplingParams,
    speculate: bool,
    document_spans: tuple[tuple[int, int], ...] = (),
) -> Timed:
    """One reply, started as a new process would (a fresh KV cache, the cost cache as the caller
    left it), timed from asking to its last token (Finished, the last event)."""
    t0 = time.perf_counter()
    engine.reset_cache()
    *_, finished = engine.generate(
        prompt, params, max_tokens=max_tokens, speculate=speculate, document_spans=document_spans
    )
    assert isinstance(finished, Finished)
    return Timed(finished.stats, tuple(finished.token_ids), time.perf_counter() - t0)


@dataclass(frozen=True)
class Row:  # a prompt's medians over its repeats, plain and sped up
    name: str
    set: str
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    plain_request_s: float
    spec_request_s: float
    acceptance_rate: float
    n_generated: int
    same_text: bool

    @property
    def speedup(self) -> float:
        return self.spec_tokens_per_s / self.plain_tokens_per_s if self.plain_tokens_per_s else 0.0

    @property
    def request_speedup(self) -> float:
        return self.plain_request_s / self.spec_request_s if self.spec_request_s else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            **dataclasses.asdict(self),
            "speedup": self.speedup,
            "request_speedup": self.request_speedup,
        }


def _row(p: BenchPrompt, runs: list[tuple[Timed, Timed]]) -> Row:
    plain, spec = runs[-1]
    return Row(
        name=p.name,
        set=p.set,
        plain_tokens_per_s=statistics.median(a.stats.decode_tokens_per_s for a, _ in runs),
        spec_tokens_per_s=statistics.median(b.stats.decode_tokens_per_s for _, b in runs),
        plain_request_s=statistics.median(a.request_s for a, _ in runs),
        spec_request_s=statistics.median(b.request_s for _, b in runs),
        acceptance_rate=spec.stats.acceptance_rate,
        n_generated=spec.stats.n_generated,
        same_text=plain.token_ids == spec.token_ids,
    )


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    from app.cli.options import engine_config
    from engine.session import Engine

    workdir = Path(tempfile.mkdtemp(prefix="tandem-bench-"))
    costs, snapshot = workdir / "costs", workdir / "costs-after-warm-up"
    config = dataclasses.replace(engine_config(args), cost_cache_dir=str(costs))
    params = SamplingParams(
        temperature=args.temperature,
        seed=args.seed if args.temperature > 0 else None,
        repeat_penalty=args.repeat_penalty,
    )
    prompts = load_prompts(args.prompts, args.sets)
    engine = Engine(config)
    try:
        # A user's second run: one reply already given, this machine's verify batches timed.
        if config.speculation is not Speculation.NGRAM:
            timed_reply(engine, WARM_UP_FRESH_PROMPT, 64, params, speculate=True)
        timed_reply(engine, WARM_UP_PROMPT, 64, params, speculate=True)
        engine.calibrate()
        if costs.is_dir():
            shutil.copytree(costs, snapshot)
        rows = []
        for p in (render_prompt(engine, p) for p in prompts):
            spans = document_spans_of(engine, p)
            runs = []
            for _ in range(args.repeat):
                pair = []
                for speculate in (False, True):  # each from the cost cache the warm-up left
                    shutil.rmtree(costs, ignore_errors=True)
                    if snapshot.is_dir():
                        shutil.copytree(snapshot, costs)
                    pair.append(timed_reply(engine, p.prompt, args.max_tokens, params, speculate, spans))
                runs.append((pair[0], pair[1]))
            row = _row(p, runs)
            rows.append(row)
            print(
                f"{p.name:16s} decode plain {row.plain_tokens_per_s:6.1f}  sped up "
                f"{row.spec_tokens_per_s:6.1f} tok/s  x{row.speedup:.2f}; whole request "
                f"x{row.request_speedup:.2f}; accepted {row.acceptance_rate:.0%}",
                file=sys.stderr,
            )
    finally:
        engine.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return summarize(rows, config.target_path, config.draft, args)


def summarize(rows: list[Row], model: str, draft: DraftChoice, args: argparse.Namespace) -> dict[str, object]:
    import llama_cpp

    from engine.costcache import build_identity, cpu_identity

    return {
        "model": model,
        "draft": draft.text,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "repeat_penalty": args.repeat_penalty,
        "threads": args.threads,
        "machine": cpu_identity(),
        "build": build_identity().split("|", 1)[-1].strip(),
        "llama_cpp_python": llama_cpp.__version__,
        "prompts": [r.as_dict() for r in rows],
        "median_speedup": statistics.median(r.speedup for r in rows),
        "min_speedup": min(r.speedup for r in rows),
        "median_request_speedup": statistics.median(r.request_speedup for r in rows),
        "min_request_speedup": min(r.request_speedup for r in rows),
    }


def to_markdown(report: dict[str, object]) -> str:
    prompts: list[dict[str, Any]] = report["prompts"]  # type: ignore[assignment]
    same = {True: "yes", False: "NO"}
    lines = [
        f"# Tandem bench: {Path(str(report['model'])).name}, sped up by {report['draft']}",
        "",
        f"{report['max_tokens']} tokens, temperature {report['temperature']}, repeat penalty "
        f"{report['repeat_penalty']}, threads {report['threads'] or 'all cores'}; CPU: "
        f"{report['machine']}; llama-cpp-python {report['llama_cpp_python']}, llama.cpp built with: "
        f"{report['build']}",
        "",
        "| prompt | set | decode tok/s plain | sped up | decode speedup | whole request s plain "
        "| sped up | whole request speedup | drafts accepted | same text |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in prompts:
        lines.append(
            f"| {r['name']} | {r['set']} | {r['plain_tokens_per_s']:.1f} | {r['spec_tokens_per_s']:.1f} | "
            f"x{r['speedup']:.2f} | {r['plain_request_s']:.2f} | {r['spec_request_s']:.2f} | "
            f"x{r['request_speedup']:.2f} | {r['acceptance_rate']:.0%} | {same[r['same_text']]} |"
        )
    lines += [
        "",
        f"Decode: median speedup x{report['median_speedup']:.2f}, lowest x{report['min_speedup']:.2f}. "
        f"Whole request: median x{report['median_request_speedup']:.2f}, lowest "
        f"x{report['min_request_speedup']:.2f}. Decode counts the reply once the prompt is in; the "
        "whole request also reads the prompt (and, with a draft model, the draft model's first pass "
        "over it).",
        same_text_note(report),
    ]
    return "\n".join(lines) + "\n"


def add_bench_args(b: argparse.ArgumentParser, draft_help: str) -> None:
    """The options this bench and the lab bench share: the engine, the draft, the prompts and how
    each reply is sampled."""
    add_engine_args(b, model_default="default")
    add_draft_arg(b, NGRAM_LOOKUP, draft_help)
    b.add_argument("--prompts", default=None, help='JSONL file of {"name", "set", "prompt"} lines')
    b.add_argument(
        "--sets", default=None, help="comma-separated built-in sets (copy,code,qa,writing,documents)"
    )
    b.add_argument("--max-tokens", type=int, default=256)
    b.add_argument("--repeat", type=int, default=1, help="runs of each prompt (medians)")
    b.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    b.add_argument("--seed", type=int, default=1, help="sampling seed (with --temperature)")
    b.add_argument(
        "--repeat-penalty",
        type=float,
        default=1.0,
        help="repetition penalty over the last 64 tokens (the chat's: 1.1)",
    )


def add_bench_parser(sub: argparse._SubParsersAction[Parser]) -> argparse.ArgumentParser:
    """`tandem bench` under the command line's subcommands."""
    b = sub.add_parser(
        "bench",
        help="how much faster speculative decoding is here: plain against sped up, your model and prompts",
    )
    b.set_defaults(run=cmd_bench)
    add_bench_args(b, "draft GGUF path or `ngram`")
    b.add_argument("--json", action="store_true", help="print the report as one JSON object")
    b.add_argument("--out", default=None, help="also write the report as Markdown here")
    return b


def check_bench_args(args: argparse.Namespace) -> None:
    """The bench's usage mistakes (this one's and the lab bench's), each a UserError sentence."""
    from app.cli.options import UserError, validate_engine_args

    validate_engine_args(args)
    if args.draft.kind is Speculation.NONE:
        raise UserError("bench needs --draft PATH or --draft ngram (it compares against plain decoding)")
    if args.repeat < 1:
        raise UserError(f"--repeat must be at least 1 (got {args.repeat})")
    if args.temperature < 0:
        raise UserError(f"--temperature must be 0 or more (got {args.temperature})")


def cmd_bench(args: argparse.Namespace) -> int:
    check_bench_args(args)
    report = run_bench(args)
    markdown = to_markdown(report)
    if args.out:
        Path(args.out).write_text(markdown, encoding="utf-8")
    print(json.dumps(report) if args.json else markdown)
    return 0
