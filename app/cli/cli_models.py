"""`tandem models download|list|pairs|import|catalog|search|check`: the model library on the
command line (`search` and `check`, which never download a model, are in app/cli/cli_doctor.py).

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
from pathlib import Path
from typing import TextIO

from app import paths
from app.cli.cli_base import (
    EXIT_OK,
    Parser,
    at_the_edge,
    print_table,
    safe_output,
    terminal_field,
)
from app.cli.cli_doctor import cmd_check, cmd_search
from app.library.catalog import (
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
from app.paths import user_path
from engine.config import DEFAULT_CTX
from engine.errors import TandemError


def add_models_parser(
    subparsers: argparse._SubParsersAction[Parser],
) -> argparse.ArgumentParser:
    models = subparsers.add_parser(
        "models",
        help="download, list, import and pair GGUF models",
        description="The model library: catalog pairs, downloads that resume, local files.",
    )
    models.set_defaults(run=run_models)
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

    sub.add_parser("list", help="local models with size, architecture, quantisation, parameters, context")

    pairs = sub.add_parser("pairs", help="local drafts that can draft for TARGET, and why the others cannot")
    pairs.add_argument("target", help="a .gguf path, the file name of a local model, or `default`")

    imp = sub.add_parser("import", help="check a GGUF file and copy it into the models folder")
    imp.add_argument("path", type=Path)

    catalog = sub.add_parser("catalog", help="curated pairs, their sizes and whether they fit this machine")
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
        help="a catalog pair instead of files: what was measured here; with --measure, stand-ins "
        "of its models (their headers read from the hub)",
    )
    check.add_argument("--draft", help="owner/repo/FILE.gguf, or a local path")
    check.add_argument(
        "--measure",
        action="store_true",
        help="time stand-ins of the same shape (random weights) on this computer: plain speed, "
        "the n-gram ceiling, whether the draft pays; nothing is downloaded",
    )
    check.add_argument(
        "--ctx",
        type=int,
        default=DEFAULT_CTX,
        help="context in tokens for the KV caches (default %(default)s)",
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
        "search": cmd_search,
        "check": cmd_check,
    }
    interrupted = (
        "interrupted; nothing was downloaded"
        if args.models_command in ("search", "check")
        else "interrupted; a partial download is kept and resumes when you run the command again"
    )
    with safe_output():  # GGUF headers and hub answers are printed: no terminal codes from them
        return at_the_edge(lambda: commands[args.models_command](args), interrupted=interrupted)


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


def _cmd_download(args: argparse.Namespace) -> int:
    if args.pair and (args.repo_id or args.filename):
        raise TandemError("give either --pair NAME or REPO_ID FILENAME, not both")
    if args.pair:
        pair = load_catalog().find_pair(args.pair)
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
    print_table(rows, sys.stdout)
    for m in problems:
        print(terminal_field(f"{m.path.name}: {m.problem}"))
    print(f"{len(models)} model file(s) in {folder}")
    return EXIT_OK


def _resolve_target(spec: str) -> Path:
    model = parse_model(spec)
    if model.embedded is not None:  # `default`, `smollm2`: as everywhere else
        return Path(model.resolve())
    path = user_path(spec)
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
    catalog = load_catalog()
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
    print_table(rows, sys.stdout)
    print("\npairs that do not work (llama.cpp's vocabulary rules):")
    for bad in catalog.incompatible:
        print(f"  {bad.target} + {bad.draft}: {bad.rule} differs; {bad.reason}")
    print("\nreported speedups are others' numbers on their hardware; see `--json` for sources")
    return EXIT_OK
