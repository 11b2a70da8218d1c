"""Accessible: every control has a name a screen reader can say, the tab order follows the
layout, and "drafted" is said in words, not only by the tint."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAccessible
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSpinBox,
    QComboBox,
    QHeaderView,
    QLineEdit,
    QPlainTextEdit,
    QSlider,
    QTabBar,
    QTextEdit,
    QWidget,
)

from engine.events import DraftSpan
from ui.presenters.reply_presenter import MessageRow

INTERACTIVE = (
    QAbstractButton,
    QLineEdit,
    QPlainTextEdit,
    QTextEdit,
    QComboBox,
    QAbstractSpinBox,
    QAbstractItemView,
    QTabBar,
    QSlider,
)


def _is_qt_part(widget: QWidget) -> bool:
    """Parts Qt builds inside its own controls (a spin box's line edit, a table's header, a
    combo box's popup list, a line edit's clear button): the control itself carries the name."""
    parent = widget.parentWidget()
    return (
        widget.objectName().startswith("qt_")
        or isinstance(widget, QHeaderView)
        or isinstance(parent, QAbstractSpinBox | QLineEdit | QComboBox)
        or (parent is not None and parent.inherits("QComboBoxPrivateContainer"))
        or (parent is not None and parent.objectName().startswith("qt_"))
    )


def _unnamed(root: QWidget) -> list[str]:
    missing = []
    for widget in [root, *root.findChildren(QWidget)]:
        if not isinstance(widget, INTERACTIVE) or _is_qt_part(widget):
            continue
        interface = QAccessible.queryAccessibleInterface(widget)
        name = interface.text(QAccessible.Text.Name) if interface is not None else ""
        if not name.strip():
            missing.append(
                f"{type(widget).__name__} {widget.objectName()!r} in {type(widget.parentWidget()).__name__}"
            )
    return missing


def test_every_control_has_an_accessible_name(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("Hello")  # messages with their Edit/Copy buttons
    wait_reply(window)
    window.chat.add_row(MessageRow(99, "assistant", "Code:\n\n```python\nprint(1)\n```\n"))
    assert len(window.chat.message_widgets()) == 3
    assert _unnamed(window) == []  # the chat, Compare, the Models page, the toolbar, the menus

    from ui.settings.settings_dialog import SettingsDialog

    dialog = SettingsDialog(window.presenter.settings, False, window)
    assert _unnamed(dialog) == []
    window.show_shortcuts()
    qtbot.waitUntil(lambda: window.findChild(QWidget, "shortcutsDialog") is not None, timeout=5000)
    assert _unnamed(window.findChild(QWidget, "shortcutsDialog")) == []
    # The names are the ones a reader would expect, not a combo box's current item.
    assert window.header.speed_combo.accessibleName() == "Speed-up"
    assert window.chat.input.accessibleName() == "Message"


def test_unnamed_controls_are_found(qtbot) -> None:
    """The walk above can fail: a bare line edit and an icon-only button have no name."""
    from PySide6.QtWidgets import QToolButton, QVBoxLayout

    root = QWidget()
    qtbot.addWidget(root)
    layout = QVBoxLayout(root)
    layout.addWidget(QLineEdit())
    layout.addWidget(QToolButton())
    assert len(_unnamed(root)) == 2


def _focus_order(window) -> list[QWidget]:  # type: ignore[no-untyped-def]
    """One round of the window's tab chain (visible, enabled, tab-focusable widgets)."""
    start = window.tabs.tabBar()
    order, widget = [], start
    for _ in range(1000):
        widget = widget.nextInFocusChain()
        if widget is start:
            break
        if widget.isVisible() and widget.isEnabled() and widget.focusPolicy() & Qt.FocusPolicy.TabFocus:
            order.append(widget)
    return order


def test_tab_order_follows_the_layout(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    if window.welcome is not None:
        window.welcome.hide()
    order = _focus_order(window)
    chat, conversations = window.chat, window.conversations
    expected = [
        conversations.new_button,  # New chat at the top of the list
        conversations.search,
        conversations.list,
        chat.system_toggle,  # the system prompt, folded until opened
        chat.input,
        chat.send_button,
        window.header.model_combo,
        window.header.speed_combo,
        window.header.tint_check,
    ]
    positions = [order.index(w) for w in expected]
    assert positions == sorted(positions), [type(w).__name__ for w in order]
    # Tab leaves the message box (it does not type a tab character).
    chat.input.setFocus()
    qtbot.waitUntil(chat.input.hasFocus, timeout=5000)
    qtbot.keyClick(chat.input, Qt.Key.Key_Tab)
    assert chat.input.toPlainText() == "" and not chat.input.hasFocus()


def test_drafted_text_is_said_in_words(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, draft="ngram", max_tokens=64, temperature=0.0)
    window.presenter.send("abcabcabcabcabcabcabcabcabcabcabcabcabcabc")
    wait_reply(window)
    reply = window.chat.message_widgets()[-1]
    qtbot.waitUntil(lambda: not reply.body._is_settling, timeout=5000)
    text, spans = reply.text(), reply._spans
    drafted = sum(s.end - s.start for s in spans)
    description = reply.body.accessibleDescription()
    if drafted:
        assert description.startswith(f"{drafted / len(text):.0%} of this reply is highlighted")
        assert "the model's own words" in description and "confirmed" in description
    else:
        assert description == "Nothing in this reply is highlighted."
    assert description in reply.body.toolTip()  # the tooltip says it too
    # A stored reply with drafted text says so as well.
    widget = window.chat.add_row(MessageRow(98, "assistant", "Hello there", (DraftSpan(0, 5),)))
    assert widget.body.accessibleDescription().startswith("45% of this reply is highlighted")
    user = next(w for w in window.chat.message_widgets() if w.role == "user")
    assert user.body.accessibleDescription() == ""
