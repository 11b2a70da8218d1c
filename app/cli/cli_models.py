"""`tandem models ...`: the model library on the command line.

    tandem models download REPO_ID FILENAME [--revision REV]
    tandem models download --pair NAME
    tandem models list
    tandem models pairs TARGET
    tandem models import PATH
    tandem models catalog
    tandem models search QUERY [--limit N] [--json]
    tandem models check TARGET [DRAFT | --draft DRAFT] [--ctx N] [--measure] [--json]

`search` and `check` read the hub's JSON API and GGUF headers only (HTTP Range requests): they
never download a model (docs/pair-doctor.md).

Progress goes to stderr, results to stdout (`download` and `import` print the local path as
their last stdout line, so scripts can take it with `tail -1`). Every failure is one line on
stderr starting with `error: ` and exit code 2; an interrupted download keeps its .part file
and resumes on the next run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from app import paths
from app.cli.cli_base import EXIT_BAD_INPUT, EXIT_OK, Parser, at_the_edge
from app.library.catalog import (
    Catalog,
    LocalModel,
    detect_machine,
    draft_choices,
    fit_for,
    format_bytes,
    format_eta,
    format_params,
    import_model,
    load_catalog,
    scan_local_models,
)
from app.library.downloads import DownloadProgress, FileRequest, download_files, pair_requests
from app.library.model_spec import parse_model
from engine.errors import TandemError

if TYPE_CHECKING:
    from app.library import pair_doctor as doctor
    from app.library.measure import MeasureProgress, PairFigures
    from app.store import PairMeasurement

EXIT_ERROR = EXIT_BAD_INPUT


def add_models_parser(
    subparsers: argparse._SubParsersAction[Parser],
) -> argparse.ArgumentParser:
    """Register `models` and its sub-commands; the handler is set as `handler=run_models`."""
    models = subparsers.add_parser(
        "models",
        help="download, list, import and pair GGUF models",
        description="The model library: catalog pairs, downloads that resume, local files.",
    )
    models.set_defaults(handler=run_models)
    sub = models.add_subparsers(dest="models_command", metavar="COMMAND")
    sub.required = True

    download = sub.add_parser("download", help="download a GGUF file or a catalog pair from the hub")
    download.add_argument(
        "repo_id", nargs="?", help="hub repository, e.g. bartowski/Qwen2.5-7B-Instruct-GGUF"
    )
    download.add_argument("filename", nargs="?", help="GGUF file in that repository")
    download.add_argument("--revision", default="main", help="branch, tag or commit (default: main)")
    download.add_argument("--pair", metavar="NAME", help="download both files of a catalog pair")
    download.add_argument("--sha256", help="expected sha256 of the file (the hub's own is checked anyway)")
    download.add_argument("--catalog", type=Path, help=argparse.SUPPRESS)

    sub.add_parser("list", help="local models with size, architecture, quantisation, parameters, context")

    pairs = sub.add_parser("pairs", help="local drafts that can draft for TARGET, and why the others cannot")
    pairs.add_argument("target", help="a .gguf path, the file name of a local model, or `default`")

    imp = sub.add_parser("import", help="check a GGUF file and copy it into the models folder")
    imp.add_argument("path", type=Path)

    catalog = sub.add_parser("catalog", help="curated pairs, their sizes and whether they fit this machine")
    catalog.add_argument("--catalog", type=Path, help=argparse.SUPPRESS)
    catalog.add_argument("--json", action="store_true", help="machine-readable output")

    search = sub.add_parser("search", help="GGUF repositories on the hub, files by quantisation, sizes, fit")
    search.add_argument("query", help="words to look for, e.g. `qwen2.5 7b instruct`")
    search.add_argument("--limit", type=int, default=10, help="repositories to list (default 10)")
    search.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the hub")
    search.add_argument("--json", action="store_true", help="machine-readable output")

    check = sub.add_parser(
        "check",
        help="judge a target (and a draft) from their headers, without downloading them",
        description="TARGET and DRAFT: owner/repo/FILE.gguf on the hub, or a path to a .gguf file. "
        "Without --draft, candidate drafts are looked for on the hub and checked.",
    )
    check.add_argument("target", nargs="?", help="owner/repo/FILE.gguf, or a local path")
    check.add_argument("draft_file", nargs="?", metavar="DRAFT", help="the draft (as --draft)")
    check.add_argument(
        "--pair",
        metavar="NAME",
        help="a catalog pair instead of files: with --measure, stand-ins of its known shapes "
        "(no header read, works offline)",
    )
    check.add_argument("--draft", help="owner/repo/FILE.gguf, or a local path")
    check.add_argument(
        "--measure",
        action="store_true",
        help="time stand-ins of the same shape (random weights) on this computer: plain speed, "
        "the n-gram ceiling, whether the draft pays; nothing is downloaded",
    )
    check.add_argument(
        "--ctx", type=int, default=4096, help="context in tokens for the KV caches (default 4096)"
    )
    check.add_argument("--no-drafts", action="store_true", help="without --draft: do not look for drafts")
    check.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the hub")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    return models


def run_models(args: argparse.Namespace) -> int:
    """Run a parsed `models` command; TandemErrors become one `error:` line and exit code 2."""
    commands = {
        "download": _cmd_download,
        "list": _cmd_list,
        "pairs": _cmd_pairs,
        "import": _cmd_import,
        "catalog": _cmd_catalog,
        "search": _cmd_search,
        "check": _cmd_check,
    }
    interrupted = (
        "interrupted; nothing was downloaded"
        if args.models_command in ("search", "check")
        else "interrupted; a partial download is kept and resumes when you run the command again"
    )
    return at_the_edge(lambda: commands[args.models_command](args), interrupted=interrupted)


def main_models(argv: list[str]) -> int:
    """`tandem models ARGV...` as a function, for tests and `python -m app.cli.cli_models`."""
    parser = Parser(prog="tandem")
    subparsers = parser.add_subparsers(dest="command", parser_class=Parser)
    add_models_parser(subparsers)
    try:
        args = parser.parse_args(["models", *argv])
    except SystemExit as e:
        return int(e.code) if isinstance(e.code, int) else EXIT_ERROR
    return run_models(args)


# --- download --------------------------------------------------------------------------------


class _ProgressPrinter:
    """A live line on a terminal; one line a second when stderr is a file or a pipe."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.is_tty = stream.isatty()
        self._last_line_s = 0.0
        self._line_open = False

    def __call__(self, p: DownloadProgress) -> None:
        now = time.monotonic()
        is_final = p.state in ("done", "verifying", "retrying", "paused", "cancelled")
        if not is_final and now - self._last_line_s < (0.2 if self.is_tty else 1.0):
            return
        self._last_line_s = now
        speed = f"{format_bytes(p.bytes_per_s)}/s" if p.bytes_per_s else "-"
        eta = format_eta(p.eta_s)
        files = f"[{p.file_index + 1}/{p.n_files}] " if p.n_files > 1 else ""
        line = (
            f"{files}{p.filename}: {p.state} {format_bytes(p.file_done_bytes)} / "
            f"{format_bytes(p.file_total_bytes)} ({p.file_fraction:.0%})"
        )
        if p.n_files > 1:
            line += f", all: {p.total_fraction:.0%}"
        if p.state == "downloading":
            line += f", {speed}, {eta} left"
        if p.message:
            line += f" - {p.message}"
        if self.is_tty:
            self.stream.write("\r\x1b[K" + line)
            self._line_open = True
            if p.state in ("done", "retrying"):
                self.stream.write("\n")
                self._line_open = False
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self._line_open:
            self.stream.write("\n")
            self.stream.flush()
            self._line_open = False


def _catalog(args: argparse.Namespace) -> Catalog:
    return load_catalog(getattr(args, "catalog", None))


def _cmd_download(args: argparse.Namespace) -> int:
    if args.pair and (args.repo_id or args.filename):
        raise TandemError("give either --pair NAME or REPO_ID FILENAME, not both")
    if args.pair:
        pair = _catalog(args).find_pair(args.pair)
        requests = pair_requests(pair)
        if not requests:
            # The embedded pair ships inside Tandem's own packages: assemble it, nothing to fetch.
            from app.library.default_model import ensure_default_model

            print(ensure_default_model())
            return EXIT_OK
        print(
            f"downloading {pair.title}: {format_bytes(pair.download_bytes)} (approximate)",
            file=sys.stderr,
        )
    elif args.repo_id and args.filename:
        requests = [FileRequest(args.repo_id, args.filename, args.revision, args.sha256)]
    else:
        raise TandemError(
            "give REPO_ID FILENAME (e.g. Qwen/Qwen3-0.6B-GGUF Qwen3-0.6B-Q8_0.gguf) or --pair NAME"
        )
    printer = _ProgressPrinter(sys.stderr)
    try:
        paths_done = download_files(requests, on_progress=printer)
    finally:
        printer.close()
    for path in paths_done:
        print(path)
    return EXIT_OK


# --- list / pairs / import / catalog ------------------------------------------------------------


def _table(rows: list[list[str]], stream: TextIO) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        stream.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")


def _cmd_list(args: argparse.Namespace) -> int:
    folder = paths.models_dir()
    models = scan_local_models(folder)
    if not models:
        print(
            f"no models in {folder}; try `tandem models download --pair NAME` or `tandem models import PATH`"
        )
        return EXIT_OK
    rows = [["FILE", "SIZE", "ARCH", "QUANT", "PARAMS", "CONTEXT", "NAME"]]
    problems: list[LocalModel] = []
    for m in models:
        rel = str(m.path.relative_to(folder)) if m.path.is_relative_to(folder) else str(m.path)
        if m.info is None:
            problems.append(m)
            rows.append([rel, format_bytes(m.size_bytes), "-", "-", "-", "-", "unreadable (see below)"])
            continue
        info = m.info
        ctx = f"{info.context_length:,}" if info.context_length else "?"
        rows.append(
            [rel, format_bytes(m.size_bytes), info.architecture, info.quantization,
             format_params(info.n_params), ctx, info.name]
        )  # fmt: skip
    _table(rows, sys.stdout)
    for m in problems:
        print(f"{m.path.name}: {m.problem}")
    print(f"{len(models)} model file(s) in {folder}")
    return EXIT_OK


def _resolve_target(spec: str) -> Path:
    model = parse_model(spec)
    if model.embedded is not None:  # `default`, `default-f16`: as everywhere else
        return Path(model.resolve())
    path = Path(spec).expanduser()
    if path.exists():
        return path
    matches = [m.path for m in scan_local_models() if spec in (m.path.name, m.path.stem)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise TandemError(f"'{spec}' matches {len(matches)} local models; give the full path")
    raise TandemError(f"no model file '{spec}' (neither a path nor a model in {paths.models_dir()})")


def _cmd_pairs(args: argparse.Namespace) -> int:
    from engine.gguf_info import read_gguf_info

    target_path = _resolve_target(args.target)
    target = read_gguf_info(target_path)
    choices = draft_choices(target, scan_local_models())
    compatible = [c for c in choices if c.is_compatible]
    incompatible = [c for c in choices if not c.is_compatible]
    print(f"target: {target.name} ({target_path})")
    print("compatible drafts:")
    print("  ngram  (prompt lookup: no draft model needed)")
    for c in compatible:
        print(f"  {c.path}")
    if incompatible:
        print("incompatible:")
        for c in incompatible:
            print(f"  {c.path}: {c.problem}")
    return EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    path = import_model(args.path)
    print(path)
    return EXIT_OK


def _cmd_catalog(args: argparse.Namespace) -> int:
    catalog = _catalog(args)
    machine = detect_machine()
    if args.json:
        out = []
        for pair in catalog.pairs:
            fit = fit_for(pair, machine)
            out.append(
                {
                    "name": pair.name,
                    "title": pair.title,
                    "download_bytes": pair.download_bytes,
                    "fits": fit.is_fitting,
                    "fit_reason": fit.reason,
                    "reported_speedup": pair.reported_speedup.factor if pair.reported_speedup else None,
                    "source": pair.reported_speedup.source if pair.reported_speedup else None,
                }
            )
        print(json.dumps(out, indent=1))
        return EXIT_OK
    rows = [["PAIR", "DOWNLOAD", "FITS", "REPORTED", "TITLE"]]
    for pair in catalog.pairs:
        fit = fit_for(pair, machine)
        size = "built in" if pair.is_embedded else format_bytes(pair.download_bytes)
        speed = f"{pair.reported_speedup.factor:.1f}x" if pair.reported_speedup else "-"
        fits = "no" if not fit.is_fitting else "yes (GPU advised)" if fit.is_gpu_advised else "yes"
        rows.append([pair.name, size, fits, speed, pair.title])
    _table(rows, sys.stdout)
    print("\npairs that do not work (llama.cpp's vocabulary rules):")
    for bad in catalog.incompatible:
        print(f"  {bad.target} + {bad.draft}: {bad.rule} differs; {bad.reason}")
    print("\nreported speedups are others' numbers on their hardware; see `--json` for sources")
    return EXIT_OK


# --- search / check (the pair doctor) -------------------------------------------------------------


def _cmd_search(args: argparse.Namespace) -> int:
    from app.library import pair_doctor as doctor

    if args.limit < 1:
        raise TandemError("--limit must be at least 1")
    print(f"searching the hub for '{args.query}'…", file=sys.stderr)
    repos = doctor.search(
        args.query,
        limit=args.limit,
        timeout_s=args.timeout,
        on_listed=lambda n, total: print(f"listed the files of {n} of {total} repositories", file=sys.stderr),
    )
    machine = doctor.machine_memory()
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
            _table(rows, sys.stdout)
    print(
        "check one: tandem models check OWNER/REPO/FILE.gguf [--draft OWNER/REPO/FILE.gguf]", file=sys.stderr
    )
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from app.library import pair_doctor as doctor

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
    if args.measure:
        report = _measure(report)
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
        print(line)
    if draft is None:
        print("drafts:")
        ngram = f"; {doctor.describe_measured(report.measured)}" if report.measured else ""
        print(f"  ngram  ({doctor.NGRAM_NOTE}{ngram})")
        for c in candidates:
            print("  " + doctor.describe_candidate(c))
    refs = [r for r in (target, draft) if r is not None and not r.is_local]
    if refs and (report.verdict is None or report.verdict.is_compatible):
        print(
            "download: "
            + "; ".join(
                f"tandem models download {r.repo_id} {name}"
                for r in refs
                for name in doctor.shard_names(r.filename)
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


def _measure(report: doctor.CheckReport) -> doctor.CheckReport:
    """Time stand-ins of the checked models here, with progress on stderr; the report then carries
    the figures (and they are kept for the catalog's cards)."""
    import dataclasses

    from app.library import pair_doctor as doctor

    here = doctor.measure_here(report, on_progress=_measure_progress())
    return dataclasses.replace(report, here=here)


def _check_pair(args: argparse.Namespace) -> int:
    """`check --pair NAME [--measure]`: a catalog pair's figures on this computer, from stand-ins
    of its models' known shapes (app.library.standin.CATALOG_SHAPES), no header read."""
    from app.library.catalog import CatalogModel
    from app.library.measure import describe_lines, figures_here, measure_pair, model_id
    from app.library.standin import CATALOG_SHAPES, KNOWN_SHAPES, StandinPlan, plan_from_shape

    pair = load_catalog().find_pair(args.pair)

    def plan(m: CatalogModel) -> tuple[str, StandinPlan]:
        shape = CATALOG_SHAPES.get(m.key)
        if shape is None:
            where = f"{m.repo_id}/{m.filename}" if m.repo_id else "its file"
            raise TandemError(
                f"the shape of {m.name} is not known here; measure it from its header: "
                f"tandem models check {where} --measure"
            )
        return model_id(m.repo_id, m.filename), plan_from_shape(m.name, KNOWN_SHAPES[shape], m.quantization)

    target = plan(pair.target)
    draft = plan(pair.draft) if pair.draft is not None else None
    if args.measure:
        fig = measure_pair(target, draft, on_progress=_measure_progress())
    else:
        found = figures_here(target[0], draft[0] if draft else None)
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
            "architecture": f.architecture,
            "n_params": f.n_params,
            "quantization": f.quantization,
            "context_length": f.context_length,
            "has_chat_template": f.has_chat_template,
            "size_bytes": f.size_bytes,
            "fetched_bytes": f.fetched_bytes,
        }

    v = report.verdict
    m = report.memory
    return {
        "target": facts(report.target),
        "draft": facts(report.draft),
        "pairs": None if v is None else v.is_compatible,
        "rule": None if v is None or v.is_compatible else v.rule,
        "target_value": None if v is None else v.target_value,
        "draft_value": None if v is None else v.draft_value,
        "memory": {
            "n_ctx": m.n_ctx,
            "weights_target_bytes": m.weights_target_bytes,
            "kv_target_bytes": m.kv_target_bytes,
            "weights_draft_bytes": m.weights_draft_bytes,
            "kv_draft_bytes": m.kv_draft_bytes,
            "overhead_bytes": m.overhead_bytes,
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
                "pairs": None if c.verdict is None else c.verdict.is_compatible,
                "rule": None if c.verdict is None or c.verdict.is_compatible else c.verdict.rule,
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
        "plain_tokens_per_s": fig.plain_tokens_per_s,
        "ngram_ceiling": fig.ceiling,
        "copy_speedup": fig.copy_speedup,
        "target_t_ms": fig.target.t_ms,
        "draft_t_ms": fig.draft.t_ms if fig.draft else None,
        "draft": None
        if v is None
        else {"speedup": v.speedup, "draft_len": v.draft_len, "acceptance": v.acceptance, "pays": v.pays},
        "measured_at": fig.target.measured_at,
    }


def _measured_json(m: PairMeasurement | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"speedup": m.speedup, "n_replies": m.n_replies, "is_plain_estimate": m.is_plain_estimate}


if __name__ == "__main__":
    sys.exit(main_models(sys.argv[1:]))
