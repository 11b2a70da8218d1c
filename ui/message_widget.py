"""One message in the chat: who wrote it, its rendered text, its numbers, and its actions."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QApplication, QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.host.reply import ReplyText
from app.store import MessageStatus
from engine.events import Stats, StatsRecord
from ui import theme
from ui.markdown_view import MessageBody
from ui.speed_panel import SpeedPanel
from ui.stats_format import details_line, details_tooltip

STATUS_NOTES = {
    MessageStatus.CANCELLED: "stopped",
    MessageStatus.INTERRUPTED: "⚠ interrupted: the engine stopped before this reply was finished",
    MessageStatus.STREAMING: "",
}


class MessageWidget(QFrame):
    edit_requested = Signal(int)

    def __init__(self, message_id: int, role: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_id = message_id
        self.role = role
        self.status = MessageStatus.COMPLETE
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)

        header = QHBoxLayout()
        self.author = QLabel("<b>You</b>" if role == "user" else "<b>Assistant</b>")
        header.addWidget(self.author)
        header.addStretch(1)
        self.edit_button = QToolButton()
        self.edit_button.setText("Edit")
        self.edit_button.setToolTip("Edit this message and send it again")
        self.edit_button.setAccessibleName("Edit message")
        self.edit_button.setVisible(False)
        self.edit_button.clicked.connect(lambda: self.edit_requested.emit(self.message_id))
        header.addWidget(self.edit_button)
        self.copy_button = QToolButton()
        self.copy_button.setText("Copy")
        self.copy_button.setToolTip("Copy this message's text")
        self.copy_button.setAccessibleName("Copy message")
        self.copy_button.clicked.connect(self.on_copy_button_clicked)
        header.addWidget(self.copy_button)
        layout.addLayout(header)

        self.body = MessageBody(self)
        self.body.setAccessibleName("Your message" if role == "user" else "Reply")
        layout.addWidget(self.body)
        # Filled from the reply's stats (live, then kept small); replies only, hidden until then.
        self.speed = SpeedPanel(self)
        self.speed.setVisible(False)
        layout.addWidget(self.speed)

        self.details = QLabel()
        self.details.setObjectName("details")
        self.details.setWordWrap(True)
        self.details.setVisible(False)
        layout.addWidget(self.details)
        self._spans: tuple[tuple[int, int], ...] = ()
        self._stats_tooltip = ""
        self.restyle(render=False)

    def restyle(self, render: bool = True) -> None:
        """Colours of the current theme (ui.theme); the text rendered again in them."""
        colors = theme.colors()
        self.setStyleSheet(
            f"QFrame#userMessage {{ background: {colors.user_bubble}; border-radius: 8px; }}"
            "QFrame#assistantMessage { border: none; }"
            f"QLabel#details {{ color: {colors.muted_text}; font-size: 11px; }}"
        )
        if render:
            self.body.restyle()

    def _describe_draft(self, text: str, draft_spans: Sequence[tuple[int, int]]) -> None:
        """Say in words what the tint shows (screen readers, and the tooltip)."""
        self._spans = tuple(draft_spans)
        drafted = sum(max(0, min(b, len(text)) - max(a, 0)) for a, b in draft_spans)
        if self.role != "assistant" or not text:
            self.body.setAccessibleDescription("")
        elif drafted:
            self.body.setAccessibleDescription(
                f"{drafted} of {len(text)} characters ({drafted / len(text):.0%}) came from the draft "
                "and were accepted by the model; they are shaded green."
            )
        else:
            self.body.setAccessibleDescription("No text of this reply came from the draft.")
        self._update_tooltip()

    def _update_tooltip(self) -> None:
        description = self.body.accessibleDescription()
        parts = [f"<p>{description}</p>"] if description else []
        if self._stats_tooltip:
            parts.append(self._stats_tooltip)
        self.body.setToolTip("".join(parts))

    def set_content(self, text: str, draft_spans: Sequence[tuple[int, int]], tint: bool) -> None:
        """Render the whole text (a stored message, or a reply that has just ended)."""
        self.body.set_content(text, draft_spans, tint)
        self._describe_draft(text, draft_spans)

    def stream(self, reply: ReplyText, tint: bool) -> None:
        """Show a streaming reply so far; only its new text is laid out."""
        self.body.stream(reply.text, reply.draft_spans, tint)

    def finish(self, reply: ReplyText, tint: bool) -> None:
        """The reply has ended: its final text, rendered once (text() has it at once)."""
        self.body.finish(reply.text, reply.draft_spans, tint)
        self._describe_draft(reply.text, reply.draft_spans)

    def text(self) -> str:
        return self.body.source_text()

    def set_tint(self, tint: bool) -> None:
        self.body.set_tint(tint)

    def add_stats(self, snapshots: Sequence[Stats], plain_tokens_per_s: float | None) -> None:
        """A streaming reply's stats as they arrive: the live speed panel."""
        if self.role == "assistant" and snapshots:
            self.speed.add_stats(snapshots, plain_tokens_per_s)
            self.speed.setVisible(True)

    def set_status(self, status: MessageStatus, stats: StatsRecord | None = None, note: str = "") -> None:
        self.status = status
        parts = []
        if stats and self.role == "assistant":
            self.speed.set_final(stats)
            self.speed.setVisible(True)
        if stats:
            parts.append(details_line(stats))
            self.details.setToolTip(details_tooltip(stats))
            self._stats_tooltip = details_tooltip(stats)
            self._update_tooltip()
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
