"""The desktop app's entry: `tandem [--model PATH|default] [--draft PATH|ngram|none] [tandem://LINK]`
opens the window (a tandem://open_from_hf link opens the pair doctor's check of that file).

Model and draft are read by app/library/model_spec.py in the engine's worker, as the command line reads them."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from collections.abc import Callable

from app import paths


def parse_args(argv: list[str]) -> argparse.Namespace:
    from app.cli.cli_base import Parser

    parser = Parser(prog="tandem", description="Chat with a local GGUF model, sped up by speculation.")
    parser.add_argument(
        "--model",
        metavar="PATH|default",
        help="the target GGUF model, `default` (the embedded Gemma 3 270M) or `smollm2` "
        "(SmolLM2-135M-Instruct) (default: the saved choice)",
    )
    parser.add_argument(
        "--draft", metavar="PATH|ngram|none", help="a draft GGUF model, n-gram lookup, or none"
    )
    parser.add_argument(
        "link",
        nargs="?",
        metavar="tandem://open_from_hf?model=OWNER/REPO&file=FILE",
        help="check a model file on the hub before downloading it (the hub's links open this)",
    )
    # Qt's own options (-platform, -style...) pass through to QApplication.
    args, _unknown = parser.parse_known_args(argv)
    if args.link is not None and not args.link.startswith("tandem://"):
        _unknown.append(args.link)  # not ours: one of Qt's option values
        args.link = None
    return args


def wait_until(
    condition: Callable[[], bool], what: str, *, timeout_s: float, prog: str, poll_ms: int = 20
) -> None:
    """Run the Qt event loop until condition() holds; past timeout_s, end the program with a line
    naming `what`. A blocking event loop polled by a timer, for the window's tools (screenshots,
    bench_gui): a processEvents() spin would take a core from llama.cpp, whose threads then wait
    on each other (1 tok/s instead of 60 here)."""
    from PySide6.QtCore import QEventLoop, QTimer

    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    poll = QTimer()
    poll.setInterval(poll_ms)
    poll.timeout.connect(lambda: loop.quit() if condition() or time.monotonic() > deadline else None)
    poll.start()
    if not condition():
        loop.exec()
    poll.stop()
    if not condition():
        raise SystemExit(f"{prog}: timed out waiting for {what}")


def freeze_startup_objects() -> None:
    """What starting made (modules, widgets and their Python wrappers) lives as long as the app:
    frozen out of the garbage collector's way, a full collection while a reply streams looks only
    at what the session made since (over all of it, one stalled the window for tens of ms)."""
    import gc

    gc.collect()
    gc.freeze()


def run_gui(argv: list[str]) -> int:
    """Open the main window; returns the application's exit code."""
    args = parse_args(argv)
    logging.basicConfig(
        filename=paths.logs_dir() / "tandem.log",
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    from ui.pyside_refcount_fix import immortalize_singletons

    immortalize_singletons()  # before any Qt call: see the module (PySide6 6.12 on Python 3.11)
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from ui.main_window import MainWindow

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication([sys.argv[0] or "tandem", *argv])
    app.setApplicationName("Tandem")
    # No applicationDisplayName: Qt would append it to titles that already start with "Tandem".
    window = MainWindow(model=args.model, draft=args.draft)
    window.show()
    if args.link:
        window.open_link(args.link)
    freeze_startup_objects()
    # Ctrl+C or a SIGTERM closes the window properly (replies marked, engine stopped). Python
    # runs signal handlers only between bytecodes, so a timer wakes it while Qt waits.
    signal.signal(signal.SIGINT, lambda *_: window.close())
    signal.signal(signal.SIGTERM, lambda *_: window.close())
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(250)
    code = app.exec()
    window.shutdown()
    return int(code)


if __name__ == "__main__":
    raise SystemExit(run_gui(sys.argv[1:]))
