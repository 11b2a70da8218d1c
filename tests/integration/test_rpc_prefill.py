"""A prefill on an RPC server is waited for where it is decoded, so that it is timed there.

ggml's RPC client sends a graph to compute without waiting for it: llama_decode of a batch
without outputs (a prompt's prefill) returns while the server still computes, and the time shows
up in the next step instead, where the draft-length controller took a cheap prefill and a slow
first step for the machine's costs (seen: a draft model's prompt reading paid on the strength
of a 3 ms "prefill" that took 0.8 s; the reply 24% slower than plain decoding).

The runner lives in a child process: once ggml has registered an RPC server it stays registered
for the process.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.integration.test_rpc import ROOT, Server

CHILD = """
import sys
from engine.backend import LlamaRunner
runner = LlamaRunner(sys.argv[1], n_ctx=512, n_threads=1, n_gpu_layers=99, rpc_servers=(sys.argv[2],))
runner.decode([10, 11, 12, 13], n_logits=0)  # a batch of this size once: its graph is allocated
runner.truncate(0)
print("loaded", flush=True)
sys.stdin.readline()
runner.decode([10, 11, 12, 13], n_logits=0)
print("prefilled", flush=True)
"""


def test_a_prefill_returns_only_once_the_server_has_computed_it(slow_target: Path) -> None:
    server = Server()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(slow_target), server.endpoint],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in child.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        assert lines.get(timeout=120) == "loaded"
        server.proc.send_signal(signal.SIGSTOP)  # the server cannot compute anything now
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        # Without the wait, the prefill "returns" at once: its batch only sat in a socket buffer.
        try:
            early = lines.get(timeout=3)
        except queue.Empty:
            early = None
        assert early is None, "the prefill returned while the RPC server was stopped"
        server.proc.send_signal(signal.SIGCONT)
        assert lines.get(timeout=120) == "prefilled"
    finally:
        server.proc.send_signal(signal.SIGCONT)
        child.kill()
        child.wait(10)
        server.kill()
