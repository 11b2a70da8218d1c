"""The window at its smallest: what the header and the welcome show stays in sight and whole
(found walking the real window at 764 x 425)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QRect
from PySide6.QtWidgets import QLabel, QScrollArea, QToolButton


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


def test_the_welcome_scrolls_at_a_small_height_its_text_whole(qtbot, open_window, tiny_target) -> None:
    # Bug: at 764 x 425 the welcome took most of the height and its text was cut mid-line.
    window = open_window(tiny_target, wait_loaded=False)
    panel = window.welcome
    assert panel is not None and panel.isVisible()
    window.resize(764, 425)
    qtbot.waitUntil(lambda: window.height() == 425)
    labels = [w for w in panel.findChildren(QLabel) if w.isVisible() and w.text()]
    assert panel.about_label in labels and panel.recommendation_label in labels
    for shown in labels:
        assert shown.height() >= shown.heightForWidth(shown.width()), shown.objectName()  # not cut
    scroll = panel.findChild(QScrollArea)
    assert scroll is not None
    for shown in labels:
        scroll.ensureWidgetVisible(shown, 0, 0)
        where = QRect(shown.mapTo(scroll.viewport(), QPoint(0, 0)), shown.size())
        assert scroll.viewport().rect().contains(where), shown.objectName()  # scrolled to, whole
    assert window.chat.input.isVisible() and window.chat.input.height() >= 40  # the chat keeps room
    # As tall as its text where there is room: one line when compact, no empty space under it.
    window.resize(1280, 800)
    qtbot.waitUntil(lambda: panel.height() >= panel.heightForWidth(panel.width()))
    whole = panel.height()
    panel.set_compact(True)
    qtbot.waitUntil(lambda: panel.height() < whole * 0.6)
