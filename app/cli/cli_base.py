"""The command line's one edge: one parser class, one way to fail, one exit-code policy.

Every failure a user meets on the command line, a usage mistake, an error they can act on or a
bug, ends the same way: exit code 2 and one last stderr line starting `error: `, never a
traceback (TANDEM_DEBUG=1 re-raises a bug; its traceback is also kept in the logs folder).
Ctrl+C ends with 130. `tandem generate|bench|serve|models|rpc-server` and the window's own
`tandem [--model] [--draft]` all parse with `Parser` and run inside `at_the_edge`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO

from engine.errors import TandemError

EXIT_OK = 0
EXIT_BAD_INPUT = 2  # bad input, an error the user can act on, and an unexpected failure alike
EXIT_INTERRUPTED = 130


# Characters that a terminal takes as commands, not text: C0 controls (ESC starts colour, cursor
# and title sequences), DEL, C1 controls, and bidirectional overrides that reorder what is shown.
_TERMINAL_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_FIELD_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(m: re.Match[str]) -> str:
    return m[0].encode("unicode_escape").decode("ascii")


def terminal_field(text: str) -> str:
    """Text from a file or the hub as one field of a line: every control character (line breaks
    included) written as its escape ("\\x1b"), so it shows as text and cannot move the cursor."""
    return _FIELD_CONTROLS.sub(_escaped, text)


def print_table(rows: list[list[str]], stream: TextIO) -> None:
    """Rows as aligned columns, each cell one line of text (terminal_field)."""
    rows = [[terminal_field(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        stream.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n")


class SafeStream:
    """A text stream that escapes what a terminal would obey (ESC sequences, C1 controls, bidi
    overrides) and passes lines, tabs and carriage returns (a progress line) as they are."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(_TERMINAL_CONTROLS.sub(_escaped, text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def safe_output() -> Iterator[None]:
    """stdout and stderr escaped (SafeStream) for a command that prints what files and the hub say."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(out), SafeStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake ends with the usage and one `error: ` line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        fail(message)
        sys.exit(EXIT_BAD_INPUT)


def fail(message: str) -> int:
    """Print one `error: ` line (whatever the message holds: scripts read the last line)."""
    sys.stdout.flush()
    sys.stderr.write("error: " + " ".join(str(message).split()) + "\n")
    sys.stderr.flush()
    return EXIT_BAD_INPUT


def _log_traceback() -> Path | None:
    try:
        from app import paths

        log = paths.logs_dir() / "cli-errors.log"
        with open(log, "a", encoding="utf-8") as f:
            f.write(time.strftime("%Y-%m-%d %H:%M:%S") + "\n" + traceback.format_exc() + "\n")
        return log
    except OSError:
        return None


def at_the_edge(run: Callable[[], int], interrupted: str = "interrupted") -> int:
    """Run a command; its errors become one `error: ` line and the exit-code policy above."""
    try:
        return run()
    except TandemError as e:
        return fail(str(e))
    except KeyboardInterrupt:
        fail(interrupted)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug: a sentence on screen, the traceback in the log
        if os.environ.get("TANDEM_DEBUG"):
            raise
        log = _log_traceback()
        where = f" (details in {log})" if log else ""
        return fail(f"unexpected failure: {type(e).__name__}: {e}{where}")
