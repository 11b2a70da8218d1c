"""Garbage is collected on the GUI thread only: a collection in a worker thread that frees a Qt
object deletes it there, and crashed the test session (ui/qt/gc_on_gui_thread.py)."""

from __future__ import annotations

import gc
import threading
from typing import Any

from ui.qt.gc_on_gui_thread import GuiThreadCollector


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_a_worker_threads_garbage_waits_for_the_gui_thread(qtbot) -> None:
    gc.enable()  # as an application starts (the tests' conftest keeps it off)
    collector = GuiThreadCollector()
    where: list[int] = []

    def note(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            where.append(threading.get_ident())

    gc.callbacks.append(note)
    try:
        assert not gc.isenabled()

        def make_garbage() -> None:
            for _ in range(20 * collector.threshold[0]):
                Node()

        worker = threading.Thread(target=make_garbage)
        worker.start()
        worker.join()
        assert where == []  # the worker allocated past every threshold and collected nothing
        qtbot.waitUntil(lambda: bool(where), timeout=5000)  # the timer, on this thread, did
        assert set(where) == {threading.get_ident()}
    finally:
        gc.callbacks.remove(note)
        collector.close()
        gc.disable()
