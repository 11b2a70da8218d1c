"""`tandem serve` as a user starts it, for tests: a real process on 127.0.0.1, its log read live."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tandem_env(home: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TANDEM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    env.pop("TANDEM_DEBUG", None)
    return env


class ServeProcess:
    """`tandem serve ARGS --port P`; every stderr line is kept in `lines` as it comes."""

    def __init__(self, home: Path, *args: str, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.main", "serve", *args, "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=tandem_env(home),
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<exited>")
            self._changed.notify_all()

    def wait_for_line(self, text: str, timeout_s: float = 60.0, after: int = 0) -> str:
        """The first line (from index `after` on) that contains text; fails if the process ends first."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    if text in line:
                        return line
                if "<exited>" in self.lines:
                    raise AssertionError(f"tandem serve exited before {text!r}:\n" + "\n".join(self.lines))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {text!r} within {timeout_s} s:\n" + "\n".join(self.lines))
                self._changed.wait(left)

    def started(self) -> ServeProcess:
        self.wait_for_line("listening on", START_TIMEOUT_S)
        return self

    def worker_pid(self) -> int:
        """The engine's worker process (a multiprocessing child, not its resource tracker)."""
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            for pid in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                if b"spawn_main" in cmdline and b"resource_tracker" not in cmdline:
                    return int(pid)
        raise AssertionError("tandem serve has no engine worker process")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
