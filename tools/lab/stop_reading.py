"""How long a Stop takes while a prompt is read, on a stand-in of a known shape (issue 51): the
engine's reading path (LlamaRunner.decode without logits, its `cancel` the worker's CancelBoard
flag), a Stop set at a random moment inside a chunk, the time from the Stop to decode's return.
Also what llama.cpp's abort callback costs a whole reading (read once with a `cancel`, once
without), and, with --before, the same Stops as before the callback (a Stop seen between chunks).

    nice -n -15 .venv/bin/python -m tools.lab.stop_reading qwen2.5-1.5b 1024 5 [--before]
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import llama_cpp

from app.host.worker import CancelBoard
from app.library import standin
from engine.backend import DecodeCancelled, LlamaRunner
from tools.lab.shapes import KNOWN_SHAPES, plan_from_shape

shape, n_read, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
before = "--before" in sys.argv
path = Path(f"/tmp/read-chunks/{shape}.gguf")
if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    standin.write_standin(plan_from_shape(shape, KNOWN_SHAPES[shape], "Q4_K_M"), path)
if before:  # as before the callback: llama.cpp is never asked to stop inside a chunk
    llama_cpp.llama_set_abort_callback = lambda *args: None
runner = LlamaRunner(str(path), n_ctx=4096, n_threads=2, n_batch=512)
tokens = [(i * 7919) % 30000 + 100 for i in range(n_read)]
board = CancelBoard.create(multiprocessing.get_context("spawn"))
print(f"{shape}: chunk {runner.read_chunk} rows, {'before (between chunks)' if before else 'abort callback'}")

# What the callback costs a reading: the same tokens with a cancel that never fires, and without.
for label, cancel in (("with a cancel (callback on)", board.flag(1).is_set), ("without", None)):
    runner.clear()
    t0 = time.perf_counter()
    runner.decode(tokens, n_logits=0, cancel=cancel)
    dt = time.perf_counter() - t0
    print(f"read {n_read} tokens {label}: {dt:.2f} s, {n_read / dt:.1f} tok/s")

latencies, chunk_s = [], []
rng = random.Random(1)
for rep in range(reps):
    runner.clear()
    request_id = 100 + rep
    flag = board.flag(request_id)
    done: list[float] = []
    ends: list[float] = [time.perf_counter()]

    def read(flag: threading.Event, ends: list[float], done: list[float]) -> None:
        runner.on_read = lambda n_done, n_total: ends.append(time.perf_counter())
        try:
            runner.decode(tokens, n_logits=0, cancel=flag.is_set)
        except DecodeCancelled:
            pass
        finally:
            runner.on_read = None
            done.append(time.perf_counter())

    thread = threading.Thread(target=read, args=(flag, ends, done))
    thread.start()
    while len(ends) < 2:  # the first chunk's time, then a Stop somewhere inside the second
        time.sleep(0.001)
    first = ends[1] - ends[0]
    time.sleep(rng.uniform(0.1, 0.9) * first)
    t_stop = time.perf_counter()
    board.cancel(request_id)
    thread.join()
    latencies.append(done[0] - t_stop)
    chunk_s.append(first)
    print(
        f"  stop {rep + 1}: chunk {first:.2f} s, Stop after {t_stop - ends[1]:.2f} s into the next,"
        f" returned in {latencies[-1] * 1000:.0f} ms; cached {len(runner.tokens)} tokens"
    )
print(
    f"{shape}: Stop latency median {statistics.median(latencies) * 1000:.0f} ms, max"
    f" {max(latencies) * 1000:.0f} ms ({reps} Stops; a chunk {statistics.median(chunk_s):.2f} s)"
)
runner.close()
