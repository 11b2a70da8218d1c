"""A load drill for `tandem serve`: many concurrent clients for minutes, and what became of each
request (issue 28).

Each client loops: a text completion or a chat, streamed or not, and some streamed clients leave
after a few chunks. Every request must end one of these ways: a whole reply (200 with a
finish_reason, or a stream ending in [DONE]), a refusal with a status (503 + Retry-After when the
queue is full, another 4xx/5xx with a JSON error), or the client leaving on purpose. A request
that hangs past its timeout, a connection reset, a 200 without its end, or a body that is not
what the status says is a lost reply. The server's memory (its process and the engine worker's,
RSS from /proc) is sampled all along: after warming up it should stay flat.

    .venv/bin/python -m tools.lab.load_drill                  # a tiny generated model, 32 clients, 180 s
    .venv/bin/python -m tools.lab.load_drill --clients 64 --duration 300 --queue 8
    .venv/bin/python -m tools.lab.load_drill --model default  # the embedded Gemma 3 270M
    # beside them, hostile sockets (issue 38): 1,000 idle, 10 slow uploads, 10 half-sent headers,
    # the server started under a desktop's usual limit of 1,024 open files; a probe request every
    # second must be answered within --probe-limit s, and the server's log must stay small
    .venv/bin/python -m tools.lab.load_drill --clients 4 --duration 60 --idle 1000 --slow 10 --half 10 --ulimit 1024

Run it under `flock /tmp/tandem-bench.lock` on a shared machine. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROMPTS = ("the", "once upon a time", "the cat sat on the", "a b c d", "Write a short poem about rain.")


@dataclass
class DrillReport:
    outcomes: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)  # what each lost reply looked like
    latencies_s: list[float] = field(default_factory=list)  # whole replies, request to last byte
    rss_mb: list[tuple[float, float, float]] = field(default_factory=list)  # (t_s, server, worker)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, outcome: str, latency_s: float | None = None, lost: str | None = None) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            if latency_s is not None:
                self.latencies_s.append(latency_s)
            if lost is not None:
                self.lost.append(lost)

    @property
    def n_requests(self) -> int:
        return sum(self.outcomes.values())


def _one_request(
    client: object,
    base: str,
    rng: random.Random,
    report: DrillReport,
    timeout_s: float,
    patient: bool = False,
) -> None:
    import httpx

    assert isinstance(client, httpx.Client)
    chat = rng.random() < 0.4
    stream = rng.random() < 0.6
    leave_after = rng.randint(1, 4) if stream and rng.random() < 0.3 else None
    max_tokens = rng.choice((4, 16, 48, 96))
    body: dict[str, object] = {
        "max_tokens": max_tokens,
        "temperature": rng.choice((0, 0.8)),
        "stream": stream,
    }
    if chat:
        body["messages"] = [{"role": "user", "content": rng.choice(PROMPTS)}]
        path = "/chat/completions"
    else:
        body["prompt"] = rng.choice(PROMPTS)
        path = "/completions"
    t0 = time.monotonic()
    try:
        if not stream:
            r = client.post(base + path, json=body, timeout=timeout_s)
            _judge_whole(r, report, time.monotonic() - t0)
            _wait_if_asked(r, patient)
            return
        with client.stream("POST", base + path, json=body, timeout=timeout_s) as r:
            if r.status_code != 200:
                r.read()
                _judge_refusal(r, report)
                _wait_if_asked(r, patient)
                return
            n_chunks = 0
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line.removeprefix("data: ")
                if data == "[DONE]":
                    report.count("200 stream", time.monotonic() - t0)
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    report.count(f"stream error {chunk['error'].get('code')}")
                    return
                n_chunks += 1
                if leave_after is not None and n_chunks >= leave_after:
                    report.count("left mid-stream (on purpose)")
                    return  # closing the response drops the connection
            report.count("lost", lost=f"stream of {path} ended without [DONE] after {n_chunks} chunks")
    except httpx.TimeoutException as e:
        report.count("lost", lost=f"{path} timed out after {timeout_s:.0f} s ({type(e).__name__})")
    except httpx.HTTPError as e:
        report.count("lost", lost=f"{path}: {type(e).__name__}: {e}")


def _wait_if_asked(r: object, patient: bool) -> None:
    """A patient client waits as long as a 503's Retry-After says before its next request."""
    import httpx

    assert isinstance(r, httpx.Response)
    if patient and r.status_code == 503 and r.headers.get("retry-after", "").isdigit():
        time.sleep(int(r.headers["retry-after"]))


def _judge_whole(r: object, report: DrillReport, latency_s: float) -> None:
    import httpx

    assert isinstance(r, httpx.Response)
    if r.status_code != 200:
        _judge_refusal(r, report)
        return
    try:
        reason = r.json()["choices"][0]["finish_reason"]
    except (ValueError, KeyError, IndexError):
        report.count("lost", lost=f"200 without a whole reply: {r.text[:120]!r}")
        return
    if reason in ("stop", "length", "repetition"):  # repetition: the loop guard ended a whole reply
        report.count("200 whole", latency_s)
    else:
        report.count("lost", lost=f"200 with finish_reason {reason!r}")


def _judge_refusal(r: object, report: DrillReport) -> None:
    import httpx

    assert isinstance(r, httpx.Response)
    try:
        message = r.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        report.count("lost", lost=f"{r.status_code} without a JSON error: {r.text[:120]!r}")
        return
    if r.status_code == 503 and not r.headers.get("retry-after", "").isdigit():
        report.count("lost", lost=f"503 without Retry-After: {message}")
        return
    if r.status_code >= 500 and r.status_code != 503:  # a crashed engine is not a refusal
        report.count("lost", lost=f"{r.status_code}: {message}")
        return
    report.count(f"{r.status_code} refused")


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _worker_pid(server_pid: int) -> int | None:
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
                return int(pid)
    return None


def run_drill(
    base: str,
    server_pid: int | None,
    n_clients: int,
    duration_s: float,
    seed: int = 28,
    timeout_s: float = 300.0,
    sample_s: float = 2.0,
    patient: bool = False,
) -> DrillReport:
    """Drive the API at `base` (…/v1) with n_clients looping clients for duration_s."""
    import httpx

    report = DrillReport()
    stop_at = time.monotonic() + duration_s
    t0 = time.monotonic()

    def client_loop(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        with httpx.Client() as client:
            while time.monotonic() < stop_at:
                _one_request(client, base, rng, report, timeout_s, patient)
                if rng.random() < 0.2:
                    time.sleep(rng.random() * 0.5)  # a pause now and then

    def sample() -> None:
        while time.monotonic() < stop_at:
            if server_pid is not None:
                worker = _worker_pid(server_pid)
                server = _rss_mb(server_pid)
                report.rss_mb.append((time.monotonic() - t0, server, _rss_mb(worker) if worker else 0.0))
            time.sleep(sample_s)

    threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(n_clients)]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + timeout_s + 30)
    sampler.join(sample_s + 5)
    hung = sum(t.is_alive() for t in threads)
    if hung:
        report.count("lost", lost=f"{hung} clients still waiting after the drill")
    return report


@dataclass
class HostileReport:
    """What the hostile sockets saw, and how a plain probe request fared beside them."""

    opened: Counter[str] = field(default_factory=Counter)  # idle / slow / half: sockets opened
    closed_by_server: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)  # first status line the server sent
    probe_latencies_s: list[float] = field(default_factory=list)
    probes_lost: list[str] = field(default_factory=list)


def run_hostile(
    host: str,
    port: int,
    stop_at: float,
    n_idle: int,
    n_slow: int,
    n_half: int,
    report: HostileReport,
    source: str = "",
    reopen_per_s: float = 200.0,
) -> None:
    """Keep n_idle sockets open that send nothing, n_slow uploads that send headers and then one
    byte of body a second, n_half that send their headers one byte a second; each one the server
    closes is opened again (at most reopen_per_s a second), so the pressure stays until stop_at.
    source: the address they come from (127.0.0.2: another computer, as the server counts
    clients; "": the drill's own)."""
    body_head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100000\r\n\r\n{"
    ).encode()
    half_head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode()
    socks: dict[socket.socket, str] = {}
    selector = selectors.DefaultSelector()  # epoll: select() stops at descriptor 1023

    def open_one(kind: str) -> None:
        try:
            sock = socket.create_connection(
                (host, port), timeout=5, source_address=(source, 0) if source else None
            )
        except OSError:
            report.answers["connect failed"] += 1
            return
        sock.setblocking(False)
        report.opened[kind] += 1
        if kind != "idle":
            sock.send(body_head if kind == "slow" else half_head)
        socks[sock] = kind
        selector.register(sock, selectors.EVENT_READ)

    for kind, n in (("slow", n_slow), ("half", n_half), ("idle", n_idle)):
        for _ in range(n):
            open_one(kind)
    next_drip = time.monotonic()
    to_reopen: list[str] = []
    allowance, last = 0.0, time.monotonic()
    while time.monotonic() < stop_at:
        now = time.monotonic()
        allowance = min(reopen_per_s, allowance + (now - last) * reopen_per_s)
        last = now
        while to_reopen and allowance >= 1:
            allowance -= 1
            open_one(to_reopen.pop())
        for key, _ in selector.select(0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            selector.unregister(sock)
            kind = socks.pop(sock)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if data:
                report.answers[data.split(b"\r\n", 1)[0].decode("latin-1")[:40]] += 1
            report.closed_by_server[kind] += 1
            sock.close()
            to_reopen.append(kind)
        if time.monotonic() >= next_drip:  # a byte a second from each slow one
            next_drip += 1.0
            for sock, kind in list(socks.items()):
                if kind in ("slow", "half"):
                    with contextlib.suppress(OSError):
                        sock.send(b" " if kind == "slow" else b"x")
    for sock in socks:
        sock.close()
    selector.close()


def run_probe(base: str, stop_at: float, limit_s: float, report: HostileReport) -> None:
    """One plain request a second (a fresh connection each: a new client), timed."""
    import httpx

    while time.monotonic() < stop_at:
        t0 = time.monotonic()
        try:
            r = httpx.post(base + "/completions", json={"prompt": "the", "max_tokens": 4}, timeout=30)
            elapsed = time.monotonic() - t0
            if r.status_code == 200:
                report.probe_latencies_s.append(elapsed)
                if elapsed > limit_s:
                    report.probes_lost.append(f"answered after {elapsed:.2f} s")
            else:
                report.probes_lost.append(f"HTTP {r.status_code}: {r.text[:80]}")
        except httpx.HTTPError as e:
            report.probes_lost.append(f"{type(e).__name__}: {e}")
        time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))


def describe_hostile(report: HostileReport, log_bytes: int) -> str:
    lat = sorted(report.probe_latencies_s)
    lines = [
        f"hostile sockets opened {dict(report.opened)}, closed by the server {dict(report.closed_by_server)}",
        f"  server answers to them: {dict(report.answers)}",
        f"  probe: {len(lat)} answered"
        + (f", p50 {lat[len(lat) // 2]:.2f} s, max {lat[-1]:.2f} s" if lat else "")
        + f"; {len(report.probes_lost)} lost or late",
        f"  server log: {log_bytes:,} bytes",
    ]
    lines += [f"  PROBE LOST: {x}" for x in report.probes_lost[:10]]
    return "\n".join(lines)


def describe(report: DrillReport, duration_s: float) -> str:
    lines = [f"{report.n_requests} requests in {duration_s:.0f} s ({report.n_requests / duration_s:.1f}/s)"]
    for outcome, n in sorted(report.outcomes.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {outcome}: {n}")
    if report.latencies_s:
        q = statistics.quantiles(report.latencies_s, n=100) if len(report.latencies_s) > 1 else [0.0] * 99
        lines.append(
            f"  whole replies: p50 {q[49]:.2f} s, p95 {q[94]:.2f} s, max {max(report.latencies_s):.2f} s"
        )
    if report.rss_mb:
        warm = [s for s in report.rss_mb if s[0] >= min(30.0, duration_s / 4)] or report.rss_mb
        first, last = warm[0], warm[-1]
        peak_server = max(s[1] for s in warm)
        peak_worker = max(s[2] for s in warm)
        lines.append(
            f"  memory (RSS) after warm-up, t={first[0]:.0f} s -> t={last[0]:.0f} s: server {first[1]:.0f} -> "
            f"{last[1]:.0f} MB (peak {peak_server:.0f}), engine worker {first[2]:.0f} -> {last[2]:.0f} MB "
            f"(peak {peak_worker:.0f})"
        )
    for lost in report.lost[:10]:
        lines.append(f"  LOST: {lost}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model", default=None, help="a GGUF path or `default` (default: a tiny generated model)"
    )
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=180.0, help="seconds")
    ap.add_argument("--queue", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--patient", action="store_true", help="clients wait as a 503's Retry-After asks")
    ap.add_argument("--idle", type=int, default=0, help="sockets that connect and send nothing")
    ap.add_argument("--slow", type=int, default=0, help="uploads that send one byte of body a second")
    ap.add_argument("--half", type=int, default=0, help="requests whose headers come one byte a second")
    ap.add_argument("--ulimit", type=int, default=0, help="the server's soft limit of open files")
    ap.add_argument("--probe-limit", type=float, default=2.0, help="seconds a probe request may take")
    ap.add_argument(
        "--hostile-from",
        default="127.0.0.2",
        help="the address the hostile sockets come from (default 127.0.0.2: another client to the "
        "server; '' for the same address as the clients)",
    )
    ap.add_argument(
        "--reopen-rate", type=float, default=200.0, help="hostile sockets reopened a second, at most"
    )
    args = ap.parse_args(argv)
    hostile = args.idle or args.slow or args.half
    if hostile:  # this process holds the hostile sockets
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * (args.idle + 256))), hard))

    home = Path(tempfile.mkdtemp(prefix="tandem-load-drill-"))
    model = args.model
    if model is None:
        sys.path.insert(0, str(ROOT))
        from tests.tiny import write_tiny_model

        model = str(write_tiny_model(home / "drill.gguf", seed=1, n_layers=4))
    from tests.serve_process import free_port, tandem_env

    port = free_port()
    command = [sys.executable, "-m", "app.main", "serve", "--model", model, "--threads", str(args.threads)]
    command += ["--queue", str(args.queue), "--port", str(port), "--ctx", "2048"]

    def limit_open_files() -> None:
        if args.ulimit:
            import resource

            resource.setrlimit(
                resource.RLIMIT_NOFILE, (args.ulimit, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            )

    server = subprocess.Popen(
        command,
        cwd=ROOT,
        env=tandem_env(home),
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit_open_files,
    )
    assert server.stderr is not None
    for line in server.stderr:
        if "listening on" in line:
            break
    else:
        print("error: tandem serve did not start", file=sys.stderr)
        return 2
    log_bytes = [0]

    def drain() -> None:  # the server's log from here on, counted
        for line in server.stderr or ():
            log_bytes[0] += len(line.encode())

    threading.Thread(target=drain, daemon=True).start()
    try:
        how = "patient" if args.patient else "impatient"
        print(
            f"load drill: {args.clients} {how} clients for {args.duration:.0f} s, --queue {args.queue}, model {model}"
        )
        base = f"http://127.0.0.1:{port}/v1"
        hostile_report = HostileReport()
        side: list[threading.Thread] = []
        if hostile:
            stop_at = time.monotonic() + args.duration
            print(
                f"  beside them: {args.idle} idle, {args.slow} slow uploads, {args.half} half headers, "
                f"from {args.hostile_from or 'the same address'}"
            )
            side = [
                threading.Thread(
                    target=run_hostile,
                    args=(
                        "127.0.0.1",
                        port,
                        stop_at,
                        args.idle,
                        args.slow,
                        args.half,
                        hostile_report,
                        args.hostile_from,
                        args.reopen_rate,
                    ),
                    daemon=True,
                ),
                threading.Thread(
                    target=run_probe, args=(base, stop_at, args.probe_limit, hostile_report), daemon=True
                ),
            ]
            for t in side:
                t.start()
        report = run_drill(base, server.pid, args.clients, args.duration, patient=args.patient)
        for t in side:
            t.join(60)
        print(describe(report, args.duration))
        if hostile:
            print(describe_hostile(hostile_report, log_bytes[0]))
        return 1 if report.lost or hostile_report.probes_lost or log_bytes[0] > 1_000_000 else 0
    finally:
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    raise SystemExit(main())
