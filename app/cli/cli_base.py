"""The command line's one edge: one parser class, one way to fail, one exit-code policy.

Every failure a user meets on the command line, a usage mistake, an error they can act on or a
bug, ends the same way: exit code 2 and one last stderr line starting `error: `, never a
traceback (TANDEM_DEBUG=1 re-raises a bug; its traceback is also kept in the logs folder).
Ctrl+C ends with 130. `tandem generate|bench|serve|models|rpc-server` and the window's own
`tandem [--model] [--draft]` all parse with `Parser` and run inside `at_the_edge`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from engine.errors import TandemError

EXIT_OK = 0
EXIT_BAD_INPUT = 2  # bad input, an error the user can act on, and an unexpected failure alike
EXIT_INTERRUPTED = 130


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
