"""`tandem` as a user runs it, in a process of its own: the one helper the command-line tests share
(a plain module beside tests/serve_process.py, importable from test modules and their helpers
alike; conftest.py holds fixtures, which a helper function cannot take)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tandem(*args: str, timeout: float = 120, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """`python -m app.main ARGS` from the checkout, TANDEM_DEBUG unset (a user's exit codes and lines)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TANDEM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "app.main", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env,
    )  # fmt: skip


def lab(module: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m tools.lab.MODULE ARGS` from the checkout, as a maintainer runs the lab."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TANDEM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", f"tools.lab.{module}", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env,
    )  # fmt: skip


def last_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """Exit code 2, no traceback, and the last stderr line an `error:` sentence (returned)."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ")
    return line
