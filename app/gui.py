"""The desktop app's entry: `tandem [--model PATH|default] [--draft PATH|ngram|none] [tandem://LINK]`
opens the window (a tandem://open_from_hf link opens the pair doctor's check of that file).

Model and draft are read by app/library/model_spec.py in the engine's worker, as the command line reads them."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app import paths

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

log = logging.getLogger(__name__)


def make_parser() -> argparse.ArgumentParser:
    """The window's options; its help ends with the subcommands (app.cli.cli.commands_said)."""
    from app.cli.cli import commands_said
    from app.cli.cli_base import Parser

    parser = Parser(
        prog="tandem",
        description="Chat with a local GGUF model, sped up by speculation.",
        epilog=commands_said(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = make_parser()
    # Qt's own options (-platform, -style...) pass through to QApplication.
    args, _unknown = parser.parse_known_args(argv)
    if args.link is not None and not args.link.startswith("tandem://"):
        args.link = None  # not ours: one of Qt's option values
    return args


def freeze_startup_objects() -> None:
    """What starting made (modules, widgets and their Python wrappers) lives as long as the app:
    frozen out of the garbage collector's way, a full collection while a reply streams looks only
    at what the session made since (over all of it, one stalled the window for tens of ms)."""
    import gc

    gc.collect()
    gc.freeze()


def instance_address(home: Path) -> str:
    """Where the running window listens for a second start (one per data folder): an abstract
    socket on Linux, a named pipe on Windows, a socket in the temporary folder elsewhere."""
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:16]
    if sys.platform.startswith("linux"):
        return f"\0tandem-{digest}"
    if sys.platform == "win32":
        return rf"\\.\pipe\tandem-{digest}"
    # Elsewhere a socket file, in a folder only this user can open (0700).
    folder = Path(tempfile.gettempdir()) / f"tandem-{os.getuid() if hasattr(os, 'getuid') else 0}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return str(folder / f"tandem-{digest}.sock")


def hold_instance_lock(home: Path) -> Any:
    """The data folder's instance lock (a FileLock; the OS releases it if the app dies), or None
    when another Tandem holds it: a second window would share the conversations, mark the first's
    live reply interrupted and load a second engine."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(home / "tandem.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


def ask_running_window(home: Path, link: str | None) -> bool:
    """Ask the window already running for this data folder to come to the front (and open a
    tandem link); False when it does not answer, or when what answers is another user's process
    (the abstract socket's name is predictable and has no file permissions: another user could
    take it first and receive the links). Bytes only: nothing is unpickled."""
    from multiprocessing.connection import Client

    try:
        with Client(instance_address(home)) as conn:
            if (uid := other_user(conn)) is not None:
                log.warning("the window's address is held by user id %d's process: nothing sent", uid)
                return False
            conn.send_bytes((f"open {link}" if link else "raise").encode())
    except OSError:
        return False
    return True


def other_user(conn: Any) -> int | None:
    """The user id of the process at the other end of a local socket where it is not this user
    (Linux: SO_PEERCRED); None where it is this user, or where the OS does not say."""
    import socket
    import struct

    if not hasattr(socket, "SO_PEERCRED") or not hasattr(os, "getuid"):
        return None
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    finally:
        sock.close()
    _pid, uid, _gid = struct.unpack("3i", raw)
    return None if uid == os.getuid() else int(uid)


MAX_SECOND_START_BYTES = 4096


def read_second_start(conn: Any) -> str | None:
    """What a second start asks ("raise", or "open tandem://..."), or None where it is refused: a
    process of another user (the abstract socket has no file permissions: the peer's user id is
    checked), nothing sent within 2 s, or anything else."""
    if (uid := other_user(conn)) is not None:
        log.warning("refused a second start from user id %d (this window is user id %d's)", uid, os.getuid())
        return None
    if not conn.poll(2.0):
        return None
    line = str(conn.recv_bytes(MAX_SECOND_START_BYTES).decode("utf-8", "replace")).strip()
    if line == "raise" or (line.startswith("open tandem://") and line.isprintable()):
        return line
    log.warning("refused a second start's request (%d characters)", len(line))
    return None


def listen_for_second_starts(
    window: QWidget, open_link: Callable[[str], None], home: Path
) -> Callable[[], None]:
    """The first window's end of ask_running_window: a thread accepts, the window comes to the
    front on its own thread (and `open_link` opens the link). Returns how to stop listening."""
    from multiprocessing.connection import Listener

    from PySide6.QtCore import QObject, Qt, Signal

    class SecondStarts(QObject):
        asked = Signal(str)

    relay = SecondStarts(window)

    def on_asked(line: str) -> None:
        log.info("a second start asked: %s", line)
        bring_to_front(window)
        if line.startswith("open "):
            open_link(line.removeprefix("open "))

    relay.asked.connect(on_asked, Qt.ConnectionType.QueuedConnection)
    address = instance_address(home)
    if not address.startswith(("\0", "\\")):
        with contextlib.suppress(OSError):
            os.unlink(address)  # left by a crash (the instance lock is ours)
    try:
        listener = Listener(address)
    except OSError as e:
        log.warning("a second start cannot reach this window: %s", e)
        return lambda: None

    def serve() -> None:
        while True:
            try:
                with listener.accept() as conn:
                    line = read_second_start(conn)
                    if line is not None:
                        relay.asked.emit(line)
            except (OSError, EOFError, AttributeError):
                if getattr(listener, "_listener", None) is None:
                    return  # closed
                continue

    threading.Thread(target=serve, name="tandem-second-starts", daemon=True).start()
    return listener.close


def bring_to_front(window: QWidget) -> None:
    window.showNormal()
    window.raise_()
    window.activateWindow()


def desktop_link(event: Any) -> str | None:
    """The tandem:// link of a QFileOpenEvent: how macOS hands Tandem.app a link (an Apple event,
    not an argument), at launch and while it runs (app/library/links.py). None for any other event."""
    from PySide6.QtCore import QEvent

    from app.library.links import SCHEME

    if event.type() != QEvent.Type.FileOpen:
        return None
    url = event.url().toString() or event.file()
    return url if url.startswith(f"{SCHEME}://") else None


def make_application(argv: list[str]) -> Any:
    """The QApplication, one that takes links from the desktop's open events (macOS): each goes
    to `app.open_link` once the window sets it, those that come before are kept until then."""
    from PySide6.QtWidgets import QApplication

    class TandemApplication(QApplication):
        def __init__(self, args: list[str]) -> None:
            super().__init__(args)
            self.open_link: Callable[[str], None] | None = None
            self.pending_links: list[str] = []

        def event(self, e: Any) -> bool:  # only the application's own events: a few, not every widget's
            link = desktop_link(e)
            if link is None:
                return bool(super().event(e))
            if self.open_link is None:
                self.pending_links.append(link)
            else:
                self.open_link(link)
            return True

    return TandemApplication(argv)


def run_gui(argv: list[str]) -> int:
    """Open the main window; returns the application's exit code."""
    args = parse_args(argv)
    from app.library.logs import setup_file_logging

    # 0600, rotated, rate-limited, no request URLs from HTTP libraries (app/library/logs.py).
    setup_file_logging(paths.logs_dir() / "tandem.log", "%(asctime)s %(name)s %(levelname)s %(message)s")
    from ui.qt.pyside_refcount_fix import immortalize_singletons

    immortalize_singletons()  # before any Qt call: see the module (PySide6 6.12 on Python 3.11)
    from PySide6.QtCore import QTimer

    from ui.main_window import MainWindow

    app = make_application([sys.argv[0] or "tandem", *argv])
    app.setApplicationName("Tandem")
    # No applicationDisplayName: Qt would append it to titles that already start with "Tandem".
    home = paths.home()
    instance_lock = hold_instance_lock(home)
    if instance_lock is None:
        raised = ask_running_window(home, args.link)
        print(
            f"tandem: Tandem is already running with the data folder {home}; "
            + ("its window was brought to the front." if raised else "close it before starting another."),
            file=sys.stderr,
        )
        return 0 if raised else 1
    window = MainWindow(model=args.model, draft=args.draft)
    window.show()
    stop_listening = listen_for_second_starts(window, window.open_link, home)
    if args.link:
        window.open_link(args.link)

    def open_sent_link(link: str) -> None:  # a link the desktop sent as an open event (macOS)
        bring_to_front(window)
        window.open_link(link)

    app.open_link = open_sent_link
    for link in app.pending_links:
        open_sent_link(link)
    app.pending_links.clear()
    from app.library.links import register_at_start

    try:  # Windows, in a bundle: this tandem.exe opens tandem:// links where none does
        if register_at_start(home):
            log.info("registered tandem:// links for this user: %s", sys.executable)
    except Exception as e:  # the registry refused: links will not open Tandem, nothing else changes
        log.warning("cannot register tandem:// links: %s", e)
    freeze_startup_objects()
    from ui.qt.gc_on_gui_thread import GuiThreadCollector

    collector = GuiThreadCollector(app)  # no worker thread may free a Qt object
    # Ctrl+C or a SIGTERM closes the window properly (replies marked, engine stopped). Python
    # runs signal handlers only between bytecodes, so a timer wakes it while Qt waits.
    signal.signal(signal.SIGINT, lambda *_: window.close())
    signal.signal(signal.SIGTERM, lambda *_: window.close())
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(250)
    code = app.exec()
    window.shutdown()
    collector.close()
    stop_listening()
    instance_lock.release()
    return int(code)


if __name__ == "__main__":
    raise SystemExit(run_gui(sys.argv[1:]))
