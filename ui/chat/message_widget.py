"""One message in the chat: who wrote it, its rendered text, its numbers, and its actions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from PySide6.QtCore import QEvent, QObject, Qt, Signal, SignalInstance
from PySide6.QtGui import QEnterEvent, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QGraphicsOpacityEffect,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.host.reply import ReplyText
from app.store import MessageStatus
from engine.events import DraftSpan, Stats, StatsRecord
from ui.chat.markdown_view import MessageBody
from ui.chat.speed_panel import SpeedPanel
from ui.presenters import verdict, words
from ui.presenters.off_words import OFF_KEY, off_words
from ui.presenters.reading_words import reading_rows
from ui.presenters.stats_format import draft_sources
from ui.presenters.verdict import FAILURE_KEY
from ui.qt import theme
from ui.qt.widgets import flush, label, named, tool_button

STATUS_NOTES = {
    MessageStatus.CANCELLED: "stopped by you",
    MessageStatus.INTERRUPTED: "⚠ Interrupted: Tandem stopped before this reply was finished",
}


class MessageWidget(QFrame):
    """A message, with its actions (Changes, Regenerate, Edit, Copy) shown while the pointer is over it
    or the keyboard is in it: they stay in the tab order, invisible until then, so they are
    reachable without a mouse and do not crowd every message."""

    edit_requested = Signal(int)
    regenerate_requested = Signal()
    continue_requested = Signal()  # a reply stopped at the reply-length cap: write on
    version_requested = Signal(int, int)  # this message's id, -1 or +1: another version of its turn
    changes_requested = Signal(int)  # this reply's id: its changes to the document it was asked about

    def __init__(self, message_id: int, role: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message_id = message_id
        self.role = role
        self.attachments_label: QLabel | None = None  # a user message's "Attached: …" line
        self.setObjectName("userMessage" if role == "user" else "assistantMessage")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)

        header = QHBoxLayout()
        self.author = QLabel("<b>You</b>" if role == "user" else "<b>Assistant</b>")
        header.addWidget(self.author)
        header.addStretch(1)
        self.action_bar = named(QWidget(), "messageActions")
        actions = flush(QHBoxLayout(self.action_bar))
        actions.setSpacing(2)
        self.regenerate_button = self._action(
            "Regenerate", "Write this reply again", "Regenerate reply", self.regenerate_requested, hidden=True
        )
        tip = "Edit this message and send it again"
        self.edit_button = self._action(
            "Edit", tip, "Edit message", self._emit(self.edit_requested), hidden=True
        )
        copy = self.on_copy_button_clicked
        self.copy_button = self._action("Copy", "Copy this message's text", "Copy message", copy)
        tip = "What this reply changed in the document it was asked about"
        changes = self._emit(self.changes_requested)
        self.changes_button = self._action(
            "Changes", tip, "Show the changes to the document", changes, hidden=True
        )
        for button in (self.changes_button, self.regenerate_button, self.edit_button, self.copy_button):
            actions.addWidget(button)
            button.installEventFilter(self)  # focus in the actions shows them (eventFilter)
        self._actions_shown = QGraphicsOpacityEffect(self.action_bar)
        self.action_bar.setGraphicsEffect(self._actions_shown)
        self._show_actions(False)
        header.addWidget(self.action_bar)
        # "‹ 2/3 ›": the versions of this turn (Regenerate, Edit keep the earlier ones).
        earlier = self._emit(self.version_requested, -1)
        self.version_prev = self._action("‹", "The version before this one", "Earlier version", earlier)
        self.version_label = named(QLabel(), "versionLabel")
        later = self._emit(self.version_requested, 1)
        self.version_next = self._action("›", "The version after this one", "Later version", later)
        for part in (self.version_prev, self.version_label, self.version_next):
            part.setVisible(False)
            header.addWidget(part)
        layout.addLayout(header)

        # A reply's prompt being read, until its first text.
        self.reading = named(QLabel(), "reading", "Reading the prompt")
        self.reading.setVisible(False)
        layout.addWidget(self.reading)
        self.body = named(MessageBody(self), "", "Your message" if role == "user" else "Reply")
        layout.addWidget(self.body)
        # Filled from the reply's stats (live, then kept small); replies only, hidden until then.
        speed_row = flush(QHBoxLayout())
        self.speed = SpeedPanel(self)
        self.speed.setVisible(False)
        speed_row.addWidget(self.speed, 1)
        tip = "The figures behind this reply's speed"
        self.details_button = tool_button(
            "Details", "detailsButton", None, tip, accessible="Speed details", hidden=True
        )
        self.details_button.setCheckable(True)
        self.details_button.setAutoRaise(True)
        # At the row's end, with the panel or without it (a reply that wrote nothing has none)
        speed_row.addWidget(self.details_button, 0, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignRight)
        layout.addLayout(speed_row)

        # On demand: the figures behind the headline, each once.
        selectable = Qt.TextInteractionFlag.TextSelectableByMouse
        self.details = named(
            QLabel(textFormat=Qt.TextFormat.RichText, textInteractionFlags=selectable), "details"
        )
        self.details.setVisible(False)
        self.details_button.toggled.connect(self.details.setVisible)
        layout.addWidget(self.details)
        self.note = label("", "note", rich=True, hidden=True)  # how the reply ended, where worth saying
        self.note.linkActivated.connect(self.on_note_link_activated)
        layout.addWidget(self.note)
        self._spans: tuple[DraftSpan, ...] = ()
        self._notes: list[str] = []  # how the reply ended, where worth a line
        self._offers_regenerate = False  # ...and whether that line offers Regenerate (a loop)
        self._offers_continue = False  # ...or Continue (the reply-length cap)
        self._described: tuple[int, str] = (0, "")  # the text's length, where its guesses came from
        self.detail_rows: list[tuple[str, str]] = []
        self.restyle(render=False)

    def _action(
        self,
        text: str,
        tip: str,
        name: str,
        clicked: Callable[[], object] | SignalInstance,
        hidden: bool = False,
    ) -> QToolButton:
        button = tool_button(text, "", clicked, tip, accessible=name, hidden=hidden)
        button.setAutoRaise(True)
        button.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        return button

    def _emit(self, signal: SignalInstance, *args: int) -> Callable[[], None]:
        """What an action of this message does: `signal` with the message's id (and `args`)."""
        return lambda: signal.emit(self.message_id, *args)

    # ---- actions on hover or focus

    def _show_actions(self, is_shown: bool) -> None:
        self._actions_shown.setOpacity(1.0 if is_shown else 0.0)

    def _has_focus_within(self) -> bool:
        focus = QApplication.focusWidget()
        return focus is not None and self.action_bar.isAncestorOf(focus)

    def enterEvent(self, event: QEnterEvent) -> None:  # noqa: N802 (Qt's name)
        self._show_actions(True)
        super().enterEvent(event)

    def leaveEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        self._show_actions(self._has_focus_within())
        super().leaveEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Type.FocusIn:
            self._show_actions(True)
        elif event.type() == QEvent.Type.FocusOut:
            self._show_actions(self.underMouse())
        return super().eventFilter(watched, event)

    def restyle(self, render: bool = True) -> None:
        """Colours of the current theme (ui.qt.theme); the text rendered again in them."""
        colors = theme.colors()
        self.setStyleSheet(
            f"QFrame#userMessage {{ background: {colors.user_bubble}; border-radius: 8px; }}"
            "QFrame#assistantMessage { border: none; }"
            f"QLabel#details, QLabel#note {{ color: {colors.muted_text}; }}"
        )
        if render:
            self.body.restyle()
            self._render_note()

    def _describe(self, reply: ReplyText) -> None:
        """Say in words what the highlight shows, and where its guesses came from (screen readers,
        and the tooltip)."""
        self._spans = reply.spans
        self._described = (len(reply.text), words.sources_said(reply.text, reply.spans))
        self._say_highlight()  # (nothing said of a user's message, or of an empty reply)

    def _say_highlight(self) -> None:
        """The hover over the reply: its highlighted share, "sooner" only where the reply was
        faster (its headline says so), then where the guesses came from."""
        n_chars, sources = self._described
        reused = sum(max(0, min(s.end, n_chars) - max(s.start, 0)) for s in self._spans)
        if self.role != "assistant" or not n_chars:
            said = ""
        elif reused:
            is_faster = (
                self.speed.stats is not None and self.speed.headline().verdict is verdict.Verdict.FASTER
            )
            said = words.highlight_said(reused / n_chars, is_faster)
        else:
            said = "Nothing in this reply is highlighted."
        said = f"{said} {sources}" if said and sources else said
        self.body.setAccessibleDescription(said)
        self.body.setToolTip(said)

    def set_content(self, text: str, spans: Sequence[DraftSpan], tint: bool) -> None:
        """Render the whole text (a stored message, or a reply that has just ended); each drafted
        span tinted by its source."""
        reply = ReplyText(text, tuple(spans))
        self.body.set_content(reply, tint)
        self._describe(reply)

    def show_reading(self, line: str) -> None:
        """How far the reply's prompt is read ("Reading 3,200 tokens – 40%, …"), until its text."""
        self.reading.setText(line)
        self.reading.setVisible(bool(line))

    def stream(self, reply: ReplyText, tint: bool) -> None:
        """Show a streaming reply so far; only its new text is laid out."""
        self.reading.setVisible(False)
        self.body.stream(reply, tint)

    def finish(self, reply: ReplyText, tint: bool) -> None:
        """The reply has ended: its final text, rendered once (text() has it at once)."""
        self.body.finish(reply, tint)
        self._describe(reply)

    def text(self) -> str:
        return self.body.source_text()

    def add_stats(
        self, snapshots: Sequence[Stats], plain_tokens_per_s: float | None, usual_steps: float | None = None
    ) -> None:
        """A streaming reply's stats as they arrive: the live speed panel."""
        if self.role == "assistant" and snapshots:
            self.speed.add_stats(snapshots, plain_tokens_per_s, usual_steps)
            self.speed.setVisible(True)

    def set_status(self, status: MessageStatus, stats: StatsRecord | None = None, note: str = "") -> None:
        if status != MessageStatus.STREAMING:
            self.reading.setVisible(False)
        if stats and self.role == "assistant":
            self.speed.set_final(stats)
            # Nothing written (stopped while the prompt was read): no speed to draw, an empty
            # panel beside Details; the Details say how far the reading went.
            self.speed.setVisible(stats.n_generated > 0)
            rows = verdict.details(stats, self.speed.plain_tokens_per_s) + reading_rows(stats)
            if not stats.is_speculative and off_words(stats.extras.get(OFF_KEY)):
                rows.append(("Speed-up off because", off_words(stats.extras.get(OFF_KEY))))
            sources = draft_sources(stats)
            if sources:
                rows.append(("Guesses came from", sources.removeprefix("accepted from ")))
            if stats.note_kind == "" and stats.note and stats.n_accepted and not self._spans:
                rows.append(("Highlight", "the server does not say which words it reused"))
            self.detail_rows = rows
            self.details.setText(
                "<table>"
                + "".join(f"<tr><td>{k}</td><td>&nbsp;&nbsp;{v}</td></tr>" for k, v in rows)
                + "</table>"
            )
            self.details_button.setVisible(bool(rows))
            self.details.setVisible(self.details_button.isChecked())
            self._say_highlight()  # "sooner" only now that the headline is known
        if not note and stats is not None and self.role == "assistant":
            # a stored reply: how it ended, from its record (a failed one: why)
            failed = str(stats.extras.get(FAILURE_KEY, ""))
            note = verdict.end_note(stats.stop_reason, stats.n_generated) or failed
        self._notes = [n for n in (STATUS_NOTES.get(status, ""), note) if n]
        self._offers_regenerate = stats is not None and stats.stop_reason == "repetition"
        self._offers_continue = (
            stats is not None and stats.stop_reason == "length" and self.role == "assistant"
        )
        self._render_note()

    def _render_note(self) -> None:
        """How the reply ended, in one line; a loop's way out (Regenerate) in the same line, as a
        link in the theme's link colour (a label keeps the colour it was laid out with)."""
        notes = [escape(n).replace("\n", "<br>") for n in self._notes]  # (a line of its own: "\n")
        link = QGuiApplication.palette().color(QPalette.ColorRole.Link).name()
        if self._offers_regenerate:
            notes.append(f'<a href="regenerate" style="color: {link}">Regenerate</a>')
        if self._offers_continue:
            notes.append(f'<a href="continue" style="color: {link}">Continue</a>')
        self.note.setText(" · ".join(notes))
        self.note.setVisible(bool(notes))

    def on_copy_button_clicked(self) -> None:
        QApplication.clipboard().setText(self.text())

    def on_note_link_activated(self, link: str) -> None:
        """The end note's way on: Continue a reply cut at the length cap, else Regenerate."""
        if link == "continue":
            self.continue_requested.emit()
        else:
            self.regenerate_requested.emit()

    def set_version(self, index: int, count: int) -> None:
        """Which version of its turn this message is (from 1), of how many; shown where more than one."""
        for part in (self.version_prev, self.version_label, self.version_next):
            part.setVisible(count > 1)
        self.version_label.setText(f"{index}/{count}")
        self.version_label.setAccessibleName(f"Version {index} of {count}")
        self.version_prev.setEnabled(index > 1)
        self.version_next.setEnabled(index < count)
