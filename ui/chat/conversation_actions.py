"""A conversation's actions in the Conversation menu and the list's context menu: export as
Markdown (to read: each reply with its model, date and speed) or JSON (to import again: where
each stretch came from), import, and a reply against the document it was asked to change."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any, assert_never

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from app.paths import write_private_text
from ui.chat.chat_view import ChatView
from ui.chat.conversation_list import ExportFormat
from ui.presenters.presenter import ChatPresenter

if TYPE_CHECKING:
    from ui.chat.changes import DiffDialog


class ConversationActions(QObject):
    def __init__(
        self, presenter: ChatPresenter, chat: ChatView, settings_action: QAction, parent: QWidget
    ) -> None:
        """presenter: the store and the conversation shown; chat: where each outcome is said;
        settings_action: the Conversation menu's Settings item, which these go above; parent: what
        the dialogs open over."""
        super().__init__(parent)
        self.presenter, self.chat, self.parent_widget = presenter, chat, parent
        menu = next(w for w in settings_action.associatedObjects() if isinstance(w, QMenu))
        importing = "Open a conversation exported as JSON, as a new conversation"
        diff = "The last reply against the document it was asked to change"
        for text, do, tip in (
            ("Export as &Markdown…", lambda: self.export_conversation(None, ExportFormat.MARKDOWN), ""),
            ("Export as &JSON…", lambda: self.export_conversation(None, ExportFormat.JSON), ""),
            ("&Import a conversation…", self.on_import_action_triggered, importing),
            # (a lambda: the action's `checked` is no reply's id)
            ("Compare the reply with its &document…", lambda: self.show_reply_diff(), diff),
        ):
            action = QAction(text, parent, toolTip=tip)
            action.triggered.connect(do)
            menu.insertAction(settings_action, action)
        menu.insertSeparator(settings_action)

    def show_reply_diff(self, reply_id: int | None = None) -> DiffDialog | None:
        """A reply (the last one unless told) against the first document of the message it
        answered (a dialog with copy and save-as); None, and a notice, where there is no such pair."""
        from ui.chat.changes import DiffDialog

        conversation_id = self.presenter.conversation_id
        messages = self.presenter.store.messages(conversation_id) if conversation_id is not None else []
        reply = next(
            (
                m
                for m in reversed(messages)
                if m.role == "assistant" and m.content and (reply_id is None or m.id == reply_id)
            ),
            None,
        )
        asked = next((m for m in reversed(messages) if reply and m.role == "user" and m.id < reply.id), None)
        documents = self.presenter.attachments_of(asked.id) if asked is not None else ()
        if reply is None or not documents:
            self.chat.set_notice("There is no reply to a message with a document to compare.", True)
            return None
        dialog = DiffDialog(documents[0], reply.content, self.parent_widget)
        dialog.show()
        return dialog

    def export_conversation(
        self, conversation_id: int | None, how: ExportFormat, path: str | None = None
    ) -> str:
        """Write a conversation (the one shown by default) as Markdown or JSON; returns the path
        written ("" when cancelled or there is none). A failure is said in the notice line."""
        import json

        from app.store import conversation_markdown

        store = self.presenter.store
        conversation_id = conversation_id if conversation_id is not None else self.presenter.conversation_id
        conversation = store.conversation(conversation_id) if conversation_id is not None else None
        if conversation is None:
            self.chat.set_notice("There is no conversation to export yet.", True)
            return ""
        data = store.export(conversation.id)
        title = export_title(data)
        if path is None:
            path, _ = QFileDialog.getSaveFileName(
                self.parent_widget,
                "Export the conversation",
                str(Path.home() / (file_stem(title) + how.suffix)),
                how.file_filter,
            )
            if not path:
                return ""
        match how:
            case ExportFormat.MARKDOWN:
                text = conversation_markdown({**data, "title": title})
            case ExportFormat.JSON:
                text = json.dumps(data, ensure_ascii=False, indent=1)
            case unreachable:
                assert_never(unreachable)
        try:
            write_private_text(Path(path), text)  # 0600: a conversation is the user's alone
        except OSError as e:
            self.chat.set_notice(f"The conversation could not be written to {path}: {e.strerror or e}.", True)
            return ""
        self.chat.set_notice(f"Exported “{conversation.title}” to {path}.")
        return path

    def on_import_action_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.parent_widget, "Import a conversation", str(Path.home()), "Tandem conversations (*.json)"
        )
        if path:
            self.import_conversation(path)

    def import_conversation(self, path: str) -> int | None:
        """A conversation exported as JSON, added as a new one and shown; a file that is not one
        is refused in one sentence in the notice line. Returns the new conversation's id."""
        from app.store import ConversationFileError, read_conversation_file, store_error_sentence

        try:
            data = read_conversation_file(Path(path))
        except ConversationFileError as e:
            self.chat.set_notice(str(e), True)
            return None
        try:
            conversation = self.presenter.store.import_conversation(data)
        except sqlite3.Error as e:  # a full disk: nothing was kept (one transaction)
            self.chat.set_notice(
                f"{Path(path).name} was not imported: the conversation could not be saved "
                f"({store_error_sentence(e)}); nothing of it was kept.",
                True,
            )
            return None
        self.presenter.show_conversation(conversation.id)
        n = self.presenter.store.last_import_skipped  # versions whose parent the file does not hold
        left_out = (
            f" {n} version{'s' if n > 1 else ''} of its messages pointed at messages the file does "
            f"not hold and {'were' if n > 1 else 'was'} left out."
            if n
            else ""
        )
        self.chat.set_notice(f"Imported “{conversation.title}”.{left_out}", bool(n))
        return int(conversation.id)


def export_title(data: dict[str, Any]) -> str:
    """An export's title: the conversation's, whole where the list cut it short ("…"): the first
    line of the message it was taken from, else the title up to its last whole word."""
    title = str(data.get("title") or "")
    if not title.endswith("…"):
        return title
    start = title[:-1]
    for m in data.get("messages", []):
        line = (str(m.get("content") or "").strip().splitlines() or [""])[0]
        if m.get("role") == "user" and line.startswith(start):
            return line
    return start.rsplit(" ", 1)[0].rstrip(" ,;:") if " " in start else start


def file_stem(title: str, limit: int = 60) -> str:
    """A file name from a title: its words (letters, digits, - and _), spaces kept, at most
    `limit` characters cut at a word ("conversation" where none is left)."""
    words = re.sub(r"[^\w\s-]+", " ", title).split()
    stem = ""
    for word in words:
        if len(stem) + len(word) + 1 > limit:
            break
        stem = f"{stem} {word}".strip()
    return stem or (words[0][:limit] if words else "conversation")
