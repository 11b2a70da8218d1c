"""A target split across machines with llama.cpp RPC: the real `ggml-rpc-server` on 127.0.0.1.

Generation with RPC runs in child processes (`tandem generate`, the engine's worker): once ggml
has registered an RPC server it stays registered for the process, and a lost server ends it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.cli.rpc_server import notice
from app.host.messages import (
    ChatTurn,
    EngineFailed,
    EngineLoaded,
    LoadRequest,
    ReplyEvents,
    ReplyRequest,
    WorkerDied,
)
from app.host.worker import WorkerProcess
from engine import rpc
from engine.config import EngineConfig
from engine.events import Finished
from tests.cli_process import last_error_line as error_line
from tests.cli_process import tandem
from tests.tiny import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]
SERVER_BIN = Path(sys.executable).parent / "ggml-rpc-server"
TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "") -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        time.sleep(0.02)


def server_ready(endpoint: str) -> bool:
    try:
        rpc.check_server(endpoint, connect_timeout_s=1.0, answer_timeout_s=2.0)
    except rpc.RpcError:
        return False
    return True


def next_message(inbox: queue.Queue[object], kind: type, event: type | None = None) -> object:
    """The next message of `kind` from a worker (a ReplyEvents: one whose last event is an
    `event`, where given). An engine failure or a dead worker on the way fails the test, unless
    that is what is waited for."""
    while True:
        message = inbox.get(timeout=TIMEOUT_S)
        if isinstance(message, kind) and (event is None or isinstance(message.events[-1], event)):  # type: ignore[attr-defined]
            return message
        if isinstance(message, EngineFailed | WorkerDied) and kind not in (EngineFailed, WorkerDied):
            raise AssertionError(message)


def memory_kb(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of a process, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


class Server:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        assert SERVER_BIN.is_file(), f"{SERVER_BIN} is missing: make setup builds it"
        self.proc = subprocess.Popen(
            [str(SERVER_BIN), "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: server_ready(self.endpoint) or self.proc.poll() is not None, what="the RPC server")
        assert self.proc.poll() is None, "ggml-rpc-server exited at start"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def rpc_server() -> Iterator[Server]:
    server = Server()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def wide_draft(models_dir: Path) -> Path:
    """A draft as big as slow_target (its noisy copy): were it sent to the RPC server, the
    server's memory would grow by twice the target's size."""
    return write_tiny_model(
        models_dir / "wide-draft.gguf", seed=1, n_layers=8, n_embd=256, n_ff=1024, perturb=0.02
    )


def generate_json(model: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    r = tandem("generate", "--model", str(model), "--prompt", "the cat sat on the mat", "--max-tokens", "32",
               "--threads", "1", "--ctx", "512", "--json", *extra)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- the real server ----------------------------------------------------------------------------


def test_generate_on_rpc_server_equals_local_and_the_server_holds_the_layers(
    rpc_server: Server, slow_target: Path, wide_draft: Path
) -> None:
    local = generate_json(slow_target)
    rss0 = memory_kb(rpc_server.proc.pid, "VmRSS")
    remote = generate_json(slow_target, "--rpc", rpc_server.endpoint, "--gpu-layers", "99")
    grown_kb = memory_kb(rpc_server.proc.pid, "VmHWM") - rss0
    assert remote["token_ids"] == local["token_ids"]
    assert remote["n_generated"] == 32
    # Every layer's weights went to the server (the token embeddings stay here: a few hundred kB).
    model_kb = slow_target.stat().st_size / 1024
    assert grown_kb > 0.8 * model_kb, (grown_kb, model_kb)

    # Speculation over RPC: the target's layers there, the draft model here. Greedy: same text.
    # The server serves one client at a time; the last one has gone, so this starts from its baseline.
    rss1 = memory_kb(rpc_server.proc.pid, "VmRSS")
    peak_before = memory_kb(rpc_server.proc.pid, "VmHWM")
    spec = generate_json(
        slow_target, "--rpc", rpc_server.endpoint, "--gpu-layers", "99",
        "--draft", str(wide_draft), "--fixed-draft", "--draft-max", "4",
    )  # fmt: skip
    assert spec["speculation"] == "draft" and spec["n_drafted"] > 0
    assert spec["token_ids"] == local["token_ids"]
    peak = max(memory_kb(rpc_server.proc.pid, "VmHWM"), peak_before)
    # The draft (as big as the target) stayed here: the server's peak is one model, not two.
    assert peak - rss1 < 1.5 * model_kb, (peak - rss1, model_kb)


def test_a_model_that_stays_here_names_its_devices_before_any_server_is_registered() -> None:
    # A draft loads on its own thread beside a target that registers its servers: left to
    # llama.cpp's choice (None), it would take every device registered when its load begins.
    devices = rpc.device_list((), stays_here=True)
    assert devices is not None
    assert list(devices) == [*rpc.local_devices(), None]  # the same devices, NULL-terminated
    assert rpc.device_list(()) is None or rpc._registered  # no server in play: llama.cpp's choice


def test_handshake_with_the_real_server_reports_this_builds_protocol(rpc_server: Server) -> None:
    assert rpc.check_server(rpc_server.endpoint)[0] == rpc.PROTOCOL[0]


def test_server_killed_mid_reply_ends_generate_with_the_address(
    rpc_server: Server, slow_target: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.main", "generate", "--model", str(slow_target), "--prompt", "the cat",
         "--max-tokens", "1800", "--ctx", "2048", "--threads", "1", "--rpc", rpc_server.endpoint,
         "--gpu-layers", "99"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(1)  # the reply is streaming
        assert first, proc.stderr.read().decode()
        rpc_server.kill()
        proc.wait(TIMEOUT_S)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: lost the RPC server {rpc_server.endpoint}"), stderr


def test_worker_reports_the_lost_server_and_a_fresh_engine_restarts(slow_target: Path) -> None:
    inbox: queue.Queue[object] = queue.Queue()

    wait_for = functools.partial(next_message, inbox)

    server = Server()
    config = EngineConfig(
        str(slow_target), n_threads=1, n_ctx=2048, n_gpu_layers=99, rpc_servers=(server.endpoint,)
    )
    reply = ReplyRequest(1, (ChatTurn("user", "the cat"),), max_tokens=1800)
    worker = WorkerProcess(inbox.put)
    worker.start()
    try:
        worker.send(LoadRequest(config))
        wait_for(EngineLoaded)
        worker.send(reply)
        wait_for(ReplyEvents)
        server.kill()
        died = wait_for(WorkerDied)
        assert isinstance(died, WorkerDied)
        assert f"lost the RPC server {server.endpoint}" in died.sentence
        assert "conversation is saved" in died.sentence
    finally:
        worker.shutdown()

    # What the window does next: a fresh worker. The server is still down: a sentence, no crash.
    worker = WorkerProcess(inbox.put)
    worker.start()
    try:
        worker.send(LoadRequest(config))
        failed = wait_for(EngineFailed)
        assert isinstance(failed, EngineFailed)
        assert f"nothing is listening at {server.endpoint}" in failed.failure.sentence
        assert worker.is_alive()
        # The server is back (same address): the same engine loads and replies.
        server = Server(server.port)
        worker.send(LoadRequest(config))
        wait_for(EngineLoaded)
        worker.send(ReplyRequest(2, (ChatTurn("user", "the cat"),), max_tokens=8))
        done = wait_for(ReplyEvents)
        while done.finished is None:  # type: ignore[attr-defined]
            done = wait_for(ReplyEvents)
    finally:
        worker.shutdown()
        server.kill()


# -- addresses that cannot work: one sentence each, exit code 2 ------------------------------------


def test_unreachable_address_is_named(tiny_target: Path) -> None:
    port = free_port()
    r = tandem("generate", "--model", str(tiny_target), "--prompt", "hi", "--rpc", f"127.0.0.1:{port}",
               "--gpu-layers", "99")  # fmt: skip
    line = error_line(r)
    assert f"nothing is listening at 127.0.0.1:{port} (connection refused)" in line


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("localhost", "is not an RPC server address; expected HOST:PORT"),
        ("127.0.0.1:99999", "the port must be a number from 1 to 65535"),
        ("[::1]:50052", "IPv4 only"),
        ("127.0.0.1:5000,127.0.0.1:5000", "listed twice"),
    ],
)
def test_bad_rpc_addresses(tiny_target: Path, spec: str, message: str) -> None:
    r = tandem("generate", "--model", str(tiny_target), "--prompt", "hi", "--rpc", spec, "--gpu-layers", "99")
    assert message in error_line(r)


def test_rpc_without_gpu_layers_says_what_to_add(tiny_target: Path) -> None:
    r = tandem("generate", "--model", str(tiny_target), "--prompt", "hi", "--rpc", "127.0.0.1:50052")
    assert "add --gpu-layers N" in error_line(r)


class FakeServer:
    """A TCP server on 127.0.0.1 that answers the RPC handshake its own way (a llama.cpp of
    another protocol version, or something that is no RPC server at all)."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.endpoint = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.answer = answer
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                self.answer(conn)

    def close(self) -> None:
        self.sock.close()


def hello_answer(major: int, minor: int, patch: int) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        request = b""
        while len(request) < 1 + 8 + 24:
            chunk = conn.recv(64)
            if not chunk:
                return
            request += chunk
        assert request[0] == 14  # RPC_CMD_HELLO
        conn.sendall((28).to_bytes(8, "little") + bytes([major, minor, patch, 0]) + bytes(24))

    return answer


def test_protocol_version_mismatch_is_named(tiny_target: Path) -> None:
    fake = FakeServer(hello_answer(6, 1, 0))
    try:
        r = tandem("generate", "--model", str(tiny_target), "--prompt", "hi", "--rpc", fake.endpoint,
                   "--gpu-layers", "99")  # fmt: skip
    finally:
        fake.close()
    line = error_line(r)
    assert f"the RPC server {fake.endpoint} speaks RPC protocol 6.1.0; this build speaks 7.0.0" in line


def test_handshake_failures_are_sentences() -> None:
    newer = FakeServer(hello_answer(7, 9, 0))
    closes = FakeServer(lambda conn: None)  # reads nothing, closes: another protocol
    http = FakeServer(lambda conn: conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"))
    silent = FakeServer(lambda conn: conn.recv(1) and threading.Event().wait(10))
    older_minor = FakeServer(hello_answer(7, 0, 3))
    try:
        with pytest.raises(rpc.RpcError, match=r"speaks RPC protocol 7\.9\.0"):
            rpc.check_server(newer.endpoint)
        with pytest.raises(rpc.RpcError, match="closed the connection during the handshake"):
            rpc.check_server(closes.endpoint)
        with pytest.raises(rpc.RpcError, match="instead of 28: not a llama.cpp RPC server"):
            rpc.check_server(http.endpoint)
        with pytest.raises(rpc.RpcError, match="did not answer the handshake within 1 s"):
            rpc.check_server(silent.endpoint, answer_timeout_s=1.0)
        assert rpc.check_server(older_minor.endpoint) == (7, 0, 3)
    finally:
        for fake in (newer, closes, http, silent, older_minor):
            fake.close()


def test_describe_abort_names_the_dead_server() -> None:
    alive = FakeServer(hello_answer(7, 0, 0))
    dead = f"127.0.0.1:{free_port()}"
    message = "/src/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response"
    try:
        assert rpc.describe_abort(message, [alive.endpoint, dead]).startswith(f"lost the RPC server {dead}:")
        assert rpc.describe_abort(message, [alive.endpoint]) == (
            f"the connection to the RPC server {alive.endpoint} broke "
            "(llama.cpp: Remote RPC server crashed or returned malformed response)"
        )
        assert rpc.describe_abort("/src/ggml.c:10: GGML_ASSERT(x) failed", []) == (
            "llama.cpp aborted: GGML_ASSERT(x) failed"
        )
    finally:
        alive.close()


# -- `tandem rpc-server` --------------------------------------------------------------------------


def test_rpc_server_command_warns_and_serves() -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.main", "rpc-server", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        wait_until(
            lambda: server_ready(f"127.0.0.1:{port}") or proc.poll() is not None, what="tandem rpc-server"
        )
        assert proc.poll() is None
        # A second server on the same port: refused before it starts, with the reason.
        r = tandem("rpc-server", "--port", str(port))
        assert f"cannot listen on 127.0.0.1:{port}" in error_line(r)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.stderr is not None
    stderr = proc.stderr.read()
    assert "no authentication" in stderr and "trusted network only" in stderr
    assert "warning:" not in stderr  # loopback: nothing else can reach it


def test_rpc_server_notice_warns_for_a_network_address() -> None:
    text = "\n".join(notice("192.168.1.20", 50052))
    assert "no authentication" in text
    assert "warning: 192.168.1.20 is not a loopback address" in text
    assert "warning" not in "\n".join(notice("127.0.0.1", 50052))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--host", "my-laptop"], "--host must be an IPv4 address"),
        (["--port", "0"], "--port must be from 1 to 65535"),
        (["--threads", "0"], "--threads must be at least 1"),
    ],
)
def test_rpc_server_bad_arguments(args: list[str], message: str) -> None:
    assert message in error_line(tandem("rpc-server", *args))


# -- the window ------------------------------------------------------------------------------------


def test_settings_dialog_takes_rpc_servers(qtbot) -> None:  # type: ignore[no-untyped-def]
    from app.settings import Settings
    from ui.settings.settings_dialog import SettingsDialog, needs_reload

    before = Settings()
    dialog = SettingsDialog(before, gpu_offload_supported=False)
    qtbot.addWidget(dialog)
    assert not dialog.gpu_layers.isEnabled()  # a CPU build without RPC servers: nothing to offload to
    dialog.rpc_servers.setText("my-laptop")
    assert dialog.gpu_layers.isEnabled()
    dialog.accept()
    assert dialog.result() != dialog.DialogCode.Accepted
    assert "is not an RPC server address" in dialog.rpc_error.text() and not dialog.rpc_error.isHidden()

    dialog.rpc_servers.setText("10.0.0.2:50052 , 10.0.0.3:50052")
    dialog.accept()
    assert "set it (999: all of them)" in dialog.rpc_error.text()
    dialog.gpu_layers.setValue(999)
    dialog.accept()
    assert dialog.result() == dialog.DialogCode.Accepted
    after = dialog.result_settings()
    assert after.rpc_servers == "10.0.0.2:50052, 10.0.0.3:50052"
    assert needs_reload(before, after)
    assert after.engine_config("m.gguf").rpc_servers == ("10.0.0.2:50052", "10.0.0.3:50052")
    # A hand-edited settings file with a bad list: ignored, the model loads locally.
    assert Settings(rpc_servers="nonsense").engine_config("m.gguf").rpc_servers == ()


def test_window_on_an_rpc_server_survives_losing_it(  # type: ignore[no-untyped-def]
    qtbot, open_window, wait_reply, slow_target: Path
) -> None:
    server = Server()
    try:
        rss0 = memory_kb(server.proc.pid, "VmRSS")
        window = open_window(slow_target, rpc_servers=server.endpoint, n_gpu_layers=99, max_tokens=1800)
        assert memory_kb(server.proc.pid, "VmHWM") - rss0 > 0.8 * slow_target.stat().st_size / 1024
        _lose_server_mid_reply(
            qtbot, window, wait_reply, server.kill, f"lost the RPC server {server.endpoint}"
        )

        # The server is back: the next message starts a fresh engine on it and is answered.
        server = Server(server.port)
        _next_message_is_answered(window, wait_reply)
    finally:
        server.kill()


def _lose_server_mid_reply(qtbot, window, wait_reply, cut: Callable[[], None], notice: str):  # type: ignore[no-untyped-def]
    """A long request; once its text streams, cut() takes the server away. The window says
    `notice` and keeps the conversation: the question and the interrupted reply (returned)."""
    from app.store import Store

    window.presenter.send("Write a very long essay")
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None and len(window.presenter.replies.live.reply.text) > 10
        ),
        timeout=60_000,
    )
    cut()
    wait_reply(window)
    qtbot.waitUntil(lambda: notice in window.chat.notice.text(), timeout=30_000)
    store = Store()
    try:
        user, reply = store.messages(window.presenter.conversation_id)
    finally:
        store.close()
    assert user.content == "Write a very long essay"
    assert reply.status == "interrupted" and reply.content
    return reply


def _next_message_is_answered(window, wait_reply):  # type: ignore[no-untyped-def]
    """A short next message is answered (a fresh engine); the conversation's messages, returned."""
    from app.store import Store

    window.presenter.settings = dataclasses.replace(window.presenter.settings, max_tokens=16)
    window.presenter.send("Shorter please")
    wait_reply(window, timeout_ms=120_000)
    store = Store()
    try:
        messages = store.messages(window.presenter.conversation_id)
    finally:
        store.close()
    assert messages[-1].status == "complete"
    return messages


# -- a server that goes silent (its machine off, the network gone: no reset, no error) -------------


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_unusable() -> str | None:
    if not sys.platform.startswith("linux") or shutil.which("ip") is None:
        return "a silent network drop is made with `ip netns` (Linux)"
    if os.geteuid() != 0:
        return "a silent network drop needs root (ip netns, a veth pair)"
    return None


_netns_made = itertools.count()


class SilentNetworkServer:
    """ggml-rpc-server in a network namespace of its own, reached over a veth pair (as
    tools/lab/rpc_latency.sh does). drop() takes the namespace's end of the pair down: from then on
    every packet vanishes, both ways, with no reset and no error, as when the server's machine
    loses power or its cable is pulled."""

    def __init__(self) -> None:
        n = next(_netns_made)
        tag = f"{os.getpid() % 100000:05d}{n % 10}"
        self.ns, self.host_if, self.ns_if = f"tandem-silent-{tag}", f"tds{tag}a", f"tds{tag}b"
        subnet = f"10.{180 + n % 50}.{os.getpid() % 250}"
        self.host_ip, self.ns_ip = f"{subnet}.1", f"{subnet}.2"
        self.endpoint = f"{self.ns_ip}:{rpc.DEFAULT_PORT}"
        self.proc: subprocess.Popen[bytes] | None = None
        _ip("netns", "add", self.ns)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.ns)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.ns, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
            _ip("-n", self.ns, "link", "set", self.ns_if, "up")
            self.start()
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, str(SERVER_BIN), "--host", self.ns_ip,
             "--port", str(rpc.DEFAULT_PORT), "--threads", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        proc = self.proc
        wait_until(lambda: server_ready(self.endpoint) or proc.poll() is not None, what="the RPC server")
        assert proc.poll() is None, "ggml-rpc-server exited at start"

    def drop(self) -> None:
        _ip("-n", self.ns, "link", "set", self.ns_if, "down")

    def restore(self) -> None:
        _ip("-n", self.ns, "link", "set", self.ns_if, "up")

    def restart(self) -> None:
        """A fresh server: the old one still waits for the client that vanished (ggml-rpc-server
        has no keepalive of its own), and serves nobody else meanwhile."""
        self.kill()
        self.start()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()
        # The pair goes at once; the namespace once the last of its sockets has timed out.
        for args in (["link", "del", self.host_if], ["netns", "del", self.ns]):
            subprocess.run(["ip", *args], capture_output=True, timeout=30)


@pytest.fixture
def silent_network() -> Iterator[SilentNetworkServer]:
    reason = _netns_unusable()
    if reason:
        pytest.skip(reason)
    server = SilentNetworkServer()
    yield server
    server.close()


@pytest.fixture
def quick_watchdog(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The watchdog's thresholds in seconds, not tens of them: the server counts as gone after 2 s
    without a word; a llama call is looked at once it has run 0.5 s (the worker, a child
    process, and `tandem generate` read them from the environment)."""
    values = {rpc.SILENCE_ENV: "2", rpc.STALL_ENV: "0.5"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def test_watchdog_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rpc.SILENCE_ENV, raising=False)
    monkeypatch.delenv(rpc.STALL_ENV, raising=False)
    assert rpc.watchdog_settings() == (rpc.SILENCE_S, rpc.STALL_FLOOR_S)
    monkeypatch.setenv(rpc.SILENCE_ENV, "0.2")  # keepalive counts whole seconds: at least 1
    monkeypatch.setenv(rpc.STALL_ENV, "nonsense")
    assert rpc.watchdog_settings() == (1.0, rpc.STALL_FLOOR_S)


def test_the_engines_connection_is_found_armed_and_heard_from() -> None:
    """The watchdog's view of a real TCP connection on 127.0.0.1: found by its peer, given
    keepalive probes, and the kernel's count of how long ago the peer last said anything."""

    def answer_and_stay(conn: socket.socket) -> None:
        hello_answer(7, 0, 0)(conn)
        while conn.recv(64):  # connected until the client goes
            pass

    server = FakeServer(answer_and_stay)
    host, port = server.sock.getsockname()
    client = socket.create_connection((host, port), timeout=5)
    try:
        found = rpc.engine_connections({server.endpoint: (host, port)})
        assert found == {server.endpoint: [client.fileno()]}
        assert rpc.arm_keepalive(client.fileno(), silence_s=20)
        assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
        assert client.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 40_000
        client.sendall(struct.pack("<BQ", 14, 24) + bytes(24))
        assert len(client.recv(64)) == 36  # the answer: heard from just now
        heard = rpc.heard_ago(client.fileno())
        assert heard is not None and 0 <= heard < 1.0
    finally:
        client.close()
        server.close()


def test_silent_drop_mid_reply_ends_the_worker_naming_the_server(
    silent_network: SilentNetworkServer, quick_watchdog: dict[str, str], slow_target: Path
) -> None:
    import time

    inbox: queue.Queue[object] = queue.Queue()

    wait_for = functools.partial(next_message, inbox)

    endpoint = silent_network.endpoint
    config = EngineConfig(str(slow_target), n_threads=1, n_ctx=2048, n_gpu_layers=99, rpc_servers=(endpoint,))
    worker = WorkerProcess(inbox.put)
    worker.start()
    try:
        worker.send(LoadRequest(config))
        wait_for(EngineLoaded)
        worker.send(ReplyRequest(1, (ChatTurn("user", "the cat"),), max_tokens=1800))
        wait_for(ReplyEvents)
        silent_network.drop()
        dropped = time.monotonic()
        died = wait_for(WorkerDied)
        took = time.monotonic() - dropped
    finally:
        worker.shutdown()
    assert isinstance(died, WorkerDied)
    assert died.exitcode == rpc.ABORT_EXIT_CODE
    assert f"lost the RPC server {endpoint}: no answer for 2 s" in died.sentence, died.sentence
    assert "conversation is saved" in died.sentence
    assert took < 20, took  # 2 s of silence, a look every half second: not minutes, not forever

    # The network is back; the old server still waits for the client that vanished, so it is
    # restarted, and a fresh engine (what the window starts next) loads on it and answers.
    silent_network.restore()
    silent_network.restart()
    worker = WorkerProcess(inbox.put)
    worker.start()
    try:
        worker.send(LoadRequest(config))
        wait_for(EngineLoaded)
        worker.send(ReplyRequest(2, (ChatTurn("user", "the cat"),), max_tokens=8))
        done = wait_for(ReplyEvents)
        while done.finished is None:  # type: ignore[attr-defined]
            done = wait_for(ReplyEvents)
        assert worker.is_alive()
    finally:
        worker.shutdown()


def test_silent_drop_ends_generate_with_an_error_line(
    silent_network: SilentNetworkServer, quick_watchdog: dict[str, str], slow_target: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **quick_watchdog}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.main", "generate", "--model", str(slow_target), "--prompt", "the cat",
         "--max-tokens", "1800", "--ctx", "2048", "--threads", "1", "--rpc", silent_network.endpoint,
         "--gpu-layers", "99"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(1)  # the reply is streaming
        assert first, proc.stderr.read().decode()
        silent_network.drop()
        proc.wait(60)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: lost the RPC server {silent_network.endpoint}: no answer for 2 s"), stderr


def test_a_server_silent_but_alive_is_waited_for(
    rpc_server: Server, quick_watchdog: dict[str, str], slow_target: Path, tmp_path: Path
) -> None:
    """A server that says nothing for longer than the watchdog's limit, its machine alive (here:
    the process stopped with SIGSTOP; as a long prefill on a slow server, or a slow link): the
    kernel there still answers TCP, so the reply waits, and ends normally once it goes on. A
    fresh connection could not tell: the server answers no second client while it has one."""
    import re

    inbox: queue.Queue[object] = queue.Queue()
    log = tmp_path / "worker.log"
    config = EngineConfig(
        str(slow_target), n_threads=1, n_ctx=2048, n_gpu_layers=99, rpc_servers=(rpc_server.endpoint,)
    )
    worker = WorkerProcess(inbox.put, log_path=log)
    worker.start()

    wait_for = functools.partial(next_message, inbox)

    def watched_s() -> float:
        """The longest stalled call the watchdog has logged as still answered."""
        found = re.findall(r"a llama call has run ([\d.]+) s; the RPC servers still answer", log.read_text())
        return max(map(float, found), default=0.0)

    try:
        worker.send(LoadRequest(config))
        wait_for(EngineLoaded)
        worker.send(ReplyRequest(1, (ChatTurn("user", "the cat"),), max_tokens=200))
        wait_for(ReplyEvents)
        rpc_server.proc.send_signal(signal.SIGSTOP)
        try:
            # Silent for over twice the limit (2 s), seen by the watchdog, and the engine lives.
            wait_until(lambda: watched_s() >= 5 or not worker.is_alive(), timeout_s=60, what="the watchdog")
            assert worker.is_alive(), inbox.get(timeout=5)
        finally:
            rpc_server.proc.send_signal(signal.SIGCONT)
        finished = wait_for(ReplyEvents, Finished)
        assert finished.finished.stop_reason in ("length", "eog", "stop")  # type: ignore[attr-defined]
        assert worker.is_alive()
    finally:
        worker.shutdown()


def _connected(endpoint: str) -> bool:
    """Does this machine hold an established TCP connection to endpoint (/proc/net/tcp)?"""
    host, port = endpoint.split(":")
    remote = "".join(f"{int(part):02X}" for part in reversed(host.split("."))) + f":{int(port):04X}"
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(row.split()[2] == remote and row.split()[3] == "01" for row in rows)


def test_silent_drop_between_replies_ends_the_next_one_naming_the_server(
    silent_network: SilentNetworkServer, quick_watchdog: dict[str, str], tiny_target: Path
) -> None:
    """No call runs while the server vanishes: the kernel's own limit (keepalive unanswered for
    2 x 2 s) closes the engine's connection, and the next reply ends at once, naming the server."""
    inbox: queue.Queue[object] = queue.Queue()

    wait_for = functools.partial(next_message, inbox)

    endpoint = silent_network.endpoint
    config = EngineConfig(str(tiny_target), n_threads=1, n_ctx=512, n_gpu_layers=99, rpc_servers=(endpoint,))
    worker = WorkerProcess(inbox.put)
    worker.start()
    try:
        worker.send(LoadRequest(config))
        wait_for(EngineLoaded)
        worker.send(ReplyRequest(1, (ChatTurn("user", "the cat"),), max_tokens=4))
        wait_for(ReplyEvents, Finished)
        assert _connected(endpoint)
        silent_network.drop()
        wait_until(
            lambda: not _connected(endpoint), timeout_s=60, what="the kernel to give up the connection"
        )
        worker.send(ReplyRequest(2, (ChatTurn("user", "the dog"),), max_tokens=4))
        died = inbox.get(timeout=TIMEOUT_S)
        while not isinstance(died, WorkerDied):
            assert not isinstance(died, ReplyEvents) or died.finished is None, died
            died = inbox.get(timeout=TIMEOUT_S)
    finally:
        worker.shutdown()
    assert f"lost the RPC server {endpoint}: it stopped answering" in died.sentence, died.sentence


def test_window_keeps_the_conversation_when_its_server_goes_silent(  # type: ignore[no-untyped-def]
    qtbot, open_window, wait_reply, silent_network: SilentNetworkServer, quick_watchdog, slow_target: Path
) -> None:
    endpoint = silent_network.endpoint
    window = open_window(slow_target, rpc_servers=endpoint, n_gpu_layers=99, max_tokens=1800)
    reply = _lose_server_mid_reply(
        qtbot, window, wait_reply, silent_network.drop, f"lost the RPC server {endpoint}: no answer for"
    )

    # The network is back and the server restarted: the next message is answered by a fresh engine.
    silent_network.restore()
    silent_network.restart()
    messages = _next_message_is_answered(window, wait_reply)
    assert [m.content for m in messages][:3] == ["Write a very long essay", reply.content, "Shorter please"]
