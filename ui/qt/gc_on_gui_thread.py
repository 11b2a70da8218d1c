"""Python's garbage collector runs on the GUI thread only.

CPython collects in whichever thread happens to allocate when a generation fills up. Where that
collection frees a cycle holding a Qt object (a widget and a lambda connected to it), the object
is deleted on that thread, and Qt may only delete widgets on the GUI thread. Seen: a
segmentation fault in an HTTP handler thread, "Garbage-collecting", while the pair doctor read a
header on another thread and the Models page waited on the GUI thread. So automatic collection is
off, and a timer on the GUI thread collects each generation when Python would have (calibre's
GarbageCollector does the same). The engine runs in its own process and is not affected.
"""

from __future__ import annotations

import gc
from functools import partial

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500  # how often the GUI thread looks at the generations' counts


def collect_due(threshold: tuple[int, int, int]) -> None:
    """Collect the generations Python would have collected by now (the youngest first)."""
    count0, count1, count2 = gc.get_count()
    if count0 > threshold[0]:
        gc.collect(0)
        if count1 > threshold[1]:
            gc.collect(1)
            if count2 > threshold[2]:
                gc.collect(2)


class GuiThreadCollector(QObject):
    """While it lives (its parent: the window or the application), collections happen here."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._was_enabled = gc.isenabled()
        self.threshold: tuple[int, int, int] = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(partial(collect_due, self.threshold))  # (no cycle through self)
        self.timer.start(INTERVAL_MS)

    def close(self) -> None:
        """Stop, and leave automatic collection as it was found."""
        self.timer.stop()
        if self._was_enabled:
            gc.enable()
