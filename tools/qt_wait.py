"""Waiting for the window in the house's scripts (screenshots, bench_gui): a blocking Qt event loop
polled by a timer until a condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QEventLoop, QTimer


def wait_until(
    condition: Callable[[], bool], what: str, *, timeout_s: float, prog: str, poll_ms: int = 20
) -> None:
    """Run the Qt event loop until condition() holds; past timeout_s, end the program with a line
    naming `what`. A blocking event loop polled by a timer, for the window's tools (screenshots,
    bench_gui): a processEvents() spin would take a core from llama.cpp, whose threads then wait
    on each other (1 tok/s instead of 60 here)."""
    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    poll = QTimer()
    poll.setInterval(poll_ms)
    poll.timeout.connect(lambda: loop.quit() if condition() or time.monotonic() > deadline else None)
    poll.start()
    if not condition():
        loop.exec()
    poll.stop()
    if not condition():
        raise SystemExit(f"{prog}: timed out waiting for {what}")
