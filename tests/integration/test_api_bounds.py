"""What one client can hold of the API (issue 38, item 3), against a real `tandem serve`: idle
sockets, slow uploads and half-sent headers beside a plain client. The plain client is answered,
the slow uploads hold no place in the queue and are answered 408, idle sockets are closed, the
server's log stays small. Each kind comes from its own address (127.0.0.2-4), as from other
computers: the bounds are per client, and one client's sockets do not count against another's. (The 1,000-socket version is tools/lab/load_drill.py; figures in
docs/trust.md.)"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from tests.serve_process import ServeProcess

N_IDLE, N_SLOW, N_HALF = 200, 10, 5
TIMEOUT_S = 3  # --timeout: the body's deadline, and the idle one (min(10 s, this))


def _connect(port: int, source: str) -> socket.socket:
    """A socket from `source` (127.0.0.x: each its own client to the server, as other computers are)."""
    return socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))


def _is_closed_or_answered(sock: socket.socket) -> bytes | None:
    """What the server sent before closing (b"" for a plain close), or None while it is open."""
    sock.setblocking(False)
    try:
        data = sock.recv(4096)
    except BlockingIOError:
        return None
    except OSError:
        return b""
    finally:
        sock.setblocking(True)
    return data


def test_idle_slow_and_half_sent_clients_do_not_shut_out_a_plain_one(
    tmp_path: Path, tiny_target: Path
) -> None:
    server = ServeProcess(
        tmp_path, "--model", str(tiny_target), "--threads", "1", "--queue", "2", "--timeout", str(TIMEOUT_S)
    ).started()
    base = server.url.removesuffix("/v1")
    n_log_lines = len(server.lines)
    idle = [_connect(server.port, "127.0.0.2") for _ in range(N_IDLE)]
    slow = []
    for _ in range(N_SLOW):
        sock = _connect(server.port, "127.0.0.3")
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"prompt": '
        )
        slow.append(sock)
    half = []
    for _ in range(N_HALF):
        sock = _connect(server.port, "127.0.0.4")
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        half.append(sock)
    try:
        # The slow uploads hold no place in line (it was taken before the body was read: three
        # of them gave every real request 503 for over 65 s).
        health = httpx.get(f"{base}/health", timeout=30).json()
        assert health["waiting"] == 0 and health["generating"] == 0, health
        r = httpx.post(f"{server.url}/completions", json={"prompt": "the", "max_tokens": 4}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")

        # The slow uploads are answered 408 at their deadline; the idle and half-sent ones closed.
        answers: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        everyone = idle + slow + half
        while len(answers) < len(everyone) and time.monotonic() < deadline:
            for i, sock in enumerate(everyone):
                if i not in answers:
                    got = _is_closed_or_answered(sock)
                    if got is not None:
                        answers[i] = got
            time.sleep(0.2)
        assert len(answers) == len(everyone), f"{len(everyone) - len(answers)} sockets still open"
        slow_answers = [answers[N_IDLE + i] for i in range(N_SLOW)]
        assert all(a.startswith(b"HTTP/1.1 408") for a in slow_answers), slow_answers[:2]
        assert b"did not arrive within 3 s" in slow_answers[0]

        # And the server still answers.
        r = httpx.post(f"{server.url}/completions", json={"prompt": "the", "max_tokens": 4}, timeout=30)
        assert r.status_code == 200
        log = "\n".join(server.lines[n_log_lines:])
        assert len(log.encode()) < 100_000, log[:2000]
    finally:
        for sock in idle + slow + half:
            sock.close()
        server.stop()


def test_connections_over_the_cap_evict_idle_ones_and_refuse_busy(tmp_path: Path) -> None:
    """The bookkeeping alone: over a client's cap, its oldest idle connection is closed; where all
    are inside a request, the new one is refused."""
    from app.api.connections import Connections

    class Conn:
        def __init__(self, idle: bool, replied: bool = False) -> None:
            self.idle, self.replied, self.closed = idle, replied, False

        def is_idle(self) -> bool:
            return self.idle

        def has_replied(self) -> bool:
            return self.replied

        def has_sent(self) -> bool:
            return self.replied

        def age_s(self) -> float:
            return 5.0

        def close_idle(self) -> None:
            self.closed = True
            connections.forget(self)
            clients.forget(self)

    connections = Connections(max_total=4, max_per_client=2)
    clients = Connections()
    a, b = Conn(idle=True), Conn(idle=False)
    assert connections.admit(a, "10.0.0.1") and connections.admit(b, "10.0.0.1")
    c = Conn(idle=False)
    assert connections.admit(c, "10.0.0.1") and a.closed  # the oldest idle one made room
    refused, d, e = Conn(idle=False), Conn(idle=True), Conn(idle=True)
    assert not connections.admit(refused, "10.0.0.1")  # b and c are busy: refused
    assert connections.admit(d, "10.0.0.2") and connections.admit(e, "10.0.0.3")
    assert len(connections.open) == 4
    assert [x for x in (a, b, c, refused, d, e) if x.closed] == [a]  # one evicted
    # A client's connection kept alive after a reply goes after an idle socket that never sent one.
    kept, never = Conn(idle=True, replied=True), Conn(idle=True)
    clients = Connections(max_total=10, max_per_client=2)
    assert clients.admit(kept, "10.0.0.9") and clients.admit(never, "10.0.0.9")
    assert clients.admit(Conn(idle=False), "10.0.0.9") and never.closed and not kept.closed
