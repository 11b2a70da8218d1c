"""`make screenshot`: the real window, on the embedded default model, in the middle of a reply.

    python -m app.screenshot resources/screenshot.png

Runs the real app offscreen (QT_QPA_PLATFORM=offscreen) in a scratch TANDEM_HOME, so the user's
conversations and settings are neither shown nor touched; only the default model is taken from
the usual models folder (assembled there on first use). Gemma 3 270M is a base model, so the
conversation opens with one example of repeating text; then one paragraph is repeated with
speculation off (which measures this machine's plain speed, the speedup's baseline) and one
with n-gram lookup, grabbed when about half of it has streamed: drafted tokens tinted, the live
indicator showing tokens/s, acceptance and speedup.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

EXAMPLE = "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times."
# Gemma 3 270M is a base model and copies some paragraphs faithfully and others not at all; these
# two are copied word for word (greedy), the second building on the first.
PLAIN_PARAGRAPH = (
    "Speculative decoding lets a fast guesser propose several tokens at once, and the large model "
    "checks them all in a single pass."
)
SPECULATIVE_PARAGRAPH = (
    "Speculative decoding lets a fast guesser propose several tokens at once, and the large model "
    "checks them all in a single pass. When the guesses are right, the reply arrives several tokens "
    "per step instead of one; when they are wrong, nothing is lost but a little work. Repeating a "
    "paragraph is the easy case: every token of the answer is already in the prompt, so n-gram "
    "lookup drafts it for free and the model only has to agree."
)
ASK = "Please repeat this text exactly:\n\n"
SYSTEM_PROMPT = "The assistant repeats text exactly, word for word."
GRAB_AT_FRACTION = 0.5
TIMEOUT_S = 600


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "resources/screenshot.png").resolve()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.default_model import ensure_default_model

    model = ensure_default_model()  # in the usual models folder, before TANDEM_HOME moves
    os.environ["TANDEM_HOME"] = tempfile.mkdtemp(prefix="tandem-screenshot-")

    from ui.pyside_refcount_fix import immortalize_singletons

    immortalize_singletons()
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.controller import ReplyProgress
    from ui.main_window import MainWindow

    app = QApplication.instance() or QApplication(["tandem"])
    app.setApplicationName("Tandem")
    window = MainWindow(model=str(model), draft="none")
    window.resize(1280, 820)
    window.show()

    def wait_until(condition: Callable[[], bool], what: str) -> None:
        # A blocking event loop, polled by a timer: a processEvents() spin would take a core
        # from llama.cpp, whose threads then wait on each other (1 tok/s instead of 60 here).
        deadline = time.monotonic() + TIMEOUT_S
        loop = QEventLoop()
        poll = QTimer()
        poll.setInterval(20)
        poll.timeout.connect(lambda: loop.quit() if condition() or time.monotonic() > deadline else None)
        poll.start()
        if not condition():
            loop.exec()
        poll.stop()
        if not condition():
            raise SystemExit(f"screenshot: timed out waiting for {what}")

    def wait_reply() -> None:
        wait_until(lambda: not window.controller.is_busy and window.live is None, "the reply")

    wait_until(lambda: window.controller.info is not None or window.chat.notice.isVisible(), "the model")
    if window.controller.info is None:
        raise SystemExit(f"screenshot: the model did not load: {window.chat.notice.text()}")

    conversation = window.store.create_conversation("Repeat after me", SYSTEM_PROMPT)
    window.store.add_message(conversation.id, "user", ASK + EXAMPLE)
    window.store.add_message(conversation.id, "assistant", EXAMPLE)
    window.show_conversation(conversation.id)

    window.send(ASK + PLAIN_PARAGRAPH)  # speculation off: this machine's plain speed
    wait_reply()
    window.set_speculation("ngram")
    wait_until(
        lambda: window.controller.info is not None and window.controller.info.speculation == "ngram", "n-gram"
    )

    grabbed: list[bool] = []

    def grab() -> None:
        if grabbed:
            return
        grabbed.append(window.live is not None)  # True: still mid-reply when the picture was taken
        out.parent.mkdir(parents=True, exist_ok=True)
        if not window.grab().save(str(out)):
            raise SystemExit(f"screenshot: could not write {out}")

    def on_progress(progress: ReplyProgress) -> None:
        live = window.live
        if (
            not grabbed
            and live is not None
            and len(live.text) >= GRAB_AT_FRACTION * len(SPECULATIVE_PARAGRAPH)
        ):
            QTimer.singleShot(0, grab)  # after the window has shown this update

    window.controller.reply_progressed.connect(on_progress)
    window.send(ASK + SPECULATIVE_PARAGRAPH)
    wait_reply()
    window.shutdown()
    shutil.rmtree(os.environ["TANDEM_HOME"], ignore_errors=True)
    if not grabbed:
        raise SystemExit("screenshot: the reply ended before it could be grabbed")
    print(f"screenshot: wrote {out}" + ("" if grabbed[0] else " (the reply had just finished)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
