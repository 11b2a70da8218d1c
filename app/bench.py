"""`tandem bench`: plain and speculative decoding side by side, in one run, on the same prompts.

For every prompt and repeat, the runs alternate (plain, speculative, peer) so that machine
noise hits all of them alike, and every run starts from a fresh cache (a draft cache reused
between runs of the same prompt would inflate speculative numbers: llama.cpp PR #10455).
The peer is llama-cpp-python's own prompt-lookup speculative decoding on the same prompts.
Speed claims live here, as ratios measured side by side, never in unit tests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from app.paths import resources_dir
from engine.config import SamplingParams
from engine.errors import TandemError
from engine.events import Finished, Stats, TextPiece
from engine.session import Engine


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    set: str
    prompt: str


@dataclass(frozen=True)
class PromptResult:
    name: str
    set: str
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    peer_tokens_per_s: float | None
    acceptance_rate: float
    mean_accepted_length: float
    n_generated: int
    same_text: bool  # speculative output == plain output (greedy)
    step_overhead_ms_median: float

    @property
    def speedup(self) -> float:
        return self.spec_tokens_per_s / self.plain_tokens_per_s if self.plain_tokens_per_s else 0.0

    @property
    def vs_peer(self) -> float | None:
        if not self.peer_tokens_per_s:
            return None
        return self.spec_tokens_per_s / self.peer_tokens_per_s


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
            prompts.append(
                BenchPrompt(
                    str(item.get("name", f"prompt-{i}")), str(item.get("set", "custom")), str(item["prompt"])
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


def _run(engine: Engine, prompt: str, max_tokens: int, speculate: bool) -> Finished:
    engine.reset_cache()
    finished = None
    for event in engine.generate(prompt, SamplingParams(), max_tokens=max_tokens, speculate=speculate):
        if isinstance(event, Finished):
            finished = event
    assert finished is not None
    return finished


class PeerPromptLookup:
    """llama-cpp-python's own speculative decoding (LlamaPromptLookupDecoding), for comparison."""

    def __init__(self, model_path: str, n_ctx: int, n_threads: int, n_gpu_layers: int) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        # Its draft_model path needs logits for every position (FINDINGS.md): logits_all=True.
        self.llm = Llama(
            model_path=model_path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_gpu_layers=n_gpu_layers,
            logits_all=True,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
            verbose=False,
        )

    def tokens_per_s(self, prompt: str, max_tokens: int) -> float:
        self.llm.reset()
        times = []
        for _chunk in self.llm.create_completion(
            prompt, max_tokens=max_tokens, temperature=0.0, repeat_penalty=1.0, stream=True
        ):
            times.append(time.perf_counter())
        # Tokens after the first, over the time after the first: excludes the prompt, as ours does.
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0

    def close(self) -> None:
        self.llm.close()


def follow_up_latency(engine: Engine, n_turns: int, max_tokens: int = 32) -> list[float]:
    """Time to first token (s) for each turn of a growing conversation, with the KV cache kept."""
    engine.reset_cache()
    questions = [
        "What is a good name for a cat?", "Why do cats purr?", "How long do cats sleep?",
        "What do cats eat?", "Are cats good pets for children?", "How do I trim a cat's claws?",
        "Why do cats knead?", "How often should a cat see a vet?", "Do cats like water?",
        "What toys do cats like?", "How do cats see in the dark?", "Why do cats chase lasers?",
    ]  # fmt: skip
    transcript = ""
    ttft = []
    for turn in range(n_turns):
        transcript += f"User: {questions[turn % len(questions)]}\nAssistant:"
        t0 = time.perf_counter()
        first = None
        reply = ""
        for event in engine.generate(transcript, SamplingParams(), max_tokens=max_tokens, stop=["\nUser:"]):
            if isinstance(event, TextPiece) and first is None:
                first = time.perf_counter() - t0
            if isinstance(event, Finished):
                reply = event.text
        ttft.append(first if first is not None else time.perf_counter() - t0)
        transcript += reply + "\n"
    return ttft


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    from app.cli import engine_config

    config = engine_config(args)
    prompts = load_prompts(args.prompts, args.sets)
    engine = Engine(config)
    peer = None
    if not args.no_peer:
        peer = PeerPromptLookup(
            config.target_path, min(engine.n_ctx, 2048), engine.n_threads, config.n_gpu_layers
        )
    results: list[PromptResult] = []
    log = sys.stderr
    try:
        for p in prompts:
            plain, spec, peer_rates, finals = [], [], [], []
            for _ in range(args.repeat):
                a = _run(engine, p.prompt, args.max_tokens, speculate=False)
                b = _run(engine, p.prompt, args.max_tokens, speculate=True)
                plain.append(a.stats.decode_tokens_per_s)
                spec.append(b.stats.decode_tokens_per_s)
                finals.append((a, b))
                if peer is not None:
                    peer_rates.append(peer.tokens_per_s(p.prompt, args.max_tokens))
            a, b = finals[-1]
            s: Stats = b.stats
            r = PromptResult(
                name=p.name,
                set=p.set,
                plain_tokens_per_s=statistics.median(plain),
                spec_tokens_per_s=statistics.median(spec),
                peer_tokens_per_s=statistics.median(peer_rates) if peer_rates else None,
                acceptance_rate=s.acceptance_rate,
                mean_accepted_length=s.mean_accepted_length,
                n_generated=s.n_generated,
                same_text=a.token_ids == b.token_ids,
                step_overhead_ms_median=s.step_overhead_ms_median,
            )
            results.append(r)
            peer_note = f", peer {r.peer_tokens_per_s:.1f}" if r.peer_tokens_per_s else ""
            print(
                f"{p.name:16s} plain {r.plain_tokens_per_s:6.1f}  spec {r.spec_tokens_per_s:6.1f} tok/s"
                f"  x{r.speedup:.2f}{peer_note}  accepted {r.acceptance_rate:.0%}",
                file=log,
            )
        ttft = follow_up_latency(engine, args.turns) if args.turns > 0 else []
    finally:
        engine.close()
        if peer is not None:
            peer.close()
    return summarize(results, ttft, config.target_path, config.draft)


def summarize(
    results: list[PromptResult], ttft: list[float], model: str, draft: str | None
) -> dict[str, object]:
    sets: dict[str, dict[str, float | None]] = {}
    for name in dict.fromkeys(r.set for r in results):
        rs = [r for r in results if r.set == name]
        peers = [v for v in (r.vs_peer for r in rs) if v is not None]
        sets[name] = {
            "plain_tokens_per_s": statistics.median(r.plain_tokens_per_s for r in rs),
            "spec_tokens_per_s": statistics.median(r.spec_tokens_per_s for r in rs),
            "speedup": statistics.median(r.speedup for r in rs),
            "vs_peer": statistics.median(peers) if peers else None,
            "acceptance_rate": statistics.median(r.acceptance_rate for r in rs),
        }
    return {
        "model": model,
        "draft": draft,
        "prompts": [{**asdict(r), "speedup": r.speedup, "vs_peer": r.vs_peer} for r in results],
        "sets": sets,
        "median_speedup": statistics.median(r.speedup for r in results),
        "min_speedup": min(r.speedup for r in results),
        "step_overhead_ms_median": statistics.median(r.step_overhead_ms_median for r in results),
        "ttft_s": ttft,
        "ttft_turn10_over_turn1": (ttft[-1] / ttft[0]) if len(ttft) > 1 and ttft[0] > 0 else None,
    }


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "—" if v is None else format(v, spec)


def to_markdown(report: dict[str, object]) -> str:
    lines = [
        f"# Tandem bench: {Path(str(report['model'])).name}, draft {report['draft'] or 'none'}",
        "",
        "| prompt | set | plain tok/s | spec tok/s | speedup | peer tok/s | spec/peer | accepted | mean accepted | same text |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["prompts"]:  # type: ignore[attr-defined]
        lines.append(
            f"| {r['name']} | {r['set']} | {r['plain_tokens_per_s']:.1f} | {r['spec_tokens_per_s']:.1f} | "
            f"x{r['speedup']:.2f} | {_fmt(r['peer_tokens_per_s'], '.1f')} | {_fmt(r['vs_peer'])} | "
            f"{r['acceptance_rate']:.0%} | {r['mean_accepted_length']:.1f} | {'yes' if r['same_text'] else 'NO'} |"
        )
    lines += [
        "",
        "| set | plain tok/s | spec tok/s | speedup (median) | spec/peer | accepted |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in report["sets"].items():  # type: ignore[attr-defined]
        lines.append(
            f"| {name} | {s['plain_tokens_per_s']:.1f} | {s['spec_tokens_per_s']:.1f} | x{s['speedup']:.2f} | "
            f"{_fmt(s['vs_peer'])} | {s['acceptance_rate']:.0%} |"
        )
    lines += [
        "",
        f"Median speedup x{report['median_speedup']:.2f}, lowest x{report['min_speedup']:.2f}; "
        f"time outside llama.cpp per step (median of prompt medians): {report['step_overhead_ms_median']:.2f} ms.",
    ]
    ttft = report["ttft_s"]
    if ttft:
        lines.append(
            "Time to first token by conversation turn (KV cache kept between turns): "
            + ", ".join(f"{t * 1000:.0f} ms" for t in ttft)  # type: ignore[attr-defined]
            + f"; turn {len(ttft)} / turn 1 = {report['ttft_turn10_over_turn1']:.2f}."  # type: ignore[arg-type]
        )
    return "\n".join(lines) + "\n"


def cmd_bench(args: argparse.Namespace) -> int:
    from app.cli import UserError, validate_engine_args

    validate_engine_args(args)
    if args.draft in (None, "", "none"):
        raise UserError("bench needs --draft PATH or --draft ngram (it compares against plain decoding)")
    if args.repeat < 1:
        raise UserError(f"--repeat must be at least 1 (got {args.repeat})")
    report = run_bench(args)
    markdown = to_markdown(report)
    if args.out:
        Path(args.out).write_text(markdown, encoding="utf-8")
    if args.json:
        print(json.dumps(report))
    else:
        print(markdown)
    return 0
