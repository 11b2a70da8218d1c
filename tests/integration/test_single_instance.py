"""A second start of the app with the same data folder opens no second window (issue 28, item 4):
it brings the first to the front and says so in a sentence. Two real app processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.serve_process import ROOT, tandem_env
from tests.waiting import wait_until


def _log(home: Path) -> str:
    path = home / "logs" / "tandem.log"
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def test_a_second_start_raises_the_first_window_and_ends(tmp_path: Path, tiny_target: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**tandem_env(home), "QT_QPA_PLATFORM": "offscreen"}
    command = [sys.executable, "-m", "app.main", "--model", str(tiny_target), "--draft", "none"]
    first = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (home / "tandem.db").exists() and first.poll() is None, 120, "the first window")
        wait_until(
            lambda: "engine" in _log(home) or (home / "logs" / "worker.log").exists(), 120, "its engine"
        )
        second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stderr
        assert second.stderr.strip().splitlines()[-1] == (
            f"tandem: Tandem is already running with the data folder {home}; its window was brought to the front."
        )
        assert "Traceback" not in second.stderr
        wait_until(lambda: "a second start asked: raise" in _log(home), 30, "the first window to be asked")
        assert first.poll() is None, "the first window stays"
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    # Once the first has ended, the next start is the window again (the lock went with it).
    assert not list(home.glob("tandem.db.damaged-*"))
