"""`tandem models search` and `tandem models check`: the hub and the pair doctor on the command line.

Both read the hub's JSON API and GGUF headers only (HTTP Range requests): they never download a
model (docs/user/pair-doctor.md). `--measure` times stand-ins of the pair's shape here
(app/library/measure.py). The parser and the other `models` commands are in app/cli/cli_models.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.cli.cli_base import EXIT_OK, print_table, terminal_field
from app.library.catalog import detect_machine, format_bytes, load_catalog
from engine.errors import TandemError

if TYPE_CHECKING:
    from app.library import pair_doctor as doctor
    from app.library.measure import MeasureProgress, PairFigures
    from app.store import PairMeasurement

# --- search / check (the pair doctor) -------------------------------------------------------------


def cmd_search(args: argparse.Namespace) -> int:
    from app.library import pair_doctor as doctor
    from app.library.hub_search import search

    if args.limit < 1:
        raise TandemError("--limit must be at least 1")
    print(f"searching the hub for '{args.query}'…", file=sys.stderr)
    repos = search(
        args.query,
        limit=args.limit,
        timeout_s=args.timeout,
        on_listed=lambda n, total: print(f"listed the files of {n} of {total} repositories", file=sys.stderr),
    )
    machine = detect_machine(with_vram=True)
    if args.json:
        out = [
            {
                "repo_id": r.repo_id,
                "downloads": r.downloads,
                "files": [
                    {
                        "filename": f.filename,
                        "size_bytes": f.size_bytes,
                        "quantization": f.quantization,
                        "n_shards": f.n_shards,
                        "fit": doctor.file_fit(f.size_bytes, machine).kind,
                    }
                    for f in r.files
                ],
            }
            for r in repos
        ]
        print(json.dumps(out, indent=1))
        return EXIT_OK
    if not repos:
        print(f"no GGUF repositories on the hub match '{args.query}'")
        return EXIT_OK
    for r in repos:
        print(f"{r.repo_id}  ({r.downloads:,} downloads)")
        if not r.files:
            print("  (no GGUF files listed)")
        rows = []
        for quant, files in r.by_quantization():
            for f in files:
                shards = f" ({f.n_shards} parts)" if f.n_shards > 1 else ""
                fit = doctor.file_fit(f.size_bytes, machine)
                rows.append(["  " + quant, format_bytes(f.size_bytes), fit.kind, f.filename + shards])
        if rows:
            print_table(rows, sys.stdout)
    print(
        "check one: tandem models check OWNER/REPO/FILE.gguf [--draft OWNER/REPO/FILE.gguf]", file=sys.stderr
    )
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    from app.library import pair_doctor as doctor
    from app.store import shard_names

    if args.pair:
        if args.target or args.draft or args.draft_file:
            raise TandemError("give a catalog pair (--pair NAME) or files (TARGET [DRAFT]), not both")
        return _check_pair(args)
    if not args.target:
        raise TandemError("give a model to check: owner/repo/FILE.gguf, a path, or --pair NAME")
    if args.draft and args.draft_file:
        raise TandemError("give the draft once: as DRAFT or as --draft, not both")
    draft_text = args.draft or args.draft_file
    target = doctor.parse_model_ref(args.target)
    draft = doctor.parse_model_ref(draft_text) if draft_text else None
    print("reading the headers (no download)…", file=sys.stderr)
    report = doctor.check(target, draft, n_ctx=args.ctx, timeout_s=args.timeout)
    if args.measure:  # the figures of stand-ins timed here (kept for the catalog's cards too)
        report = dataclasses.replace(
            report, here=doctor.measure_here(report, on_progress=_measure_progress())
        )
    candidates: list[doctor.DraftCandidate] = []
    if draft is None and not args.no_drafts and not args.measure:
        print("looking for drafts on the hub…", file=sys.stderr)
        try:
            candidates = doctor.find_drafts(target, report.target, n_ctx=args.ctx, timeout_s=args.timeout)
        except TandemError as e:  # the target's own check stands; say why no drafts were found
            print(f"no drafts looked for: {e}", file=sys.stderr)
    if args.json:
        print(json.dumps(_report_json(report, candidates), indent=1, default=str))
        return EXIT_OK
    for line in doctor.report_lines(report):
        print(terminal_field(line))
    if draft is None:
        print("drafts:")
        ngram = f"; {doctor.describe_measured(report.measured)}" if report.measured else ""
        print(f"  ngram  ({doctor.NGRAM_NOTE}{ngram})")
        for c in candidates:
            print("  " + terminal_field(doctor.describe_candidate(c)))
    refs = [r for r in (target, draft) if r is not None and not r.is_local]
    if refs and report.refusal is None:
        print(
            "download: "
            + "; ".join(
                f"tandem models download {r.repo_id} {name}" for r in refs for name in shard_names(r.filename)
            )
        )
    return EXIT_OK


def _measure_progress() -> Callable[[MeasureProgress], None]:
    """Progress on stderr: a line when the stage changes, else at most one a second."""
    stream = sys.stderr
    last: list[Any] = [0.0, ""]
    words = {
        "write": "writing a stand-in of",
        "load": "loading the stand-in of",
        "time": "timing the stand-in of",
    }

    def show(p: MeasureProgress) -> None:
        now = time.monotonic()
        what = f"{words[p.stage]} the {p.role} ({p.label})"
        if what == last[1] and now - float(last[0]) < 1.0 and p.fraction < 1.0:
            return
        last[0], last[1] = now, what
        batch = f", {p.batch} tokens at once" if p.batch else ""
        print(f"measuring on this computer: {p.fraction:4.0%} {what}{batch}", file=stream, flush=True)

    print(
        "measuring on this computer with stand-ins (the same shape and quantisation, random weights; "
        "nothing is downloaded, nothing is kept)…",
        file=stream,
    )
    return show


def _check_pair(args: argparse.Namespace) -> int:
    """`check --pair NAME [--measure]`: a catalog pair's figures on this computer: those kept, or
    (--measure) stand-ins of its models timed, from their headers as `check REF --measure` reads them."""
    from app.library import pair_doctor as doctor
    from app.library.catalog import CatalogModel
    from app.library.default_model import ensure_default_model
    from app.library.measure import describe_lines, figures_here, model_id

    pair = load_catalog().find_pair(args.pair)

    def ref(m: CatalogModel) -> doctor.ModelRef:
        if m.repo_id is None:  # the embedded model, shipped inside Tandem's own packages
            return doctor.ModelRef(path=ensure_default_model())
        return doctor.ModelRef(m.repo_id, m.filename, m.revision)

    if args.measure:
        print("reading the headers (no download)…", file=sys.stderr)
        draft = ref(pair.draft) if pair.draft is not None else None
        report = doctor.check(ref(pair.target), draft, n_ctx=args.ctx, timeout_s=args.timeout)
        fig = doctor.measure_here(report, on_progress=_measure_progress())
    else:
        draft_id = model_id(pair.draft.repo_id, pair.draft.filename) if pair.draft is not None else None
        found = figures_here(model_id(pair.target.repo_id, pair.target.filename), draft_id)
        if found is None:
            print(f"{pair.title}: not measured on this computer yet; add --measure (about a minute for a 7B)")
            return EXIT_OK
        fig = found
    if args.json:
        print(json.dumps({"pair": pair.name, "here": _here_json(fig)}, indent=1, default=str))
        return EXIT_OK
    print(f"pair: {pair.title}")
    for line in describe_lines(fig):
        print(line)
    return EXIT_OK


def _report_json(report: doctor.CheckReport, candidates: list[doctor.DraftCandidate]) -> dict[str, Any]:
    def facts(f: doctor.ModelFacts | None) -> dict[str, Any] | None:
        if f is None:
            return None
        return {
            "model": f.ref.label,
            "architecture": f.info.architecture,
            "n_params": f.info.n_params,
            "quantization": f.info.quantization,
            "context_length": f.info.context_length,
            "has_chat_template": f.info.chat_template is not None,
            "size_bytes": f.size_bytes,
            "fetched_bytes": f.fetched_bytes,
        }

    r = report.refusal
    m = report.memory
    return {
        "target": facts(report.target),
        "draft": facts(report.draft),
        "pairs": None if report.draft is None else r is None,
        "rule": None if r is None else r.rule,
        "target_value": None if r is None else r.target_value,
        "draft_value": None if r is None else r.draft_value,
        "memory": {
            **dataclasses.asdict(m),
            "total_bytes": m.total_bytes,
            "free_bytes": report.fit.free_bytes,
            "fit": report.fit.kind,
        },
        "estimate": None
        if report.estimate is None
        else {"is_estimate": True, "low": report.estimate.low, "high": report.estimate.high},
        # What replies with this pair (no draft: with n-gram lookup) measured on this machine.
        "measured": _measured_json(report.measured),
        # What stand-ins of these models measured on this machine.
        "here": _here_json(report.here),
        "drafts": [
            {
                "model": f"{c.file.repo_id}/{c.file.filename}",
                "measured": _measured_json(c.measured),
                "pairs": None if c.facts is None else c.refusal is None,
                "rule": None if c.refusal is None else c.refusal.rule,
                "fit": None if c.fit is None else c.fit.kind,
                "problem": c.problem or None,
            }
            for c in candidates
        ],
    }


def _here_json(fig: PairFigures | None) -> dict[str, Any] | None:
    if fig is None:
        return None
    v = fig.verdict
    return {
        "plain_tokens_per_s": fig.target.plain_tokens_per_s,
        "ngram_ceiling": fig.target.ceiling,
        "copy_speedup": fig.copy_speedup,
        "target_t_ms": fig.target.t_ms,
        "draft_t_ms": fig.draft.t_ms if fig.draft else None,
        "draft": None
        if v is None
        else {"speedup": v.speedup, "draft_len": v.draft_len, "acceptance": v.acceptance, "pays": v.pays},
        "measured_at": fig.target.measured_at,
    }


def _measured_json(m: PairMeasurement | None) -> dict[str, Any] | None:
    return None if m is None else dataclasses.asdict(m)
