"""A message's actions on hover or focus (reachable by keyboard), and Send that becomes Stop."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPointF, Qt
from PySide6.QtGui import QEnterEvent
from PySide6.QtWidgets import QApplication

from ui.chat.message_widget import MessageWidget
from ui.presenters.reply_presenter import MessageRow


def _actions_shown(message) -> bool:  # type: ignore[no-untyped-def]
    """Whether a message's actions are drawn (its action bar's opacity)."""
    return message.action_bar.graphicsEffect().opacity() > 0


def test_actions_show_on_hover_or_focus_and_stay_in_the_tab_order(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    window.chat.add_row(MessageRow(1, "user", "Question"))
    reply = window.chat.add_row(MessageRow(2, "assistant", "Answer"))
    qtbot.waitUntil(lambda: reply.isVisible(), timeout=5000)
    assert not _actions_shown(reply)  # not drawn on every message
    assert reply.regenerate_button.isVisibleTo(reply) and reply.copy_button.isVisibleTo(reply)
    assert reply.copy_button.focusPolicy() & Qt.FocusPolicy.TabFocus
    # Keyboard: focus on an action shows them all; leaving hides them again.
    reply.copy_button.setFocus()
    qtbot.waitUntil(reply.copy_button.hasFocus, timeout=5000)
    assert _actions_shown(reply)
    window.chat.input.setFocus()
    qtbot.waitUntil(lambda: not _actions_shown(reply), timeout=5000)
    # Pointer: entering the message shows them; leaving hides them.
    QApplication.sendEvent(reply, QEnterEvent(QPointF(5, 5), QPointF(5, 5), QPointF(5, 5)))
    assert _actions_shown(reply)
    QApplication.sendEvent(reply, QEvent(QEvent.Type.Leave))
    assert not _actions_shown(reply)
    # Regenerate is the last reply's; Edit the last message of yours.
    replies = [w for w in window.chat.message_widgets() if w.role == "assistant"]
    assert replies[-1] is reply and reply.regenerate_button.isVisibleTo(reply)
    user = window.chat.widget_for(1)
    assert (
        user is not None
        and user.edit_button.isVisibleTo(user)
        and not user.regenerate_button.isVisibleTo(user)
    )


def test_send_becomes_stop_while_a_reply_runs(qtbot, open_window, wait_reply, slow_target) -> None:
    window = open_window(slow_target, max_tokens=400)
    chat = window.chat
    assert chat.send_button.isVisible() and not chat.stop_button.isVisible()
    window.presenter.send("Write a long essay")
    qtbot.waitUntil(lambda: chat.stop_button.isVisible(), timeout=30_000)
    assert not chat.send_button.isVisible()  # one place, one button at a time
    qtbot.mouseClick(chat.stop_button, Qt.MouseButton.LeftButton)
    wait_reply(window)
    qtbot.waitUntil(lambda: chat.send_button.isVisible() and not chat.stop_button.isVisible(), timeout=30_000)


def test_a_built_in_models_own_file_is_listed_once_by_its_name(qtbot, open_window, tiny_target) -> None:
    # Bug: the built-in Gemma's file in the models folder was listed beside "Gemma 3 270M (base)"
    # as "gemma-3-270m-q4_k_m", and a window on that file (the Models page's built-in pair chooses
    # it by its path) showed it a second time, under its file header's name.
    from app import paths
    from app.library.default_model import DEFAULT_MODEL_NAME

    built_in = paths.models_dir() / DEFAULT_MODEL_NAME
    built_in.parent.mkdir(parents=True, exist_ok=True)
    built_in.write_bytes(tiny_target.read_bytes())
    window = open_window(built_in)
    header = window.header
    header.refresh_models()
    items = [
        (header.model_combo.itemText(i), header.model_combo.itemData(i))
        for i in range(header.model_combo.count())
    ]
    assert [key for _, key in items].count("default") == 1 and str(built_in) not in [key for _, key in items]
    assert header.model_combo.currentText() == "Gemma 3 270M (base) · 802.5 kB"  # its name, its size
    chosen: list[str] = []
    header.model_chosen.connect(chosen.append)
    header.model_combo.activated.emit(header.model_combo.currentIndex())
    assert chosen == []  # the model in use: nothing is loaded again


def test_the_model_picker_lists_the_models_and_switches(qtbot, open_window, tiny_target, tiny_draft) -> None:
    from app import paths

    window = open_window(tiny_target)
    header = window.header
    local = paths.models_dir() / "picked.gguf"
    local.write_bytes(tiny_draft.read_bytes())  # a GGUF in the models folder
    header.refresh_models()
    keys = [header.model_combo.itemData(i) for i in range(header.model_combo.count())]
    assert "default" in keys and str(local) in keys and str(tiny_target) in keys
    assert header.model_combo.currentData() == str(tiny_target)  # the one in use
    index = header.model_combo.findData(str(local))
    header.model_combo.setCurrentIndex(index)
    header.model_combo.activated.emit(index)
    qtbot.waitUntil(
        lambda: window.controller.info is not None and window.controller.info.target_path == str(local),
        timeout=60_000,
    )
    assert window.presenter.settings.model_path == str(local) and header.model_combo.currentData() == str(
        local
    )
    # Each speed-up choice says in one line why to pick it.
    combo = header.speed_combo
    names = [combo.itemText(i) for i in range(combo.count())]
    assert names == ["Automatic", "From the text (n-gram)", "Draft model", "Off"]
    assert all(combo.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(combo.count()))


def test_your_message_shows_line_for_line_as_typed(qtbot, open_window, wait_reply, tiny_target) -> None:
    # Bug: "Dear Ann," Shift+Enter "see you at 5." showed as "Dear Ann, see you at 5.": rendered as
    # Markdown, which folds a lone line break into a space.
    window = open_window(tiny_target, max_tokens=16)
    chat = window.chat
    chat.input.setFocus()
    qtbot.keyClicks(chat.input, "Dear Ann,")
    qtbot.keyClick(chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(chat.input, "see you at 5.")
    qtbot.keyClick(chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    mine = [w for w in chat.findChildren(MessageWidget) if w.role == "user"]
    assert [w.body.document().toPlainText().splitlines() for w in mine] == [["Dear Ann,", "see you at 5."]]
    assert mine[0].text() == "Dear Ann,\nsee you at 5."  # what Copy and Edit take: as typed
    # A code block's lines stay as they were (nothing added to them).
    message = chat.add_row(MessageRow(99, "user", "Run:\n```\nx = 1\ny = 2\n```\nthanks"))
    text = message.body.document().toPlainText()
    assert text.splitlines()[0] == "Run:" and "x = 1\ny = 2\n" in text and text.rstrip().endswith("thanks")
