"""`make screenshot`: the real window on first start, on the embedded default model.

    python -m tools.screenshot resources/screenshot.png

Runs the real app (on the display if there is one, as under `xvfb-run -a`; offscreen where
there is none, or where QT_QPA_PLATFORM=offscreen says so, as `make screenshot` does) in a
scratch TANDEM_HOME, so the user's conversations and settings are neither shown nor touched;
only the default model is taken from the usual models folder (assembled there on first use).
The scratch home is a fresh one, so the welcome panel shows as on a first start. Its settings are
the defaults except greedy sampling (temperature 0, as Settings' Greedy box sets it), so the shot
repeats (up to near-ties that batched verification can flip), and n-gram speculation, so the
draft tint shows where the lookup guessed right. One conversation of three plain requests (a
question, a few sentences, a description) is answered by the real model, each reply ending by
itself; the window is grabbed when the last one has ended.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REQUESTS = (
    "What is the capital of France?",
    "Write two sentences about mountains.",
    "Describe a cat in one sentence.",
)
WINDOW_SIZE = (1400, 1180)
TIMEOUT_S = 600


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "resources/screenshot.png").resolve()
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # no display: draw off screen
    from app.library.default_model import ensure_default_model

    model = ensure_default_model()  # in the usual models folder, before TANDEM_HOME moves
    os.environ["TANDEM_HOME"] = tempfile.mkdtemp(prefix="tandem-screenshot-")
    try:
        return _shoot(out, model)
    finally:
        shutil.rmtree(os.environ["TANDEM_HOME"], ignore_errors=True)


def _shoot(out: Path, model: Path) -> int:
    from app.settings import Settings, Theme, save_settings
    from engine.config import NGRAM_LOOKUP

    # A first start (the welcome panel shows), greedy, n-gram lookup.
    save_settings(Settings(temperature=0.0, draft=NGRAM_LOOKUP, theme=Theme.LIGHT))

    from ui.qt.pyside_refcount_fix import immortalize_singletons

    immortalize_singletons()
    from PySide6.QtWidgets import QApplication

    from tools.qt_wait import wait_until as wait_for
    from ui.main_window import MainWindow
    from ui.qt.gc_on_gui_thread import GuiThreadCollector

    app = QApplication.instance() or QApplication(["tandem"])
    app.setApplicationName("Tandem")
    GuiThreadCollector(app)  # as the window's app: no worker thread frees a Qt object
    window = MainWindow(model=str(model))
    window.resize(*WINDOW_SIZE)
    window.show()

    wait_until = functools.partial(wait_for, timeout_s=TIMEOUT_S, prog="screenshot")

    try:
        wait_until(lambda: window.controller.info is not None or window.chat.notice.isVisible(), "the model")
        if window.controller.info is None:
            raise SystemExit(f"screenshot: the model did not load: {window.chat.notice.text()}")
        if window.welcome is None or not window.welcome.isVisible():
            raise SystemExit("screenshot: the welcome panel is not showing on a first start")

        for text in REQUESTS:
            window.presenter.send(text)
            wait_until(
                lambda: not window.controller.is_busy and window.presenter.replies.live is None,
                f"the reply to {text!r}",
            )

        assert window.presenter.conversation_id is not None
        replies = [
            m
            for m in window.presenter.store.messages(window.presenter.conversation_id)
            if m.role == "assistant"
        ]
        for text, reply in zip(REQUESTS, replies, strict=True):
            print(f"screenshot: {text!r} -> {reply.content!r} ({reply.status})")
        # Let the window lay out the last reply and the status bar before the grab.
        wait_until(_after(0.3), "the last repaint")
        out.parent.mkdir(parents=True, exist_ok=True)
        if not window.grab().save(str(out)):
            raise SystemExit(f"screenshot: could not write {out}")
    finally:
        window.shutdown()
    print(f"screenshot: wrote {out} ({QApplication.platformName()})")
    return 0


def _after(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
