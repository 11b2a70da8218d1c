"""Help without a display: `tandem --help` lists the subcommands, `tandem help [COMMAND]` prints
help (no window, no Qt platform plugin: it aborted with exit 134 on a machine without one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("generate", "bench", "models", "serve", "rpc-server", "links")


def _tandem(*args: str) -> subprocess.CompletedProcess[str]:
    # No display at all: Qt's default platform (xcb) would abort if anything opened a window.
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "app.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )


def test_help_lists_the_subcommands_and_needs_no_display() -> None:
    for args in (("--help",), ("help",), ("-h",)):
        result = _tandem(*args)
        assert result.returncode == 0, (args, result.stderr[-500:])
        for command in COMMANDS:
            assert f"tandem {command}" in result.stdout, (args, command)
        assert "--model" in result.stdout and "Traceback" not in result.stderr


def test_help_on_a_command_prints_its_options() -> None:
    result = _tandem("help", "serve")
    assert result.returncode == 0 and "--port" in result.stdout, result.stderr[-500:]
