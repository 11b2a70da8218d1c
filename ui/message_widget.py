"""One message in the chat: who wrote it, its rendered text, its numbers, and its actions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QApplication, QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.reply import ReplyText
from ui.markdown_view import MessageBody
from ui.stats_format import details_line, details_tooltip

STATUS_NOTES = {
    "cancelled": "stopped",
    "interrupted": "⚠ interrupted: the engine stopped before this reply was finished",
    "streaming": "",
}


class MessageWidget(QFrame):
    copy_requested = Signal(int)
    edit_requested = Signal(int)

    def __init__(self, message_id: int, role: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_id = message_id
        self.role = role
        self.status = "complete"
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet(
            "QFrame#userMessage { background: rgba(90, 140, 230, 28); border-radius: 6px; }"
            "QFrame#assistantMessage { border: none; }"
        )
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(2)

        header = QHBoxLayout()
        self.author = QLabel("<b>You</b>" if role == "user" else "<b>Assistant</b>")
        header.addWidget(self.author)
        header.addStretch(1)
        self.edit_button = QToolButton()
        self.edit_button.setText("Edit")
        self.edit_button.setToolTip("Edit this message and send it again")
        self.edit_button.setVisible(False)
        self.edit_button.clicked.connect(lambda: self.edit_requested.emit(self.message_id))
        header.addWidget(self.edit_button)
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy this message's text")
        self.copy_button.clicked.connect(self.on_copy_button_clicked)
        header.addWidget(self.copy_button)
        layout.addLayout(header)

        self.body = MessageBody(self)
        layout.addWidget(self.body)

        self.details = QLabel()
        self.details.setObjectName("details")
        self.details.setStyleSheet("color: gray; font-size: 11px;")
        self.details.setWordWrap(True)
        self.details.setVisible(False)
        layout.addWidget(self.details)

    def set_content(self, text: str, draft_spans: Sequence[tuple[int, int]], tint: bool) -> None:
        """Render the whole text (a stored message, or a reply that has just ended)."""
        self.body.set_content(text, draft_spans, tint)

    def stream(self, reply: ReplyText, tint: bool) -> None:
        """Show a streaming reply so far; only its new text is laid out."""
        self.body.stream(reply.text, reply.draft_spans, tint)

    def finish(self, reply: ReplyText, tint: bool) -> None:
        """The reply has ended: its final text, rendered once (text() has it at once)."""
        self.body.finish(reply.text, reply.draft_spans, tint)

    def text(self) -> str:
        return self.body.source_text()

    def set_tint(self, tint: bool) -> None:
        self.body.set_tint(tint)

    def set_status(self, status: str, stats: dict[str, Any] | None = None, note: str = "") -> None:
        self.status = status
        parts = []
        if stats:
            parts.append(details_line(stats))
            self.details.setToolTip(details_tooltip(stats))
            self.body.setToolTip(details_tooltip(stats))
        status_note = STATUS_NOTES.get(status, "")
        if status_note:
            parts.append(status_note)
        if note:
            parts.append(note)
        self.details.setText(" · ".join(parts))
        self.details.setVisible(bool(parts))

    def set_editable(self, is_editable: bool) -> None:
        self.edit_button.setVisible(is_editable)

    def on_copy_button_clicked(self) -> None:
        QApplication.clipboard().setText(self.text())
        self.copy_requested.emit(self.message_id)
