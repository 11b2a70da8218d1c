"""A short load drill against a real `tandem serve` (tools/lab/load_drill.py; the long one's figures are
in docs/trust.md): concurrent clients, streamed and not, some leaving mid-stream, more than the
queue holds. Every request is answered or refused with a status; none is lost."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.serve_process import ServeProcess
from tools.lab.load_drill import describe, run_drill


def test_every_request_is_answered_or_refused_under_load(tmp_path: Path, tiny_target: Path) -> None:
    server = ServeProcess(tmp_path, "--model", str(tiny_target), "--threads", "1", "--queue", "2").started()
    try:
        report = run_drill(server.url, server.proc.pid, n_clients=10, duration_s=10, timeout_s=120)
        text = describe(report, 10)
        assert not report.lost, text
        assert report.outcomes["200 whole"] and report.outcomes["200 stream"], text
        assert report.outcomes["503 refused"], text  # 10 clients, 1 generating + 2 waiting
        assert report.outcomes["left mid-stream (on purpose)"], text
        health = httpx.get(f"{server.url.removesuffix('/v1')}/health", timeout=30).json()
        assert health["status"] == "ok"
    finally:
        server.stop()


def test_bad_bodies_are_400_not_500(tmp_path: Path, tiny_target: Path) -> None:
    server = ServeProcess(tmp_path, "--model", str(tiny_target), "--threads", "1").started()
    try:
        deep = "[" * 100_000 + "]" * 100_000
        r = httpx.post(
            f"{server.url}/completions", content=deep, headers={"Content-Type": "application/json"}
        )
        assert (
            r.status_code == 400 and r.json()["error"]["message"] == "the request body is nested too deeply"
        )
        r = httpx.post(f"{server.url}/completions", json={"prompt": "a", "repeat_penalty": 0})
        assert r.status_code == 400 and r.json()["error"]["param"] == "repeat_penalty"
    finally:
        server.stop()
