"""Keyboard shortcuts, pressed on the real window (a real worker process runs llama.cpp)."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QLabel

from app.store import Store


def _press(qtbot, window, sequence: QKeySequence) -> None:  # type: ignore[no-untyped-def]
    """Type a key sequence into whatever has the focus, as a user would."""
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window, timeout=5000)
    target = QApplication.focusWidget() or window
    combination = sequence[0]
    qtbot.keyClick(target, combination.key(), combination.keyboardModifiers())


def _standard(key: QKeySequence.StandardKey) -> QKeySequence:
    bindings = QKeySequence.keyBindings(key)
    assert bindings, key
    return bindings[0]


def _messages(window):  # type: ignore[no-untyped-def]
    store = Store()
    try:
        return store.messages(window.presenter.conversation_id, include_superseded=True)
    finally:
        store.close()


def test_new_search_focus_and_tabs(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("Hello")
    wait_reply(window)
    first = window.presenter.conversation_id
    _press(qtbot, window, _standard(QKeySequence.StandardKey.New))  # Ctrl+N (Cmd+N on macOS)
    assert window.presenter.conversation_id != first and window.chat.message_widgets() == []
    qtbot.waitUntil(lambda: window.chat.input.hasFocus(), timeout=5000)

    _press(qtbot, window, _standard(QKeySequence.StandardKey.Find))  # Ctrl+F: search
    qtbot.waitUntil(lambda: window.conversations.search.hasFocus(), timeout=5000)
    qtbot.keyClicks(window.conversations.search, "Hel")
    assert window.conversations.titles() == ["Hello"]
    window.conversations.search.clear()

    _press(qtbot, window, QKeySequence("Ctrl+2"))  # Compare
    assert window.tabs.currentWidget() is window.compare
    qtbot.waitUntil(lambda: window.compare.prompt.hasFocus(), timeout=5000)
    _press(qtbot, window, QKeySequence("Ctrl+3"))
    assert window.tabs.currentWidget() is window.models_page
    _press(qtbot, window, QKeySequence("Ctrl+L"))  # back to the message box
    assert window.tabs.currentIndex() == 0
    qtbot.waitUntil(lambda: window.chat.input.hasFocus(), timeout=5000)


def test_stop_and_regenerate_keys(qtbot, open_window, wait_reply, slow_target) -> None:
    window = open_window(slow_target, max_tokens=3000)
    window.presenter.send("Write a very long essay")
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None and len(window.presenter.replies.live.reply.text) > 10
        ),
        timeout=60_000,
    )
    _press(qtbot, window, QKeySequence("Ctrl+."))
    wait_reply(window)
    reply = _messages(window)[-1]
    assert reply.status == "cancelled" and reply.stats["n_generated"] < 3000

    # Esc in the message box stops a reply too.
    window.presenter.settings = dataclasses.replace(window.presenter.settings, max_tokens=3000)
    window.presenter.regenerate()
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None and len(window.presenter.replies.live.reply.text) > 10
        ),
        timeout=60_000,
    )
    window.chat.input.setFocus()
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Escape)
    wait_reply(window)
    assert _messages(window)[-1].status == "cancelled"

    # Regenerate (F5 / Ctrl+R): the last reply is written again, the old one kept as superseded.
    window.presenter.settings = dataclasses.replace(window.presenter.settings, max_tokens=8)
    before = _messages(window)[-1].id
    _press(qtbot, window, QKeySequence("Ctrl+R"))
    qtbot.waitUntil(
        lambda: window.presenter.replies.live is not None or _messages(window)[-1].id != before,
        timeout=10_000,
    )
    wait_reply(window)
    everything = _messages(window)
    assert everything[-1].id != before and everything[-1].status == "complete"
    assert [m.status for m in everything if m.id == before] == ["superseded"]


def test_switch_speculation_key_cycles_and_applies(qtbot, open_window, tiny_target, tiny_draft) -> None:
    window = open_window(tiny_target, draft="ngram", draft_model_path=str(tiny_draft))
    assert window.header.speed_combo.currentData() == "ngram"
    _press(qtbot, window, QKeySequence("Ctrl+D"))
    assert window.header.speed_combo.currentData() == "draft"
    assert window.presenter.settings.draft.text == str(tiny_draft)
    qtbot.waitUntil(lambda: window.controller.info.speculation == "draft", timeout=60_000)
    _press(qtbot, window, QKeySequence("Ctrl+D"))
    assert (
        window.header.speed_combo.currentData() == "none" and window.presenter.settings.draft.text == "none"
    )
    qtbot.waitUntil(lambda: window.controller.info.speculation == "none", timeout=60_000)
    _press(qtbot, window, QKeySequence("Ctrl+D"))
    assert window.header.speed_combo.currentData() == "ngram"


def test_help_lists_every_shortcut(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    _press(qtbot, window, _standard(QKeySequence.StandardKey.HelpContents))  # F1
    qtbot.waitUntil(lambda: window.findChild(QLabel, "shortcutsTable") is not None, timeout=5000)
    table = window.findChild(QLabel, "shortcutsTable").text()
    for action in window.shortcut_actions.values():
        assert action.shortcuts(), action.objectName()
        native = action.shortcuts()[0].toString(QKeySequence.SequenceFormat.NativeText)
        assert native in table and action.toolTip() in table
    menus = [a.text() for a in window.menuBar().actions()]
    assert menus.index("&Conversation") < menus.index("&Help")
    # The menus show the keys too (a menu item's shortcut is its first key).
    assert window.shortcut_actions["newConversationAction"].shortcut() == _standard(
        QKeySequence.StandardKey.New
    )
