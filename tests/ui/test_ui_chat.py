"""The chat, driven through the real window: a real worker process runs llama.cpp on tiny models."""

from __future__ import annotations

import dataclasses
import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.settings import load_settings
from app.store import Store
from ui.presenters.reply_presenter import MessageRow


def _db_messages(window, include_superseded: bool = False):  # type: ignore[no-untyped-def]
    store = Store()
    try:
        return store.messages(window.presenter.conversation_id, include_superseded=include_superseded)
    finally:
        store.close()


def test_window_opens_with_title_focus_and_pair(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    assert "Tandem" in window.windowTitle()
    qtbot.waitUntil(lambda: window.chat.input.hasFocus(), timeout=5000)
    assert "n-gram" in window.header.state_label.text()
    assert window.header.speed_combo.currentData() == "ngram"
    assert not window.loading.progress.isVisible()


def test_model_load_shows_llama_cpp_progress(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    seen: list[float] = []
    window.controller.load_progressed.connect(lambda stage, fraction: seen.append(fraction))
    window.presenter.engine.start_engine()  # load again: llama.cpp reports how far it got
    qtbot.waitUntil(lambda: 1.0 in seen, timeout=30000)
    window.loading.on_controller_load_progressed("Loading…", 0.5)
    assert (window.loading.progress.maximum(), window.loading.progress.value()) == (100, 50)


def test_send_streams_the_reply_and_stores_it_as_it_goes(qtbot, open_window, wait_reply, slow_target) -> None:
    window = open_window(slow_target, max_tokens=1000)
    progress_updates: list[int] = []
    window.controller.reply_progressed.connect(lambda p: progress_updates.append(len(p.reply) - p.start))
    stored_at_start: list[list[tuple[str, str]]] = []
    window.controller.reply_started.connect(
        lambda _s: stored_at_start.append([(m.role, m.status) for m in _db_messages(window)])
    )

    window.chat.input.setPlainText("Tell me a story")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    # Before the engine has produced anything: the user message and the reply's row are on disk.
    rows = _db_messages(window)
    assert [(m.role, m.content, m.status) for m in rows] == [
        ("user", "Tell me a story", "complete"),
        ("assistant", "", "streaming"),
    ]
    assert window.chat.stop_button.isEnabled() and not window.chat.send_button.isEnabled()

    # Mid-reply the text is in the window and, within a second or so, in the database.
    started = time.monotonic()
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None and len(window.presenter.replies.live.reply.text) > 40
        ),
        timeout=60_000,
    )
    widget = window.chat.widget_for(window.presenter.replies.live.message_id)
    assert widget is not None and widget.text()
    qtbot.waitUntil(lambda: time.monotonic() - started > 1.2, timeout=5000)
    if window.presenter.replies.live is not None:  # still streaming: the partial reply must be stored already
        reply = _db_messages(window)[-1]
        assert reply.status == "streaming" and reply.content
    wait_reply(window)

    assert stored_at_start and stored_at_start[0][0] == ("user", "complete")
    assert len(progress_updates) > 3, "the reply arrived in one piece instead of streaming"
    user, reply = _db_messages(window)
    assert reply.role == "assistant" and reply.status == "complete" and reply.content
    assert (
        reply.stats is not None and reply.stats["n_generated"] > 0 and reply.stats["speculation"] == "ngram"
    )
    widget = window.chat.widget_for(reply.id)
    assert widget.text() == reply.content
    # The figures are on demand (Details), each once; the status bar says the state, no figures.
    assert widget.details_button.isVisibleTo(widget) and not widget.details.isVisibleTo(widget)
    qtbot.mouseClick(widget.details_button, Qt.MouseButton.LeftButton)
    assert widget.details.isVisibleTo(widget)
    labels = [label for label, _ in widget.detail_rows]
    assert "Writing speed" in labels and "Guesses confirmed" in labels and len(labels) == len(set(labels))
    assert window.stats_label.text() == "Ready"
    assert window.conversations.titles() == ["Tell me a story"]


def test_stop_ends_the_reply_and_keeps_it(qtbot, open_window, wait_reply, slow_target) -> None:
    window = open_window(slow_target, max_tokens=3000)
    window.presenter.send("Write a very long essay")
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None and len(window.presenter.replies.live.reply.text) > 10
        ),
        timeout=60_000,
    )
    qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
    wait_reply(window)
    reply = _db_messages(window)[-1]
    assert reply.status == "cancelled" and reply.content
    assert reply.stats["stop_reason"] == "cancelled" and reply.stats["n_generated"] < 3000
    assert "stopped" in window.chat.widget_for(reply.id).note.text()
    # The next message is answered normally.
    window.presenter.settings = dataclasses.replace(window.presenter.settings, max_tokens=16)
    window.presenter.send("Shorter please")
    wait_reply(window)
    assert _db_messages(window)[-1].status == "complete"


def test_regenerate_replaces_the_last_reply_and_keeps_the_old_one(
    qtbot, open_window, wait_reply, tiny_target
) -> None:
    window = open_window(tiny_target, max_tokens=24, temperature=1.0)
    window.presenter.send("Hello")
    wait_reply(window)
    first_reply = _db_messages(window)[-1]
    last_reply = window.chat.message_widgets()[-1]
    qtbot.mouseClick(last_reply.regenerate_button, Qt.MouseButton.LeftButton)
    wait_reply(window)
    visible = _db_messages(window)
    assert [m.role for m in visible] == ["user", "assistant"]
    assert visible[-1].id != first_reply.id and visible[-1].status == "complete"
    everything = _db_messages(window, include_superseded=True)
    assert [(m.id, m.status) for m in everything if m.id == first_reply.id] == [
        (first_reply.id, "superseded")
    ]
    assert [w.role for w in window.chat.message_widgets()] == ["user", "assistant"]


def test_edit_last_user_message_and_resend(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=16)
    window.presenter.send("first version")
    wait_reply(window)
    user_widget = next(w for w in window.chat.message_widgets() if w.role == "user")
    assert user_widget.edit_button.isVisible()
    qtbot.mouseClick(user_widget.edit_button, Qt.MouseButton.LeftButton)
    assert window.chat.input.toPlainText() == "first version" and window.chat.editing_banner.isVisible()
    window.chat.input.setPlainText("second version")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    visible = _db_messages(window)
    assert [(m.role, m.content) for m in visible][0] == ("user", "second version")
    assert [m.role for m in visible] == ["user", "assistant"] and visible[-1].status == "complete"
    superseded = [
        m.content for m in _db_messages(window, include_superseded=True) if m.status == "superseded"
    ]
    assert "first version" in superseded  # nothing the user wrote is lost
    assert not window.chat.editing_banner.isVisible()


def test_enter_sends_and_shift_enter_adds_a_line(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    qtbot.keyClicks(window.chat.input, "line one")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.chat.input, "line two")
    assert window.presenter.conversation_id is None  # nothing sent yet
    assert window.chat.input.toPlainText() == "line one\nline two"
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    assert _db_messages(window)[0].content == "line one\nline two"
    assert window.chat.input.toPlainText() == ""


def test_copy_puts_the_message_on_the_clipboard(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("copy **me**")
    wait_reply(window)
    user_widget = next(w for w in window.chat.message_widgets() if w.role == "user")
    qtbot.mouseClick(user_widget.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == "copy **me**"  # the Markdown source, not the rendering


def test_system_prompt_is_kept_per_conversation(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("hi")
    wait_reply(window)
    first = window.presenter.conversation_id
    window.chat.system_prompt.setText("You are terse.")
    window.chat.system_prompt.editingFinished.emit()
    qtbot.mouseClick(window.conversations.new_button, Qt.MouseButton.LeftButton)
    assert window.chat.system_prompt.text() == ""
    window.presenter.show_conversation(first)
    assert window.chat.system_prompt.text() == "You are terse."
    store = Store()
    assert store.conversation(first).system_prompt == "You are terse."
    store.close()


def test_replies_render_markdown_with_code_blocks(qtbot, open_window, tiny_target) -> None:
    from PySide6.QtGui import QTextFormat

    window = open_window(tiny_target)
    widget = window.chat.add_row(
        MessageRow(-1, "assistant", "Some **bold** text\n\n```python\nprint('hi')\n```\n")
    )
    doc = widget.body.document()
    assert "**" not in doc.toPlainText() and "print('hi')" in doc.toPlainText()
    block, fenced = doc.firstBlock(), []
    while block.isValid():
        if block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence):
            fenced.append(block.text())
        block = block.next()
    assert fenced == ["print('hi')"]


def test_a_base_model_chats_as_a_plain_transcript(qtbot, open_window, wait_reply, tiny_base) -> None:
    window = open_window(tiny_base, max_tokens=16)
    assert not window.controller.info.has_chat_template
    window.presenter.send("Once upon a time")
    wait_reply(window)
    reply = _db_messages(window)[-1]
    assert reply.status == "complete" and "User:" not in reply.content


def test_an_empty_conversation_suggests_work_where_the_speed_up_shows(
    qtbot, open_window, wait_reply, tiny_target
) -> None:
    from ui.presenters.words import DEMO_TASKS

    window = open_window(tiny_target, max_tokens=8, temperature=0.7)  # the chat's default
    chat = window.chat
    assert chat.empty_state.isVisible()
    assert [b.text() for b in chat.empty_state.suggestion_buttons] == [name for name, _ in DEMO_TASKS]
    # A suggestion puts its request in the message box, and sends nothing.
    qtbot.mouseClick(chat.empty_state.suggestion_buttons[1], Qt.MouseButton.LeftButton)
    assert chat.input.toPlainText() == DEMO_TASKS[1][1]
    assert window.presenter.conversation_id is None
    # It is edit work: the preset for it is chosen, in the header (exact, no repetition penalty).
    settings = load_settings()
    assert (settings.preset_name, settings.temperature, settings.repeat_penalty) == (
        "Edit or copy text",
        0.0,
        1.0,
    )
    assert window.header.preset_combo.currentText() == "Edit or copy text"
    # What the user typed is never replaced by one.
    chat.input.setPlainText("my own words")
    qtbot.mouseClick(chat.empty_state.suggestion_buttons[0], Qt.MouseButton.LeftButton)
    assert chat.input.toPlainText() == "my own words"
    window.presenter.send("hello")
    wait_reply(window)
    assert not chat.empty_state.isVisible()
    qtbot.mouseClick(window.conversations.new_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: chat.empty_state.isVisible(), timeout=10_000)
