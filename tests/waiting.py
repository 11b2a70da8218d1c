"""Waiting on a condition, for tests that run outside a Qt event loop (qtbot.waitUntil inside one).

Tests wait for what they need to see (a file grown, a process gone, a server answering), never a
fixed time: a fixed pause is too short on a loaded machine and wasted on an idle one.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    condition: Callable[[], object],
    timeout_s: float = 30.0,
    what: str | Callable[[], str] = "",
    interval_s: float = 0.02,
) -> None:
    """Return as soon as condition() is true; AssertionError saying `what` (or what it returns,
    read only then: e.g. a log) once timeout_s has passed. interval_s: between two polls."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {said or condition}")
        time.sleep(interval_s)
