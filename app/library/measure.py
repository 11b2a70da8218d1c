"""What a pair pays on this computer, measured before the download, on stand-ins.

`measure_pair` writes a stand-in of the target (app.library.standin: its shape and quantisation,
random weights), times its verify batches at the sizes that matter (MEASURE_SIZES) in a worker
process, deletes it, then does the same for the draft's single-token step. From those costs:
- plain tokens/s here: 1 / t(1);
- the n-gram ceiling on copy work: max over n of n·t(1)/t(n), what drafting from the text
  could reach if every drafted token were accepted (the bench's ceiling), and the copy
  speed-up the real draft-length controller reaches on the kept copy replies (engine.replay);
- the draft model: the speed-up at the acceptance such pairs usually reach (ACCEPTANCE, with its
  source), at the best draft length, or that it does not pay here and why.

The timing runs in a process of its own: Cancel kills it (within a fraction of a second, even
inside a 3-second batch), its memory goes back at once, and the window's thread never holds
llama.cpp. Each stand-in is deleted after use; a run leaves nothing behind (a killed run's
folder is removed by the next).

Figures are kept per machine in the user's data folder (measured-here.json), keyed by model,
so the catalog's cards and the speed-up choice can say what this computer will do.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.library.standin import (
    SUFFIX,
    StandinCancelled,
    StandinError,
    StandinPlan,
    check_room,
    clean_leftovers,
    remove_standin,
    standins_dir,
    write_standin,
)
from engine.errors import TandemError

# Verify batch sizes timed on the target: 1 (a plain step), the small drafts a draft model
# makes (2-8 rows; 7 and 9 read between their neighbours), and the long n-gram drafts of copy work (16, 32, 64: CPU kernels work in
# tiles of 8 and 16, so the tile sizes are the cheap ones a copy uses).
MEASURE_SIZES = (1, 2, 3, 4, 5, 6, 8, 16, 32, 64)
FULL_SIZES = tuple(range(1, 65))
# The text before the batches (a reply's steps run after a prompt). Its attention is a small part
# of a batch of a real-size model (64 rows of a Qwen2.5 7B attending to 512 earlier tokens: about
# 13 GFLOP against 970 for its weights), and reading it costs a 7B one 64-row batch, about 3.4 s
# on 2 cores: 64 tokens.
CONTEXT_TOKENS = 64
REPEATS_SMALL, REPEATS_LARGE = 3, 2  # the fastest of: a busy machine only ever slows one down
DRAFT_REPEATS = 5
# What a same-family draft model usually has accepted, per drafted token, and where that is from.
ACCEPTANCE = 0.72
ACCEPTANCE_SOURCE = (
    "72% of drafted tokens accepted by Llama 3.1 8B from Llama 3.2 1B, 5 drafted tokens, "
    "llama.cpp issue #5877 (https://github.com/ggml-org/llama.cpp/issues/5877)"
)
ACCEPTANCE_SOURCE_WORDS = "as Llama 3.1 8B accepted from Llama 3.2 1B in llama.cpp issue #5877"
PAYS_AT = 1.05  # below this the second model is not worth its memory and its load
MAX_DRAFT_LEN = 8
FORMAT = 1


class MeasureCancelled(TandemError):
    pass


@dataclass(frozen=True)
class MeasureProgress:
    fraction: float  # 0..1 of the whole measurement
    stage: str  # "write", "load", "time"
    role: str  # "target", "draft"
    label: str  # the model the stand-in stands for
    batch: int = 0  # the batch size just timed (stage "time")


@dataclass(frozen=True)
class MeasuredCosts:
    """One model's costs measured here on its stand-in: t(n) in ms for a verify batch of n rows."""

    model: str  # model_id: owner/repo/FILE.gguf, or a file name
    t_ms: dict[int, float]
    size_bytes: int
    machine: str
    measured_at: str
    n_threads: int
    copy_speedup: float | None = None  # kept with the costs: a replay takes a moment

    @property
    def plain_tokens_per_s(self) -> float:
        return 1000.0 / self.t_ms[1]

    @property
    def ceiling(self) -> float:
        return max(n * self.t_ms[1] / t for n, t in self.t_ms.items())

    def verify_ms(self, n: int) -> float:
        from engine.replay import CostCurve

        return CostCurve(self.model, self.t_ms).verify_s(n) * 1000

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "t_ms": {str(n): round(ms, 5) for n, ms in sorted(self.t_ms.items())},
            "size_bytes": self.size_bytes,
            "machine": self.machine,
            "measured_at": self.measured_at,
            "n_threads": self.n_threads,
            "copy_speedup": None if self.copy_speedup is None else round(self.copy_speedup, 3),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> MeasuredCosts:
        t_ms = {int(n): float(ms) for n, ms in data["t_ms"].items()}
        if 1 not in t_ms or not all(0 < ms < 600_000 for ms in t_ms.values()):
            raise ValueError("no single-token cost")
        return MeasuredCosts(
            str(data["model"]),
            t_ms,
            int(data.get("size_bytes", 0)),
            str(data.get("machine", "")),
            str(data.get("measured_at", "")),
            int(data.get("n_threads", 0)),
            float(data["copy_speedup"]) if isinstance(data.get("copy_speedup"), int | float) else None,
        )


@dataclass(frozen=True)
class DraftVerdict:
    """What a draft model pays at ACCEPTANCE: the best speed-up over draft lengths 1-8, and the
    costs that decide it (a draft token, and a batch checking k+1 tokens, in plain steps)."""

    speedup: float
    draft_len: int
    draft_step_ratio: float  # a drafted token's cost / a plain step of the target
    verify_ratio: float  # checking draft_len+1 tokens / a plain step of the target
    acceptance: float = ACCEPTANCE

    @property
    def pays(self) -> bool:
        return self.speedup >= PAYS_AT


@dataclass(frozen=True)
class PairFigures:
    """What this computer will do with a target (and a draft), from measured stand-in costs."""

    target: MeasuredCosts
    draft: MeasuredCosts | None = None
    copy_speedup: float | None = None  # the controller on the kept copy replies
    verdict: DraftVerdict | None = None

    @property
    def plain_tokens_per_s(self) -> float:
        return self.target.plain_tokens_per_s

    @property
    def ceiling(self) -> float:
        return self.target.ceiling


def draft_verdict(
    target: MeasuredCosts, draft: MeasuredCosts, acceptance: float = ACCEPTANCE
) -> DraftVerdict:
    """A step drafts k tokens (k single-token draft steps), then checks k+1 in one batch; with
    acceptance a per token it yields (1 - a^(k+1)) / (1 - a) tokens (the speculative decoding
    paper's expectation). The speed-up against plain steps, at the best k."""
    t1 = target.t_ms[1]
    c = draft.t_ms[1] / t1

    def speedup(k: int) -> float:
        tokens = (1 - acceptance ** (k + 1)) / (1 - acceptance)
        return tokens / (k * c + target.verify_ms(k + 1) / t1)

    best = max(range(1, MAX_DRAFT_LEN + 1), key=speedup)
    return DraftVerdict(speedup(best), best, c, target.verify_ms(best + 1) / t1, acceptance)


def copy_speedup(target: MeasuredCosts) -> float | None:
    """The decode speed-up the draft-length controller reaches on the kept copy replies
    (resources/replay/traces) with this machine's measured costs, seeded as the app seeds it
    (engine.replay.calibrated): what "copy work" gains here."""
    from app.paths import resources_dir
    from engine.replay import CostCurve, calibrated, load_traces, replay

    try:
        traces = load_traces(resources_dir() / "replay" / "traces")
    except (OSError, ValueError, KeyError):
        return None
    curve = CostCurve(target.model, dict(target.t_ms))
    warm = next((t for t in traces if t.name == "warm-up"), None)
    first_seed = replay(warm, curve)[1].export() if warm is not None else None
    seed = calibrated(first_seed, curve)
    speedups = [replay(t, curve, seed)[0].speedup for t in traces if t is not warm]
    return statistics.median(speedups) if speedups else None


def figures(target: MeasuredCosts, draft: MeasuredCosts | None = None, *, replay: bool = True) -> PairFigures:
    """replay=False: the copy speed-up only where it was kept with the costs (a replay takes a moment)."""
    copy = target.copy_speedup
    if copy is None and replay:
        copy = copy_speedup(target)
    return PairFigures(
        target,
        draft,
        copy,
        draft_verdict(target, draft) if draft is not None else None,
    )


# --- this machine, and where figures are kept ----------------------------------------------------------


def machine_identity(n_threads: int) -> str:
    """What measured costs depend on besides the model: the CPU, llama.cpp's build (its library
    file, found without loading it: the window never loads llama.cpp), the thread count."""
    import importlib.metadata
    import importlib.util

    from engine.costcache import cpu_identity

    build = "unknown build"
    with contextlib.suppress(Exception):
        build = "llama-cpp-python " + importlib.metadata.version("llama_cpp_python")
        spec = importlib.util.find_spec("llama_cpp")
        if spec is not None and spec.origin:
            for lib in sorted((Path(spec.origin).parent / "lib").glob("libllama*")):
                st = lib.stat()
                build += f" {lib.name}:{st.st_size}:{int(st.st_mtime)}"
                break
    return f"{cpu_identity()}|{build}|{n_threads} threads"


def measured_path() -> Path:
    from app import paths

    return paths.home() / "measured-here.json"


def _read_all() -> dict[str, Any]:
    try:
        data = json.loads(measured_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"format": FORMAT, "machines": {}}
    if (
        not isinstance(data, dict)
        or data.get("format") != FORMAT
        or not isinstance(data.get("machines"), dict)
    ):
        return {"format": FORMAT, "machines": {}}
    return data


def save_costs(costs: MeasuredCosts) -> None:
    """Keep a model's measured costs for this machine (atomic; a failure to write loses nothing else)."""
    data = _read_all()
    machine = data["machines"].setdefault(costs.machine, {})
    if not isinstance(machine, dict):
        machine = data["machines"][costs.machine] = {}
    record = costs.to_json()
    old = machine.get(costs.model)
    if isinstance(old, dict) and isinstance(old.get("t_ms"), dict) and len(old["t_ms"]) > len(costs.t_ms):
        # A draft's few sizes do not erase the curve the same model measured as a target.
        record["t_ms"] = {**old["t_ms"], **record["t_ms"]}
        if record["copy_speedup"] is None:
            record["copy_speedup"] = old.get("copy_speedup")
    machine[costs.model] = record
    path = measured_path()
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".measured-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def load_costs(model: str, machine: str | None = None) -> MeasuredCosts | None:
    """A model's costs measured on this machine (the current build and thread count), if any.
    A file name finds the same file measured from the hub (owner/repo/FILE.gguf): downloaded, it
    is known by its name."""
    from engine.config import default_threads

    machine = machine or machine_identity(default_threads())
    entry = _read_all()["machines"].get(machine, {})
    if not isinstance(entry, dict):
        return None
    record = entry.get(model)
    if not isinstance(record, dict) and "/" not in model:
        record = next((v for k, v in entry.items() if k.rsplit("/", 1)[-1] == model), None)
    if not isinstance(record, dict):
        return None
    try:
        return MeasuredCosts.from_json(record)
    except (KeyError, ValueError, TypeError):
        return None


def draft_pays_here(target_path: str, draft_path: str) -> DraftVerdict | None:
    """Whether a local draft model pays with a local target on this computer, from stand-ins
    measured before (the files known by name); None where either was not measured here."""
    fig = figures_here(Path(target_path).name, Path(draft_path).name)
    return fig.verdict if fig is not None else None


def figures_here(target_model: str, draft_model: str | None = None) -> PairFigures | None:
    """What this computer will do with a pair, from costs measured before (None: not measured).
    A draft not measured yet leaves the draft's verdict out."""
    target = load_costs(target_model)
    if target is None:
        return None
    draft = load_costs(draft_model) if draft_model else None
    return figures(target, draft, replay=False)


def model_id(repo_id: str | None, filename: str) -> str:
    """A model as measurements know it: owner/repo/FILE.gguf on the hub, else its file name."""
    return f"{repo_id}/{filename}" if repo_id else Path(filename).name


# --- measuring ----------------------------------------------------------------------------------------


@dataclass
class _Run:
    folder: Path
    cancel: threading.Event
    on_progress: Callable[[MeasureProgress], None] | None
    process: Any = None  # the measuring process (multiprocessing, spawned)
    spans: list[tuple[float, float]] = field(default_factory=list)


def measure_pair(
    target: tuple[str, StandinPlan],
    draft: tuple[str, StandinPlan] | None = None,
    *,
    sizes: tuple[int, ...] = MEASURE_SIZES,
    n_threads: int | None = None,
    cancel: threading.Event | None = None,
    on_progress: Callable[[MeasureProgress], None] | None = None,
    folder: Path | None = None,
    save: bool = True,
) -> PairFigures:
    """Time a target's stand-in (and a draft's) here; (model_id, plan) for each. Every room check
    comes before anything is written; one stand-in is on disk at a time; none is left after.
    Raises StandinError (no room, impossible shape) or MeasureCancelled."""
    from engine.config import default_threads

    n_threads = n_threads or default_threads()
    cancel = cancel or threading.Event()
    n_ctx = CONTEXT_TOKENS + max(sizes) + 16
    base = folder or standins_dir()
    clean_leftovers(base)
    jobs = [("target", target, sizes)] + ([("draft", draft, (1, 2))] if draft is not None else [])
    try:
        for _, (_, plan), _ in jobs:
            check_room(plan, base, n_ctx)  # before anything is written
    except StandinError:
        with contextlib.suppress(OSError):
            base.rmdir()  # made to look at its free space: left as it was
        raise
    run_dir = base / f"run-{os.getpid()}-{time.monotonic_ns()}"
    run_dir.mkdir(parents=True)
    (run_dir / "pid").write_text(str(os.getpid()))
    # Shares of the progress bar, in expected seconds: each stage grows with the file (on 2 cores,
    # per GB: writing about 2.5 s, loading 1.5, a target's batches 6.5, a draft's steps 0.5),
    # plus starting the timing process.
    weights = []
    for role, (_, plan), _ in jobs:
        gb = plan.size_bytes / 1e9
        weights.append((2.5 * gb + 0.05, 1.5 * gb + 0.5, (6.5 if role == "target" else 0.5) * gb + 0.2))
    total = sum(sum(w) for w in weights)
    run = _Run(run_dir, cancel, on_progress)
    machine = machine_identity(n_threads)
    results: list[MeasuredCosts] = []
    try:
        done = 0.0
        for (role, (model, plan), job_sizes), (w_write, w_load, w_time) in zip(jobs, weights, strict=True):
            path = run_dir / f"{role}{SUFFIX}"

            report = functools.partial(_report, on_progress, total, role, plan.label)
            report("write", 0.0, w_write, done)
            start = done
            try:
                write_standin(
                    plan,
                    path,
                    cancel=cancel,
                    on_progress=functools.partial(_report_part, report, "write", w_write, start),
                )
            except StandinCancelled:
                raise MeasureCancelled("the measurement was cancelled; nothing is left on disk") from None
            done += w_write
            repeats = DRAFT_REPEATS if role == "draft" else REPEATS_SMALL
            t_ms = _time_in_worker(
                run,
                f"{plan.label} ({plan.architecture})",
                path,
                job_sizes,
                n_threads,
                n_ctx,
                repeats,
                report,
                done,
                w_load,
                w_time,
            )
            remove_standin(path)
            done += w_load + w_time
            costs = MeasuredCosts(
                model,
                t_ms,
                plan.size_bytes,
                machine,
                time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                n_threads,
            )
            results.append(costs)
    finally:
        if run.process is not None and run.process.is_alive():
            run.process.kill()
            run.process.join()
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            base.rmdir()  # where no other run is under way
    import dataclasses

    results[0] = dataclasses.replace(results[0], copy_speedup=copy_speedup(results[0]))
    if save:
        for costs in results:
            save_costs(costs)
    return figures(results[0], results[1] if len(results) > 1 else None)


def _report(
    on_progress: Callable[[MeasureProgress], None] | None,
    total: float,
    role: str,
    label: str,
    stage: str,
    part: float,
    share: float,
    start: float,
    batch: int = 0,
) -> None:
    """Progress of one stage: `part` (0..1) of its `share` of the bar, which starts at `start`."""
    if on_progress is not None:
        on_progress(
            MeasureProgress(round(min(1.0, (start + share * part) / total), 4), stage, role, label, batch)
        )


def _report_part(report: Callable[..., None], stage: str, share: float, start: float, part: float) -> None:
    report(stage, part, share, start)


def _time_in_worker(
    run: _Run,
    label: str,
    path: Path,
    sizes: tuple[int, ...],
    n_threads: int,
    n_ctx: int,
    repeats: int,
    report: Callable[..., None],
    start: float,
    w_load: float,
    w_time: float,
) -> dict[int, float]:
    """Time the stand-in in a spawned process (as the chat's worker runs llama.cpp); Cancel kills it."""
    import multiprocessing
    import multiprocessing.connection

    job = {
        "path": str(path),
        "sizes": list(sizes),
        "n_threads": n_threads,
        "n_ctx": n_ctx,
        "repeats": repeats,
    }
    report("load", 0.0, w_load, start)
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_worker, args=(job, send), name="tandem-measure", daemon=True)
    process.start()
    run.process = process
    send.close()
    costs: dict[int, float] = {}
    weights = {n: max(n, 4) for n in sizes}  # a batch's time grows with its rows
    total_w = sum(weights.values())
    done_w = 0.0
    error = ""
    try:
        is_open = True
        while is_open:
            if run.cancel.is_set():
                process.kill()
                break
            ready = multiprocessing.connection.wait([receive, process.sentinel], timeout=0.05)
            if receive not in ready:
                if process.sentinel in ready and not receive.poll():
                    break
                continue
            try:
                msg = receive.recv()
            except (EOFError, OSError):
                break
            if "loaded" in msg:
                report("load", 1.0, w_load, start)
            elif "error" in msg:
                error = str(msg["error"])
            elif "n" in msg:
                n = int(msg["n"])
                costs[n] = min(costs.get(n, float("inf")), float(msg["ms"]))  # 1 is timed twice
                done_w += weights.get(n, 1) if msg.get("again") is None else 0
                report("time", done_w / total_w, w_time, start + w_load, n)
            elif "done" in msg:
                is_open = False
        process.join(5)
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
            process.join()
        run.process = None
    if run.cancel.is_set():
        raise MeasureCancelled("the measurement was cancelled; nothing is left on disk")
    if error or 1 not in costs:
        why = (
            "llama.cpp could not load it (this build may not know its architecture)"
            if error == "load"
            else f"its timing process stopped (exit code {process.exitcode})"
        )
        raise StandinError(f"the stand-in of {label} could not be timed: {why}")
    return costs


def _worker(job: dict[str, Any], send: Any) -> None:
    """In the measuring process: load the stand-in, time its batches, one message each."""
    import signal

    from engine.backend import LlamaRunner

    # Ctrl-C in a terminal reaches this process too: the parent stops it, in one line.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sizes = [int(n) for n in job["sizes"]]
        try:
            runner = LlamaRunner(
                job["path"],
                n_ctx=int(job["n_ctx"]),
                n_threads=int(job["n_threads"]),
                n_batch=max(64, max(sizes)),
            )
        except TandemError:
            send.send({"error": "load"})
            return
        send.send({"loaded": True})
        n_vocab = runner.n_vocab
        # Any text will do (the weights are random): ids spread over the vocabulary.
        context = [(7 + 7919 * i) % n_vocab for i in range(CONTEXT_TOKENS)]
        runner.decode(context, n_logits=0)

        seen: set[int] = set()

        def timed(n: int, seconds: float) -> None:
            again = {"again": True} if n in seen else {}
            seen.add(n)
            send.send({"n": n, "ms": seconds * 1000, **again})

        repeats = int(job["repeats"])
        # A plain step again after each size: every figure is in its units, and on a shared
        # machine one token's time swings by 15% from one moment to the next (another program,
        # the cores' clocks); timed while the cores are busy, its fastest is the steady one.
        small = [m for n in sizes if n <= 16 for m in ((n, 1) if n > 1 and 1 in sizes else (n,))]
        large = [m for n in sizes if n > 16 for m in ((n, 1) if 1 in sizes else (n,))]
        # One token of context per call: the text is already in the cache.
        runner.time_batches(small, context[-1:], repeats=repeats, read_rows=True, on_timed=timed)
        if large:
            runner.time_batches(
                large, context[-1:], repeats=min(repeats, REPEATS_LARGE), read_rows=True, on_timed=timed
            )
        runner.close()
        send.send({"done": True})
    except TandemError as e:
        send.send({"error": str(e)})
    finally:
        send.close()


# --- in words (the terminal; the window words it in ui/presenters/words.py) -------------------------------------


def verdict_reason(v: DraftVerdict) -> str:
    """Why a draft model pays here or not, in plain words."""
    rows = v.draft_len + 1
    costs = (
        f"checking {rows} tokens at once costs {v.verify_ratio:.1f} plain steps on this computer, "
        f"and each drafted token {v.draft_step_ratio:.2f} of one"
    )
    if v.pays:
        return f"it pays here: {costs}, so accepted drafts come cheap"
    return f"it does not pay here: {costs}, so accepted drafts barely repay their checking"


def describe_lines(fig: PairFigures) -> list[str]:
    t = fig.target
    lines = [
        f"on this computer (stand-ins of the same shape and quantisation timed here, {t.measured_at}, "
        f"{t.n_threads} threads; no weights downloaded):",
        f"  plain decoding: about {fig.plain_tokens_per_s:.1f} tokens/s",
    ]
    copy = f"about {fig.copy_speedup:.2f}x plain speed, " if fig.copy_speedup else ""
    lines.append(
        f"  copy work with n-gram lookup: {copy}ceiling {fig.ceiling:.2f}x (every drafted token accepted)"
    )
    if fig.verdict is not None:
        v = fig.verdict
        lines.append(
            f"  the draft model: about {v.speedup:.2f}x with drafts of {v.draft_len} at {v.acceptance:.0%} "
            f"accepted; {verdict_reason(v)}"
        )
        lines.append(f"  (acceptance: {ACCEPTANCE_SOURCE})")
    return lines
