"""The README's gallery: the real window in one theme at one scale, mid-reply, Compare, Models.

    QT_SCALE_FACTOR=2 python -m tools.screenshot_set --theme dark --out resources

writes resources/screenshot-chat-dark-2x.png, -compare-, -code- and -models- (one scale per process:
Qt reads QT_SCALE_FACTOR once). It drives the window as the first tools/screenshot.py did (its texts, a
scratch TANDEM_HOME, the embedded Gemma 3 270M): a plain reply measures this machine's plain
speed, then an n-gram reply is grabbed half way with the speed panel live; then Compare runs
one prompt off and on, and the Models page is grabbed as it opens. Run it under a real X
display (Xvfb) or offscreen; `--pages` picks which of the four to write.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

# The texts of the first tools/screenshot.py (Gemma 3 270M is a base model: it may paraphrase).
EXAMPLE = "The quick brown fox jumps over the lazy dog. It was the best of times, it was the worst of times."
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
CODE_QUESTION = "Show me a Python function that adds two numbers."
CODE_ANSWER = "Here it is:\n\n```python\ndef add(a: int, b: int) -> int:\n    return a + b  # the sum\n```\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.screenshot_set")
    parser.add_argument("--theme", choices=("light", "dark"), default="light")
    parser.add_argument("--out", default="resources")
    parser.add_argument("--pages", default="chat,compare,code,models")
    args = parser.parse_args(argv)
    pages = set(args.pages.split(","))
    scale = os.environ.get("QT_SCALE_FACTOR", "1")
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    def path(page: str) -> Path:
        return out_dir / f"screenshot-{page}-{args.theme}-{scale}x.png"

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from app.library.default_model import ensure_default_model

    model = ensure_default_model()
    os.environ["TANDEM_HOME"] = tempfile.mkdtemp(prefix="tandem-screenshots-")

    from ui.pyside_refcount_fix import immortalize_singletons

    immortalize_singletons()
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.gui import wait_until as wait_for
    from app.host.controller import ReplyProgress
    from app.settings import load_settings, save_settings
    from ui.main_window import MainWindow

    app = QApplication.instance() or QApplication(["tandem"])
    app.setApplicationName("Tandem")
    save_settings(load_settings().replace(theme=args.theme, has_seen_welcome=True, temperature=0.0))
    window = MainWindow(model=str(model), draft="none")
    window.resize(1280, 820)
    window.show()

    wait_until = functools.partial(wait_for, timeout_s=TIMEOUT_S, prog="screenshot_set")

    def settle() -> None:
        """Let layouts, the highlighter's slices and paints run (a third of a second of the loop)."""
        loop = QEventLoop()
        QTimer.singleShot(300, loop.quit)
        loop.exec()

    def save(page: str) -> None:
        image = window.grab().toImage()
        if not image.save(str(path(page)), "PNG", 0):  # type: ignore[call-overload]  # (str works)
            raise SystemExit(f"screenshot_set: could not write {path(page)}")
        print(f"screenshot_set: wrote {path(page)} ({path(page).stat().st_size // 1024} KB)")

    def wait_reply() -> None:
        wait_until(lambda: not window.controller.is_busy and window.live is None, "the reply")

    wait_until(lambda: window.controller.info is not None or window.chat.notice.isVisible(), "the model")
    if window.controller.info is None:
        raise SystemExit(f"screenshot_set: the model did not load: {window.chat.notice.text()}")

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

    if "chat" in pages:
        grabbed: list[bool] = []

        def grab() -> None:
            if not grabbed:
                grabbed.append(window.live is not None)
                save("chat")

        def on_progress(_progress: ReplyProgress) -> None:
            live = window.live
            if (
                not grabbed
                and live is not None
                and len(live.text) >= GRAB_AT_FRACTION * len(SPECULATIVE_PARAGRAPH)
            ):
                QTimer.singleShot(0, grab)

        window.controller.reply_progressed.connect(on_progress)
        window.send(ASK + SPECULATIVE_PARAGRAPH)
        wait_reply()
        window.controller.reply_progressed.disconnect(on_progress)
        if not grabbed:
            raise SystemExit("screenshot_set: the reply ended before it could be grabbed")

    if "compare" in pages:
        window.open_compare()
        window.compare.prompt.setPlainText(ASK + SPECULATIVE_PARAGRAPH)
        window.on_compare_compare_requested(window.compare.prompt.toPlainText())
        wait_until(lambda: len(window.compare.final_stats) == 2, "Compare")
        wait_until(lambda: not window.controller.is_busy, "Compare to end")
        settle()
        save("compare")

    if "code" in pages:  # a stored exchange with a code block: highlighting and its Copy button
        code = window.store.create_conversation("A function", "")
        window.store.add_message(code.id, "user", CODE_QUESTION)
        answer = window.store.add_message(code.id, "assistant", CODE_ANSWER)
        window.store.update_message(answer.id, CODE_ANSWER, draft_spans=((0, 8), (46, 70)))
        window.tabs.setCurrentIndex(0)
        window.show_conversation(code.id)
        settle()
        save("code")

    if "models" in pages:
        window.tabs.setCurrentWidget(window.models_page)
        settle()
        save("models")

    window.shutdown()
    shutil.rmtree(os.environ["TANDEM_HOME"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
