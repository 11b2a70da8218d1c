"""`tandem generate --remote`: against `tandem serve` and a real llama.cpp `llama-server`, and the
ways a server can fail (nothing listening, a refused key, an unknown model, a stream cut)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.host.remote_client import api_base
from tests.cli_process import last_error_line as error_line
from tests.integration.test_cli import JSON_KEYS
from tests.looping_server import refusing_server
from tests.serve_process import ROOT, ServeProcess, free_port, tandem_env
from tests.waiting import wait_until

LLAMA_SERVER = Path(sys.executable).parent / "llama-server"


def tandem(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=tandem_env(home))  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("remote-home")
    s = ServeProcess(
        home, "--model", str(tiny_target), "--draft", "ngram", "--threads", "1", "--api-key", "k1"
    )
    try:
        yield s.started()
    finally:
        s.stop()


def test_against_tandem_serve(server: ServeProcess, tmp_path: Path) -> None:
    prompt = "the cat sat on the mat, the cat sat on the mat, the cat"
    r = tandem(tmp_path, "generate", "--remote", f"127.0.0.1:{server.port}", "--api-key", "k1",
               "--prompt", prompt, "--max-tokens", "24", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out) >= JSON_KEYS
    assert out["remote"] == server.url and out["model"] == "target" and out["speculation"] == "ngram"
    assert 0 < out["n_generated"] <= 24 and out["stop_reason"] in ("length", "eos")
    # Drafted and accepted are the server's own counts, as its last chunk reported them.
    assert isinstance(out["n_drafted"], int) and out["n_accepted"] <= out["n_drafted"]
    assert out["server_timings"]["draft_n"] == out["n_drafted"]
    assert "the server's own counts" in out["note"]

    # The same request straight to the server (greedy): the same text.
    direct = httpx.post(f"{server.url}/completions", headers={"Authorization": "Bearer k1"},
                        json={"prompt": prompt, "max_tokens": 24, "temperature": 0}, timeout=60)  # fmt: skip
    assert out["text"] == direct.json()["choices"][0]["text"]

    # Without --json: the text on stdout, one stats line on stderr.
    r = tandem(tmp_path, "generate", "--remote", server.url, "--api-key", "k1", "--chat", "--prompt", "hi",
               "--max-tokens", "5")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"[remote {server.url}]" in r.stderr and "the server's counts" in r.stderr


def test_nothing_listening(tmp_path: Path) -> None:
    port = free_port()
    line = error_line(tandem(tmp_path, "generate", "--remote", f"http://127.0.0.1:{port}", "--prompt", "hi"))
    assert line == f"error: nothing is listening at http://127.0.0.1:{port}/v1 (connection refused)"


def test_refused_or_missing_key(server: ServeProcess, tmp_path: Path) -> None:
    line = error_line(
        tandem(tmp_path, "generate", "--remote", server.url, "--api-key", "nope", "--prompt", "hi")
    )
    assert line.startswith(f"error: {server.url} refused the API key (HTTP 401: the API key is not valid")
    line = error_line(tandem(tmp_path, "generate", "--remote", server.url, "--prompt", "hi"))
    assert line.startswith(f"error: {server.url} needs an API key (HTTP 401") and line.endswith(
        "pass --api-key"
    )


def test_an_html_error_page_is_told_in_one_line(tmp_path: Path) -> None:
    # A server (or a proxy before it) that answers with an HTML page: the window's notice quoted
    # the whole page. Its status line says it.
    with refusing_server() as url:
        line = error_line(tandem(tmp_path, "generate", "--remote", url, "--prompt", "hi"))
    assert line.startswith(f"error: {api_base(url)} needs an API key (HTTP 401: Invalid API key)"), line
    assert "<" not in line


def test_unknown_model(server: ServeProcess, tmp_path: Path) -> None:
    line = error_line(tandem(tmp_path, "generate", "--remote", server.url, "--api-key", "k1", "--model", "gpt-9",
                             "--prompt", "hi"))  # fmt: skip
    assert line == f"error: {server.url} has no model 'gpt-9' (it serves: 'target')"


def test_bad_remote_arguments(tmp_path: Path) -> None:
    line = error_line(tandem(tmp_path, "generate", "--remote", "ftp://x", "--prompt", "hi"))
    assert "--remote must be an http:// or https:// address" in line
    line = error_line(
        tandem(tmp_path, "generate", "--remote", "127.0.0.1:1", "--draft", "ngram", "--prompt", "hi")
    )
    assert "--draft is for a local model" in line
    line = error_line(tandem(tmp_path, "generate", "--prompt", "hi"))
    assert line == "error: the following arguments are required: --model (or --remote URL)"


def test_stream_cut_mid_reply(slow_target: Path, tmp_path: Path) -> None:
    s = ServeProcess(tmp_path, "--model", str(slow_target), "--threads", "1", "--ctx", "2048").started()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.main", "generate", "--remote", s.url, "--prompt", "the",
             "--max-tokens", "2000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=tandem_env(tmp_path),
        )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.read(1)  # the reply is streaming
        worker = s.worker_pid()
        s.proc.kill()  # the server vanishes mid-reply
        s.proc.wait(10)
        _, stderr = proc.communicate(timeout=60)
        r = subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr.decode())
        line = error_line(r)
        assert line.startswith(f"error: the stream from {s.url} was cut after ")

        def worker_gone() -> bool:  # the orphaned engine notices its server is gone and ends
            stat = Path(f"/proc/{worker}/stat")
            return not stat.exists() or b"Z" in stat.read_bytes().split()[2]

        wait_until(worker_gone, 30, "the worker to end with its server", interval_s=0.1)
    finally:
        s.stop()


def test_engine_crash_mid_stream_is_named(slow_target: Path, tmp_path: Path) -> None:
    s = ServeProcess(tmp_path, "--model", str(slow_target), "--threads", "1", "--ctx", "2048").started()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.main", "generate", "--remote", s.url, "--prompt", "the",
             "--max-tokens", "2000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=tandem_env(tmp_path),
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdout.read(1)
        os.kill(s.worker_pid(), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
        line = error_line(subprocess.CompletedProcess(proc.args, proc.returncode, "", stderr.decode()))
        assert line.startswith(f"error: {s.url} failed mid-reply after ")
        assert "was killed (SIGKILL" in line
    finally:
        s.stop()


@pytest.fixture
def llama_server(tiny_target: Path, tiny_draft: Path, tmp_path: Path) -> Iterator[str]:
    """llama.cpp's own server (built by `make setup`), drafting with a draft model."""
    if not LLAMA_SERVER.is_file():
        pytest.skip(f"{LLAMA_SERVER} is not built (make setup builds it)")
    port = free_port()
    log = (tmp_path / "llama-server.log").open("w")
    proc = subprocess.Popen(
        [str(LLAMA_SERVER), "-m", str(tiny_target), "-md", str(tiny_draft), "--spec-type", "draft-simple",
         "--host", "127.0.0.1", "--port", str(port), "-t", "1", "-c", "1024", "-np", "1"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "llama-server.log").read_text()
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 120, lambda: (tmp_path / "llama-server.log").read_text(), interval_s=0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_against_llama_server_with_a_draft_model(llama_server: str, tmp_path: Path) -> None:
    r = tandem(tmp_path, "generate", "--remote", llama_server, "--prompt", "the cat sat on the mat",
               "--max-tokens", "32", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(out) >= JSON_KEYS
    assert out["n_generated"] > 0 and out["text"]
    # llama-server's own counts, from its `timings`: it drafted with the draft model.
    assert out["n_drafted"] == out["server_timings"]["draft_n"] > 0
    assert out["n_accepted"] == out["server_timings"]["draft_n_accepted"] <= out["n_drafted"]
    assert out["speculation"] == "draft" and "timings" in out["note"]
