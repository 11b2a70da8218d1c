"""Helpers of tools/lab/rpc_latency.sh.

rpc_latency_util.py wait ENDPOINT            until an RPC server answers the handshake (30 s)
rpc_latency_util.py rtt ENDPOINT             the median handshake (connect + HELLO), "1.23 ms"
rpc_latency_util.py row REPORT.json DELAY RTT MODE   one Markdown row of the summary
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine import rpc  # noqa: E402


def wait(endpoint: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            version = rpc.check_server(endpoint)
        except rpc.RpcError as e:
            if time.monotonic() > deadline:
                sys.exit(f"error: {e}")
            time.sleep(0.1)
            continue
        print(f"RPC server at {endpoint} answers, protocol {'.'.join(map(str, version))}", file=sys.stderr)
        return


def rtt(endpoint: str) -> None:
    wait(endpoint)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        rpc.check_server(endpoint)
        times.append((time.perf_counter() - t0) * 1000)
    print(f"{statistics.median(times):.2f} ms")


def row(path: str, delay: str, handshake: str, mode: str) -> None:
    report = json.loads(Path(path).read_text().strip().splitlines()[-1])
    rows = report["prompts"]

    def med(key: str) -> float:
        values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        return statistics.median(values) if values else float("nan")

    plain, spec = med("plain_tokens_per_s"), med("spec_tokens_per_s")
    accepted = med("acceptance_rate")
    print(
        f"| {delay} ms | {handshake} | {mode} | {plain:.1f} | {spec:.1f} | {spec / plain:.2f}x | {accepted:.0%} |"
    )


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    commands: dict[str, Callable[..., None]] = {"wait": wait, "rtt": rtt, "row": row}
    commands[command](*args)
