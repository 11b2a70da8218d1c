"""Conversations in the window: full-text search, export (Markdown and JSON) and import back,
with the real window, a real engine on a tiny model and the real SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import Qt

from ui.chat.conversation_list import ExportFormat


def test_search_export_and_import(qtbot, open_window, wait_reply, tiny_target, tmp_path: Path) -> None:
    window = open_window(tiny_target, draft="ngram", max_tokens=24, temperature=0.0)
    window.presenter.send("the harbour committee met on tuesday. the harbour committee met on tuesday.")
    wait_reply(window)
    first = window.presenter.conversation_id
    qtbot.mouseClick(window.conversations.new_button, Qt.MouseButton.LeftButton)
    window.presenter.send("Something about soup")
    wait_reply(window)
    assert len(window.conversations.titles()) == 2

    # Search finds a word from inside what was written, not only from titles.
    qtbot.keyClicks(window.conversations.search, "tuesd")
    assert window.conversations.titles() == [window.presenter.store.conversation(first).title]
    window.conversations.search.clear()
    assert len(window.conversations.titles()) == 2

    # Export the first conversation both ways; the JSON says where each stretch came from.
    window.presenter.show_conversation(first)
    md = window.conversation_actions.export_conversation(None, ExportFormat.MARKDOWN, str(tmp_path / "c.md"))
    js = window.conversation_actions.export_conversation(first, ExportFormat.JSON, str(tmp_path / "c.json"))
    assert Path(md).read_text(encoding="utf-8").startswith("# the harbour committee")
    data = json.loads(Path(js).read_text(encoding="utf-8"))
    reply = data["messages"][1]
    assert reply["role"] == "assistant" and "".join(s["text"] for s in reply["stretches"]) == reply["content"]
    stored = window.presenter.store.messages(first)[1]
    drafted = "".join(s["text"] for s in reply["stretches"] if s["from"] == "draft")
    assert drafted == "".join(stored.content[s.start : s.end] for s in stored.spans)
    assert "exported" in window.chat.notice.text().lower()

    # Imported back: a new conversation, shown, with the same text and highlight.
    new_id = window.conversation_actions.import_conversation(js)
    assert new_id is not None and new_id != first and window.presenter.conversation_id == new_id
    again = window.presenter.store.messages(new_id)
    assert [(m.role, m.content, m.spans) for m in again] == [
        (m.role, m.content, m.spans) for m in window.presenter.store.messages(first)
    ]
    assert len(window.conversations.titles()) == 3

    # A file that is not one: one sentence in the notice line, nothing added.
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}', encoding="utf-8")
    assert window.conversation_actions.import_conversation(str(bad)) is None
    assert window.chat.notice.text().startswith("notes.json is not a Tandem conversation file")
    assert "\n" not in window.chat.notice.text() and len(window.conversations.titles()) == 3


def test_f2_renames_and_delete_deletes_the_selected_conversation_by_keyboard(qtbot, monkeypatch) -> None:
    """The list's key filter (ui/chat/conversation_list.py) reads the key of a key press: F2 asks to
    rename, Delete to delete, the conversation selected (the dialogs themselves are the context
    menu's, tested with the window)."""
    from app.store import Conversation
    from ui.chat.conversation_list import ConversationList

    conversations = ConversationList()
    qtbot.addWidget(conversations)
    conversations.set_conversations(
        [Conversation(1, "Apples", "", 2.0), Conversation(2, "Pears", "", 1.0)], 2
    )
    asked: list[tuple[str, int | None]] = []
    monkeypatch.setattr(conversations, "ask_rename", lambda cid: asked.append(("rename", cid)))
    monkeypatch.setattr(conversations, "ask_delete", lambda cid: asked.append(("delete", cid)))
    qtbot.keyClick(conversations.list, Qt.Key.Key_F2)
    qtbot.keyClick(conversations.list, Qt.Key.Key_Delete)
    qtbot.keyClick(conversations.list, Qt.Key.Key_A)  # any other key: the list's own
    assert asked == [("rename", 2), ("delete", 2)]
