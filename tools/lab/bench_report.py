"""The lab bench's report: a prompt's row (PromptResult), the run's summary as JSON
(`summarize`) and as Markdown (`to_markdown`): decode beside the ceiling and the peers, llama-server's
n-gram kinds against Tandem's first use and warmed processes, whole processes, and whether the
plain reply did the work its prompt names.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.cli.bench import same_text_note
from engine.config import DraftChoice
from tools.lab.bench_peers import SERVER_KINDS


@dataclass(frozen=True)
class PromptResult:
    name: str
    set: str
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    ceiling: float | None  # best possible decode speedup on this machine now (all drafts accepted)
    peer_tokens_per_s: float | None  # llama-cpp-python's LlamaPromptLookupDecoding
    lookup_tokens_per_s: float | None  # llama.cpp's llama-lookup
    lookup_acceptance: float | None
    acceptance_rate: float
    mean_accepted_length: float
    n_generated: int
    same_text: bool  # speculative output == plain output, in this process
    same_text_processes: bool | None  # the same across the two `tandem generate` processes
    step_overhead_ms_median: float
    # With a draft model: the share of accepted drafts that came from n-gram matches in the text.
    accepted_from_text: float | None
    # Asked again (--again): the share of accepted drafts that came from the earlier answer.
    accepted_from_memory: float | None
    plain_process_s: float | None  # whole processes, timed from outside (medians)
    spec_process_s: float | None
    lookup_process_s: float | None
    spec_load_s: float | None
    spec_catch_up_s: float | None
    spec_prefill_s: float | None
    spec_decode_s: float | None
    batch_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # verify batch t(n), ms
    # The documents set, of the plain reply: the share copied from the documents, the share that
    # repeats itself (copy_and_loop_shares), its opening words; and drafts taken from the documents.
    copied: float | None = None
    looped: float | None = None
    opening: str = ""
    accepted_from_document: float | None = None
    # llama-server's n-gram kinds (median decode tok/s, and drafted/accepted of the last run).
    server_tokens_per_s: dict[str, float] = dataclasses.field(default_factory=dict)
    server_accepted: dict[str, str] = dataclasses.field(default_factory=dict)
    server_same_text: bool | None = None  # the best kind's text is Tandem's plain text
    # `tandem generate` decode tok/s: a first use (an empty data folder every run), and warmed.
    first_use_tokens_per_s: float | None = None
    warmed_tokens_per_s: float | None = None
    first_use_process_s: float | None = None
    first_use_prefill_s: float | None = None  # with the first reply's timing of a few batch sizes
    plain_process_tokens_per_s: float | None = None  # `tandem generate` without drafts, decode tok/s

    @property
    def best_server(self) -> tuple[str, float] | None:
        if not self.server_tokens_per_s:
            return None
        kind = max(self.server_tokens_per_s, key=lambda k: self.server_tokens_per_s[k])
        return kind, self.server_tokens_per_s[kind]

    @property
    def first_use_vs_server(self) -> float | None:
        best = self.best_server
        return (
            self.first_use_tokens_per_s / best[1]
            if best and best[1] and self.first_use_tokens_per_s
            else None
        )

    @property
    def warmed_vs_server(self) -> float | None:
        best = self.best_server
        return self.warmed_tokens_per_s / best[1] if best and best[1] and self.warmed_tokens_per_s else None

    def of_ceiling_at(self, tokens_per_s: float | None) -> float | None:
        """A process's decode speed as a share of the ceiling (against the plain process's speed)."""
        plain = self.plain_process_tokens_per_s or self.plain_tokens_per_s
        if not tokens_per_s or not plain or not self.ceiling:
            return None
        return tokens_per_s / plain / self.ceiling

    @property
    def speedup(self) -> float:
        return self.spec_tokens_per_s / self.plain_tokens_per_s if self.plain_tokens_per_s else 0.0

    @property
    def of_ceiling(self) -> float | None:
        return self.speedup / self.ceiling if self.ceiling else None

    @property
    def vs_peer(self) -> float | None:
        return self.spec_tokens_per_s / self.peer_tokens_per_s if self.peer_tokens_per_s else None

    @property
    def vs_lookup(self) -> float | None:
        return self.spec_tokens_per_s / self.lookup_tokens_per_s if self.lookup_tokens_per_s else None

    @property
    def process_speedup(self) -> float | None:
        if not self.plain_process_s or not self.spec_process_s:
            return None
        return self.plain_process_s / self.spec_process_s


def summarize(
    results: list[PromptResult],
    ttft: list[float],
    model: str,
    draft: DraftChoice,
    args: argparse.Namespace | None = None,
) -> dict[str, object]:
    def med(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    sets: dict[str, dict[str, float | None]] = {}
    for name in dict.fromkeys(r.set for r in results):
        rs = [r for r in results if r.set == name]
        sets[name] = {
            "plain_tokens_per_s": statistics.median(r.plain_tokens_per_s for r in rs),
            "spec_tokens_per_s": statistics.median(r.spec_tokens_per_s for r in rs),
            "speedup": statistics.median(r.speedup for r in rs),
            "ceiling": med([r.ceiling for r in rs]),
            "of_ceiling": med([r.of_ceiling for r in rs]),
            "vs_peer": med([r.vs_peer for r in rs]),
            "vs_lookup": med([r.vs_lookup for r in rs]),
            "process_speedup": med([r.process_speedup for r in rs]),
            "acceptance_rate": statistics.median(r.acceptance_rate for r in rs),
            "first_use_vs_server": med([r.first_use_vs_server for r in rs]),
            "warmed_vs_server": med([r.warmed_vs_server for r in rs]),
        }
    import llama_cpp

    from engine.costcache import build_identity, cpu_identity

    return {
        "model": model,
        "draft": draft.text,
        "max_tokens": getattr(args, "max_tokens", None),
        "again": bool(getattr(args, "again", False)),
        "temperature": getattr(args, "temperature", 0.0),
        "repeat_penalty": getattr(args, "repeat_penalty", 1.0),
        "threads": getattr(args, "threads", None),
        "machine": cpu_identity(),
        "build": build_identity().split("|", 1)[-1].strip(),
        "llama_cpp_python": llama_cpp.__version__,
        "prompts": [
            {
                **asdict(r),
                "speedup": r.speedup,
                "of_ceiling": r.of_ceiling,
                "vs_peer": r.vs_peer,
                "vs_lookup": r.vs_lookup,
                "best_server": r.best_server,
                "first_use_vs_server": r.first_use_vs_server,
                "warmed_vs_server": r.warmed_vs_server,
                "first_use_of_ceiling": r.of_ceiling_at(r.first_use_tokens_per_s),
                "warmed_of_ceiling": r.of_ceiling_at(r.warmed_tokens_per_s),
                "server_of_ceiling": r.of_ceiling_at(r.best_server[1] if r.best_server else None),
                "process_speedup": r.process_speedup,
            }
            for r in results
        ],
        "sets": sets,
        "median_first_use_vs_server": med([r.first_use_vs_server for r in results]),
        "min_first_use_vs_server": min(
            (v for v in (r.first_use_vs_server for r in results) if v), default=None
        ),
        "median_warmed_vs_server": med([r.warmed_vs_server for r in results]),
        "min_warmed_vs_server": min((v for v in (r.warmed_vs_server for r in results) if v), default=None),
        "median_speedup": statistics.median(r.speedup for r in results),
        "min_speedup": min(r.speedup for r in results),
        "median_process_speedup": med([r.process_speedup for r in results]),
        "min_process_speedup": min((v for v in (r.process_speedup for r in results) if v), default=None),
        "step_overhead_ms_median": statistics.median(r.step_overhead_ms_median for r in results),
        "ttft_s": ttft,
        "ttft_turn10_over_turn1": (ttft[-1] / ttft[0]) if len(ttft) > 1 and ttft[0] > 0 else None,
    }


def _fmt(v: float | None, spec: str = ".2f", prefix: str = "") -> str:
    return "—" if v is None else prefix + format(v, spec)


def to_markdown(report: dict[str, object]) -> str:
    prompts: list[dict[str, Any]] = report["prompts"]  # type: ignore[assignment]
    lines = [
        f"# Tandem bench: {Path(str(report['model'])).name}, draft {report['draft'] or 'none'}",
        "",
        f"{report['max_tokens']} tokens, temperature {report['temperature']}, repeat penalty "
        f"{report.get('repeat_penalty', 1.0)}, threads "
        f"{report['threads'] or 'all cores'}; CPU: {report['machine']}; llama-cpp-python "
        f"{report['llama_cpp_python']}, llama.cpp built with: {report['build']}",
        *(
            [
                "",
                "Each request asked again: the measured runs follow a first answer (not timed, "
                "another seed when sampling) that Tandem drafts from, and llama-lookup from its "
                "dynamic n-gram cache (-lcd). No whole-process runs: earlier answers live in a process.",
            ]
            if report.get("again")
            else []
        ),
        "",
        "## Decode (tokens/s once the prompt is in)",
        "",
        "| prompt | set | plain | spec | speedup | ceiling | of ceiling | llama-cpp-python lookup "
        "| spec/it | llama-lookup | spec/it | accepted | llama-lookup accepted | mean accepted "
        "| accepted from the text | from the earlier answer | same text |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    same = {True: "yes", False: "NO", None: "—"}
    for r in prompts:
        lines.append(
            f"| {r['name']} | {r['set']} | {r['plain_tokens_per_s']:.1f} | {r['spec_tokens_per_s']:.1f} | "
            f"x{r['speedup']:.2f} | {_fmt(r['ceiling'], '.2f', 'x')} | {_fmt(r['of_ceiling'], '.0%')} | "
            f"{_fmt(r['peer_tokens_per_s'], '.1f')} | {_fmt(r['vs_peer'], '.2f', 'x')} | "
            f"{_fmt(r['lookup_tokens_per_s'], '.1f')} | {_fmt(r['vs_lookup'], '.2f', 'x')} | "
            f"{r['acceptance_rate']:.0%} | {_fmt(r['lookup_acceptance'], '.0%')} | "
            f"{r['mean_accepted_length']:.1f} | {_fmt(r.get('accepted_from_text'), '.0%')} | "
            f"{_fmt(r.get('accepted_from_memory'), '.0%')} | {same[r['same_text']]} |"
        )
    if any(r.get("best_server") for r in prompts):
        lines += [
            "",
            "## Against llama-server's n-gram kinds (decode tok/s as each reports it)",
            "",
            "Tandem by `tandem generate`, two states: a first use on a new machine (an empty data "
            "folder every run: nothing timed or learned) and warmed (the bench's cost cache: one "
            "earlier reply and the machine's batches timed, as the window leaves it). llama-server "
            "(same build) at each `--spec-type` default, a fresh server a reply.",
            "",
            "| prompt | " + " | ".join(SERVER_KINDS) + " | best kind | of ceiling | Tandem first use "
            "| first / best | of ceiling | Tandem warmed | warmed / best | of ceiling "
            "| best kind's text = plain | first use: prefill s / whole s | warmed: prefill s / whole s |",
            "|---|" + "---|" * len(SERVER_KINDS) + "---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prompts:
            if not r.get("best_server"):
                continue
            rates = r["server_tokens_per_s"]
            accepted = r.get("server_accepted") or {}
            cells = [f"{rates[k]:.1f} ({accepted.get(k, '?')})" if k in rates else "—" for k in SERVER_KINDS]
            kind, best = r["best_server"]
            lines.append(
                f"| {r['name']} | " + " | ".join(cells) + f" | {kind} {best:.1f} | "
                f"{_fmt(r.get('server_of_ceiling'), '.0%')} | {_fmt(r['first_use_tokens_per_s'], '.1f')} | {_fmt(r['first_use_vs_server'], '.2f', 'x')} | "
                f"{_fmt(r['first_use_of_ceiling'], '.0%')} | {_fmt(r['warmed_tokens_per_s'], '.1f')} | "
                f"{_fmt(r['warmed_vs_server'], '.2f', 'x')} | {_fmt(r['warmed_of_ceiling'], '.0%')} | "
                f"{same[r.get('server_same_text')]} | {_fmt(r.get('first_use_prefill_s'))} / "
                f"{_fmt(r.get('first_use_process_s'))} | {_fmt(r.get('spec_prefill_s'))} / "
                f"{_fmt(r.get('spec_process_s'))} |"
            )
        lines += [
            "",
            f"Tandem against the best kind per prompt: first use median "
            f"{_fmt(report.get('median_first_use_vs_server'), '.2f', 'x')} "  # type: ignore[arg-type]
            f"(lowest {_fmt(report.get('min_first_use_vs_server'), '.2f', 'x')}), warmed median "  # type: ignore[arg-type]
            f"{_fmt(report.get('median_warmed_vs_server'), '.2f', 'x')} "  # type: ignore[arg-type]
            f"(lowest {_fmt(report.get('min_warmed_vs_server'), '.2f', 'x')}). (n/m): drafted tokens "  # type: ignore[arg-type]
            "accepted of drafted. Of ceiling: the process's decode speed over the plain process's, "
            "as a share of the ceiling measured in the same run (for the best kind: its speed over "
            "the plain process's; k times the best kind needs k times its share). A first use's "
            "prefill includes timing "
            "a few verify batch sizes once (engine.adaptive.FIRST_REPLY_SIZES).",
        ]
    batch_ms = [r.get("batch_ms") or {} for r in prompts]
    sizes = sorted({int(n) for b in batch_ms for n in b})
    if sizes:
        medians = {n: statistics.median(b[str(n)] for b in batch_ms if str(n) in b) for n in sizes}
        lines += [
            "",
            "Verify batch cost t(n) on this machine during the run, after the prompt and half the "
            "reply (ms, median over prompts): "
            + ", ".join(f"{n}: {medians[n]:.1f}" for n in sizes)
            + ". Ceiling = max over n of n·t(1)/t(n).",
        ]
    if any(r["plain_process_s"] for r in prompts):
        lines += [
            "",
            "## Whole process (`tandem generate`, timed from outside, cost cache warm)",
            "",
            "| prompt | plain s | spec s | speedup | spec: load | draft catch-up | prefill | decode "
            "| llama-lookup s | same text |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prompts:
            lines.append(
                f"| {r['name']} | {_fmt(r['plain_process_s'])} | {_fmt(r['spec_process_s'])} | "
                f"{_fmt(r['process_speedup'], '.2f', 'x')} | {_fmt(r['spec_load_s'])} | "
                f"{_fmt(r['spec_catch_up_s'])} | {_fmt(r['spec_prefill_s'])} | {_fmt(r['spec_decode_s'])} | "
                f"{_fmt(r['lookup_process_s'])} | {same[r['same_text_processes']]} |"
            )
    if any(r.get("copied") is not None for r in prompts):
        # The documents set's reports (and their readers) know this section by its old heading.
        documents = "Documents: does" if any(r.get("set") == "documents" for r in prompts) else "Does"
        lines += [
            "",
            f"## {documents} the model do the work the request names? (the plain reply)",
            "",
            "| prompt | reply tokens | copied from the documents (or prompt) | repeats itself | drafts from the documents "
            "| opens with |",
            "|---|---|---|---|---|---|",
        ]
        for r in prompts:
            if r.get("copied") is not None:
                lines.append(
                    f"| {r['name']} | {r['n_generated']} | {r['copied']:.0%} | {r['looped']:.0%} | "
                    f"{_fmt(r.get('accepted_from_document'), '.0%')} | {r['opening']} |"
                )
        lines.append(
            "Copied: the share of the reply's tokens inside 6-grams found in the documents; repeats "
            "itself: the share of its 6-grams it had said before (a loop drafts fast and is no copy)."
        )
    lines += [
        "",
        "## Sets (medians)",
        "",
        "| set | plain tok/s | spec tok/s | decode speedup | of ceiling | vs llama-cpp-python | "
        "vs llama-lookup | whole process | accepted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["sets"].items():  # type: ignore[attr-defined]
        lines.append(
            f"| {name} | {s['plain_tokens_per_s']:.1f} | {s['spec_tokens_per_s']:.1f} | x{s['speedup']:.2f} | "
            f"{_fmt(s['of_ceiling'], '.0%')} | {_fmt(s['vs_peer'], '.2f', 'x')} | "
            f"{_fmt(s['vs_lookup'], '.2f', 'x')} | {_fmt(s['process_speedup'], '.2f', 'x')} | "
            f"{s['acceptance_rate']:.0%} |"
        )
    lines += [
        "",
        f"Decode: median speedup x{report['median_speedup']:.2f}, lowest x{report['min_speedup']:.2f}. "
        f"Whole process: median {_fmt(report['median_process_speedup'], '.2f', 'x')}, "  # type: ignore[arg-type]
        f"lowest {_fmt(report['min_process_speedup'], '.2f', 'x')}. "  # type: ignore[arg-type]
        f"Time outside llama.cpp per step (median of prompt medians): {report['step_overhead_ms_median']:.2f} ms.",
        same_text_note(report),
    ]
    ttft = report["ttft_s"]
    if ttft:
        lines.append(
            "Time to first token by conversation turn (KV cache kept between turns): "
            + ", ".join(f"{t * 1000:.0f} ms" for t in ttft)  # type: ignore[attr-defined]
            + f"; turn {len(ttft)} / turn 1 = {report['ttft_turn10_over_turn1']:.2f}."  # type: ignore[arg-type]
        )
    return "\n".join(lines) + "\n"
