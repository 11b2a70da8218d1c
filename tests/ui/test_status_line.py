"""The status bar's state line after a reply ends however it ends (found walking the real window:
an engine that died mid-reply left "Writing…" or "Reading the conversation…" there for good)."""

from __future__ import annotations

import os
import signal


def test_an_engine_dying_mid_reply_leaves_no_writing_line(qtbot, open_window, slow_target) -> None:
    window = open_window(slow_target, max_tokens=3000)
    window.send("a long answer please")
    qtbot.waitUntil(lambda: window.live is not None and len(window.live.text) > 20, timeout=60_000)
    qtbot.waitUntil(lambda: window.stats_label.text() == "Writing…", timeout=10_000)
    os.kill(window.controller.worker_pid, signal.SIGKILL)  # what the OOM killer or a native crash does
    qtbot.waitUntil(lambda: window.live is None, timeout=30_000)
    qtbot.wait(200)  # the controller's last drain

    assert "killed" in window.chat.notice.text()
    assert window.stats_label.text() == "Ready", window.stats_label.text()
