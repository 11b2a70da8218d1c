"""The window at its smallest: what the header and the welcome show stays in sight and whole
(found walking the real window at 764 x 425)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QToolButton


def _switch(window) -> QToolButton:  # type: ignore[no-untyped-def]
    """The API switch's button, wherever the window puts it."""
    buttons = [o for o in window.serve_toggle.action.associatedObjects() if isinstance(o, QToolButton)]
    assert len(buttons) == 1
    return buttons[0]


def test_the_api_switch_stays_in_sight_at_every_width(qtbot, open_window, tiny_target) -> None:
    # Bug: below about 830 px the toolbar moved "API: off" into its overflow, an unmarked sliver
    # at the right edge: the switch was gone.
    window = open_window(tiny_target, wait_loaded=False)
    least = window.minimumSizeHint().width()
    for width in (least, max(least, 764), 800, 1280):
        window.resize(width, 600)
        qtbot.waitUntil(lambda w=width: window.width() == w)  # type: ignore[misc]
        switch = _switch(window)
        qtbot.waitUntil(switch.isVisible)
        where = QRect(switch.mapTo(window, QPoint(0, 0)), switch.size())
        assert window.rect().contains(where), (width, where)
        assert where.right() >= width - 30  # at the header's right, as before
        assert switch.text() == "API: off"
