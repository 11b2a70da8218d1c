"""Logging that nothing outside can flood: a bounded file the user alone can read, lines that
repeat rate-limited, and no request URLs (which may hold credentials) from HTTP libraries.

A client that opens a thousand sockets, or a loop that fails every millisecond, once wrote 42 MB
of the same line in 4 seconds (docs/trust.md). Here each kind of line (its logger and message
template, or a `say` line's first words) may appear BURST times per WINDOW_S; the rest are counted
and said in one line when the window ends. The file rotates at MAX_LOG_BYTES, BACKUPS kept.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path

BURST = 20  # lines of one kind per window before the rest are counted, not written
WINDOW_S = 10.0
MAX_KINDS = 512  # kinds of line remembered (the least recent are forgotten)
MAX_LOG_BYTES = 5 * 1024 * 1024  # tandem.log rotates at this size
BACKUPS = 2  # rotated files kept (tandem.log.1, .2)
# Libraries that log every request's URL (httpx: "HTTP Request: GET http://user:pw@host/...").
QUIET_LOGGERS = ("httpx", "httpcore", "huggingface_hub", "urllib3")


class RateLimit:
    """How many lines of each kind may pass now: `allow(kind)` is False past BURST in a window;
    `left_out()` says, once per kind and window, how many were held back."""

    def __init__(self) -> None:
        self._kinds: OrderedDict[str, list[float]] = OrderedDict()  # kind -> [window start, n, n left out]
        self._lock = threading.Lock()

    def allow(self, kind: str) -> tuple[bool, int]:
        """(write this line?, lines of this kind left out in the window that just ended)."""
        now = time.monotonic()
        with self._lock:
            entry = self._kinds.get(kind)
            dropped = 0
            if entry is None or now - entry[0] >= WINDOW_S:
                dropped = int(entry[2]) if entry is not None else 0
                entry = [now, 0.0, 0.0]
                self._kinds[kind] = entry
                if len(self._kinds) > MAX_KINDS:
                    self._kinds.popitem(last=False)
            self._kinds.move_to_end(kind)
            entry[1] += 1
            if entry[1] > BURST:
                entry[2] += 1
                return False, dropped
            return True, dropped


class RateLimitFilter(logging.Filter):
    """A logging filter: each (logger, template) passes BURST times per window."""

    def __init__(self, limit: RateLimit | None = None) -> None:
        super().__init__()
        self.limit = limit or RateLimit()

    def filter(self, record: logging.LogRecord) -> bool:
        allowed, dropped = self.limit.allow(f"{record.name}:{record.levelno}:{record.msg}")
        if allowed and dropped:
            record.msg = f"{record.msg} ({dropped} more like this were left out of the log)"
        return allowed


_SAY_LIMIT = RateLimit()


def say(line: str) -> None:
    """Print a line to stderr (the server's own log), rate-limited by its first three words."""
    allowed, dropped = _SAY_LIMIT.allow(" ".join(line.split()[:3]))
    if not allowed:
        return
    if dropped:
        line = f"{line} ({dropped} more like this were left out)"
    print(line, file=sys.stderr, flush=True)


def private_file(path: Path) -> None:
    """Make a file the user's alone (0600), creating it empty where missing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.close(fd)
    os.chmod(path, 0o600)


class _PrivateRotatingHandler(logging.handlers.RotatingFileHandler):
    """A rotating log whose files (the current one and the rotated ones) are 0600."""

    def _open(self):  # type: ignore[no-untyped-def]
        private_file(Path(self.baseFilename))
        return super()._open()


def limit_logger(name: str) -> None:
    """Rate-limit what one logger writes (asyncio's accept errors, uvicorn's protocol errors)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, RateLimitFilter) for f in logger.filters):
        logger.addFilter(RateLimitFilter())


def setup_file_logging(path: Path, fmt: str) -> None:
    """The process's log: `path`, 0600, rotated at MAX_LOG_BYTES, every line rate-limited by kind,
    HTTP libraries' request lines left out."""
    handler = _PrivateRotatingHandler(path, maxBytes=MAX_LOG_BYTES, backupCount=BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter(fmt))
    handler.addFilter(RateLimitFilter())
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    for name in QUIET_LOGGERS:  # their request lines at INFO: warnings only
        logging.getLogger(name).setLevel(logging.WARNING)
