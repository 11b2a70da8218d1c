"""Measuring a pair on stand-ins, in a process of its own (app.library.measure holds what the
figures mean and where they are kept).

`measure_pair` writes a stand-in of the target (app.library.standin), times its verify batches at
MEASURE_SIZES in a spawned process, deletes it, then does the same for the draft's single-token
step, and keeps the costs (measure.save_costs). Cancel kills the process: within a fraction of a
second even inside a 3-second batch; its memory goes back at once and the window's thread never
holds llama.cpp.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.library.measure import (
    CONTEXT_TOKENS,
    DRAFT_REPEATS,
    MEASURE_SIZES,
    REPEATS_LARGE,
    REPEATS_SMALL,
    MeasureCancelled,
    MeasuredCosts,
    MeasureProgress,
    PairFigures,
    copy_speedup,
    figures,
    machine_identity,
    save_costs,
)
from app.library.standin import (
    SUFFIX,
    StandinCancelled,
    StandinError,
    StandinPlan,
    check_room,
    clean_leftovers,
    standins_dir,
    write_standin,
)
from engine.errors import TandemError


def measure_pair(
    target: tuple[str, StandinPlan],
    draft: tuple[str, StandinPlan] | None = None,
    *,
    sizes: tuple[int, ...] = MEASURE_SIZES,
    n_threads: int | None = None,
    cancel: threading.Event | None = None,
    on_progress: Callable[[MeasureProgress], None] | None = None,
    save: bool = True,
) -> PairFigures:
    """Time a target's stand-in (and a draft's) here; (model_id, plan) for each. Every room check
    comes before anything is written; one stand-in is on disk at a time; none is left after.
    Raises StandinError (no room, impossible shape) or MeasureCancelled."""
    from engine.config import default_threads

    n_threads = n_threads or default_threads()
    cancel = cancel or threading.Event()
    n_ctx = CONTEXT_TOKENS + max(sizes) + 16
    base = standins_dir()
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
    machine = machine_identity(n_threads)
    results: list[MeasuredCosts] = []
    try:
        done = 0.0
        for (role, (model, plan), job_sizes), (w_write, w_load, w_time) in zip(jobs, weights, strict=True):
            path = run_dir / f"{role}{SUFFIX}"
            report = functools.partial(_report, on_progress, total, role, plan.label)
            report("write", 0.0, w_write, done)
            try:
                on_write = functools.partial(report, "write", share=w_write, start=done)
                write_standin(plan, path, cancel=cancel, on_progress=on_write)
            except StandinCancelled:
                raise MeasureCancelled("the measurement was cancelled; nothing is left on disk") from None
            done += w_write
            repeats = DRAFT_REPEATS if role == "draft" else REPEATS_SMALL
            t_ms = _time_in_worker(
                cancel,
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
            with contextlib.suppress(OSError):  # one stand-in on disk at a time
                path.unlink()
            done += w_load + w_time
            measured_at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            results.append(MeasuredCosts(model, t_ms, plan.size_bytes, machine, measured_at, n_threads))
    finally:
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


def _time_in_worker(
    cancel: threading.Event,
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
    costs: dict[int, float] = {}
    weights = {n: max(n, 4) for n in sizes}  # a batch's time grows with its rows
    total_w = sum(weights.values())
    done_w = 0.0
    error = ""
    process.start()
    try:  # from here on, whatever happens, the process does not outlive this call
        send.close()  # the child's copy is then the only one: the pipe ends when the child does
        while True:
            if cancel.is_set():
                process.kill()
                break
            try:
                if not receive.poll(0.05):
                    continue
                msg = receive.recv()
            except (EOFError, OSError):
                break
            if "loaded" in msg:
                report("load", 1.0, w_load, start)
            elif "error" in msg:
                error = str(msg["error"])
            elif "n" in msg:
                n = int(msg["n"])
                done_w += weights.get(n, 1) if n not in costs else 0  # 1 is timed again: counted once
                costs[n] = min(costs.get(n, float("inf")), float(msg["ms"]))
                report("time", done_w / total_w, w_time, start + w_load, n)
            elif "done" in msg:
                break
        process.join(5)
    finally:
        receive.close()
        if process.is_alive():
            process.kill()
            process.join()
    if cancel.is_set():
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

        def timed(n: int, seconds: float) -> None:
            send.send({"n": n, "ms": seconds * 1000})

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
