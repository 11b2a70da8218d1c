"""The chat: system prompt, messages, a notice line, the input and its buttons.

The view keeps no conversation state of its own beyond its widgets: it follows the presenters'
signals the main window connects (the conversation's rows and earlier pages, the live reply and
its end) and says what the user asks by its ..._requested signals. An empty conversation's
suggestions are ui/chat/empty_chat.py's.

Why this file is long: the message box (PromptEdit: its keys, pastes and long-paste chips) lives
with the view it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

from PySide6.QtCore import QMimeData, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent, QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.store import MessageStatus
from engine.events import DraftSource, DraftSpan
from ui.chat.attachments import LONG_PASTE_CHARS, AttachmentTray, pick_files
from ui.chat.empty_chat import EmptyChat
from ui.chat.message_widget import MessageWidget
from ui.presenters.presenter import ConversationShown, EarlierShown
from ui.presenters.reply_presenter import LiveProgress, MessageRow, ReplyEnded
from ui.presenters.words import quick_action_of
from ui.qt.page_scroll import vertical_scroll
from ui.qt.widgets import button, flush, label, named, tool_button

READABLE_WIDTH_EM = 110  # average characters: about 90 of text a line after margins


class PromptEdit(QPlainTextEdit):
    """Multi-line input: Enter sends, Shift+Enter adds a line, Esc cancels an edit."""

    submitted = Signal()
    escaped = Signal()
    long_pasted = Signal(int, int)  # where a long paste went: [start, end) in the text

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Message the model (Enter sends, Shift+Enter adds a line)")
        self.setTabChangesFocus(True)
        line = self.fontMetrics().lineSpacing()
        self.setMinimumHeight(line * 2 + 12)
        self.setMaximumHeight(line * 8 + 12)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Maximum)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """Three lines: room to write without taking the conversation's place."""
        return QSize(400, self.fontMetrics().lineSpacing() * 3 + 16)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 (Qt's name)
        """Paste as usual; a long paste (LONG_PASTE_CHARS or more) is then offered as an attachment."""
        start = self.textCursor().selectionStart()
        super().insertFromMimeData(source)
        end = self.textCursor().position()
        if end - start >= LONG_PASTE_CHARS:
            self.long_pasted.emit(start, end)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt's name)
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            event.accept()
            return
        if event.key() == Qt.Key.Key_Escape:
            self.escaped.emit()
            event.accept()
            return
        super().keyPressEvent(event)


class ChatView(QWidget):
    send_requested = Signal(str)
    stop_requested = Signal()
    regenerate_requested = Signal()  # relays each message's: messages come and go, the window connects once
    continue_requested = Signal()  # relays each message's (a reply cut at the length cap), as above
    edit_requested = Signal(int)  # message id of the user message to edit (relays each message's, as above)
    changes_requested = Signal(int)  # id of a reply to a message with documents (relays each message's)
    version_requested = Signal(int, int)  # message id, -1 or +1: another version (relays each message's)
    edit_cancelled = Signal()
    system_prompt_changed = Signal(str)
    task_suggested = Signal(str)  # a suggestion's request, put in the message box
    earlier_requested = Signal()  # the messages before those shown (scrolled to the top, or the button)
    sources_shown = Signal(object)  # frozenset[DraftSource]: where what the chat tints came from (the legend)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._widgets: dict[int, MessageWidget] = {}
        self._paged_id: int | None = None  # the conversation whose pages are shown (earlier ones join it)
        self._streaming_id: int | None = None  # the last row shown streaming: the reply being generated
        self._sources: set[DraftSource] = set()  # of the tinted stretches shown (sources_shown)
        self._tint = True  # the drafted stretches tinted (View ▸ Highlight): set_tint
        self._is_busy = False
        self._should_follow = True  # keep the newest text in view unless the user scrolled up

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)

        # The system prompt: folded away behind one button (it is set once, not every message).
        system_row = QHBoxLayout()
        tip = "The system prompt: instructions the model follows in this conversation"
        self.system_toggle = tool_button(
            "Instructions", "systemPromptToggle", tip=tip, accessible="Show the system prompt"
        )
        self.system_toggle.setCheckable(True)
        self.system_toggle.setAutoRaise(True)
        self.system_toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.system_toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.system_toggle.toggled.connect(self.on_system_toggle_toggled)
        system_row.addWidget(self.system_toggle)
        self.system_prompt = QLineEdit(placeholderText="Instructions for this conversation (optional)")
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.editingFinished.connect(self.on_system_prompt_editing_finished)
        self.system_prompt.setVisible(False)
        system_row.addWidget(self.system_prompt, 1)
        system_row.addStretch(0)
        layout.addLayout(system_row)

        notice_row = QHBoxLayout()
        self.notice = label("", "notice", hidden=True)
        # Titles and sentences from files: text, never markup.
        self.notice.setTextFormat(Qt.TextFormat.PlainText)
        self.notice.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        notice_row.addWidget(self.notice, 1)
        # What the notice offers to do about it, where there is something (set_notice_action).
        self.notice_action = button("", "noticeAction", self.on_notice_action_clicked, hidden=True)
        self.notice_action.setAccessibleName("Do what the notice offers")  # its offer, once it has one
        self._notice_do: Callable[[], None] | None = None
        notice_row.addWidget(self.notice_action, 0, Qt.AlignmentFlag.AlignVCenter)
        close = partial(self.set_notice, "")  # every notice can be closed
        self.notice_close = tool_button("✕", "noticeClose", close, "Close this notice", hidden=True)
        self.notice_close.setAccessibleName("Close the notice")
        notice_row.addWidget(self.notice_close, 0, Qt.AlignmentFlag.AlignVCenter)
        layout.addLayout(notice_row)

        self.scroll_area = named(vertical_scroll(), "", "Messages")
        # Replies keep a readable line length: a centred column at most READABLE_WIDTH_EM wide.
        container = QWidget()
        centre = flush(QHBoxLayout(container))
        column = QWidget()
        column.setMaximumWidth(self.fontMetrics().averageCharWidth() * READABLE_WIDTH_EM)
        centre.addStretch(0)
        centre.addWidget(column, 1)
        centre.addStretch(0)
        self.messages_layout = QVBoxLayout(column)
        self.messages_layout.setContentsMargins(4, 4, 4, 4)
        self.messages_layout.setSpacing(14)
        # A long conversation shows its latest messages; earlier ones come on request.
        tip = "Shows the messages before these (scrolling to the top does too)"
        self.earlier_button = button(
            "Show earlier messages", "showEarlier", self.on_earlier_button_clicked, tip, hidden=True
        )
        self.messages_layout.addWidget(self.earlier_button, 0, Qt.AlignmentFlag.AlignHCenter)
        self._from_bottom: int | None = None  # where the view stays while earlier messages come in
        self.empty_state = EmptyChat()
        self.empty_state.task_chosen.connect(self._suggest)
        self.empty_state.action_chosen.connect(self.on_attachments_action_requested)
        self.messages_layout.addWidget(self.empty_state)
        self.messages_layout.addStretch(1)
        self.scroll_area.setWidget(container)
        bar = self.scroll_area.verticalScrollBar()
        bar.rangeChanged.connect(self.on_scrollbar_range_changed)
        bar.valueChanged.connect(self.on_scrollbar_value_changed)
        layout.addWidget(self.scroll_area, 1)

        self.editing_banner = QLabel("Editing your last message: Enter sends it again, Esc cancels.")
        self.editing_banner.setVisible(False)
        layout.addWidget(self.editing_banner)

        # The documents this message will carry (ui/chat/attachments.py), above the box.
        self.attachments = AttachmentTray()
        self.attachments.action_requested.connect(self.on_attachments_action_requested)
        self.attachments.changed.connect(self._offer_document)
        self.attachments.paste_attach_requested.connect(self.on_attachments_paste_attach_requested)
        layout.addWidget(self.attachments)
        self._long_paste: tuple[int, int, str] | None = None  # where the offered paste lies, its text
        self.setAcceptDrops(True)

        input_row = QHBoxLayout()
        tip = "Attach documents: text, Markdown, code, PDF or Word (or drop them here)"
        self.attach_button = tool_button(
            "Attach…", "", self.on_attach_button_clicked, tip, accessible="Attach documents"
        )
        input_row.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        self.input = named(PromptEdit(), "", "Message")
        self.input.long_pasted.connect(self.on_input_long_pasted)
        self.input.setAccessibleDescription("Enter sends, Shift+Enter adds a line, Esc stops a reply")
        self.input.submitted.connect(self.on_input_submitted)
        self.input.escaped.connect(self.on_input_escaped)
        input_row.addWidget(self.input, 1)
        # Send becomes Stop while a reply runs: one place, one button at a time.
        self.send_button = button("Send", "sendButton", self.on_input_submitted)
        self.send_button.setDefault(True)
        tip = "Stop the reply (Esc); what it wrote is kept"
        self.stop_button = button("Stop", "stopButton", self.stop_requested, tip, hidden=True)
        self.stop_button.setEnabled(False)
        input_row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        input_row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
        layout.addLayout(input_row)
        self._is_editing = False

    # ---- an empty conversation: what to ask, and where the speed-up shows (ui/chat/empty_chat.py)

    def set_model_tasks(
        self, model_key: str | None, model_name: str, download_text: str = "", unavailable: str = ""
    ) -> None:
        """The suggested tasks (and a document's quick actions) the model in use does are offered;
        the others are greyed and said to need a larger model, with `download_text` on the button
        that downloads one ("" where there is nothing to offer); all greyed, `unavailable` saying
        why, where no model can answer."""
        self.empty_state.set_model(model_key, model_name, download_text, unavailable)
        self.attachments.set_task_refusal(self.empty_state.refusal)
        self._offer_document()

    def _offer_document(self) -> None:
        documents = self.attachments.documents()
        self.empty_state.offer_document(documents[0] if documents else None)

    def _suggest(self, task: str) -> None:
        if self.input.toPlainText().strip():
            return  # nothing the user typed is replaced
        self.input.setPlainText(task)
        self.input.setFocus()
        self.task_suggested.emit(task)

    # ---- messages

    def on_presenter_conversation_shown(self, shown: ConversationShown) -> None:
        """A conversation's last page of messages, its instructions, and whether earlier ones exist."""
        self.clear()
        self.set_notice("")
        self.set_system_prompt(shown.system_prompt)
        self._paged_id = shown.id
        self._sources = set()
        self.sources_shown.emit(frozenset())  # the rows name theirs as they are added
        for row in shown.messages:
            self.add_row(row)
        self.earlier_button.setVisible(shown.has_earlier)  # the conversation has messages before these
        if shown.id is not None:
            self.scroll_to_end()

    def on_presenter_earlier_shown(self, earlier: EarlierShown) -> None:
        """A page of earlier messages, above those shown; the view stays where it was."""
        if earlier.id != self._paged_id:
            return
        self.keep_place()
        for i, row in enumerate(earlier.messages):
            self.add_row(row, position=i)
        self.earlier_button.setVisible(earlier.has_earlier)

    def on_replies_reading_shown(self, line: str) -> None:
        """How far the reply being generated has read its prompt, on its message until its text
        (where it is shown)."""
        widget = self._widgets.get(self._streaming_id) if self._streaming_id is not None else None
        if widget is not None:
            widget.show_reading(line)

    def on_replies_reply_ended(self, ended: ReplyEnded) -> None:
        """The reply being generated ended: its final text, rendered once, and how it ended (where
        it is shown: a message's widget is there only while its conversation is)."""
        widget = self._widgets.get(ended.message_id)
        if widget is not None:
            widget.finish(ended.text, self._tint)
            self._show_sources(ended.text.spans)
            widget.set_status(ended.status, ended.stats, ended.note)

    def kept_extras(self, message_id: int) -> dict[str, object]:
        """What a finished reply keeps of its message as shown besides its numbers: its small
        sparkline's points, and whether the computer was seen busy while it streamed (said so
        when it is shown again); nothing where it is not shown."""
        widget = self._widgets.get(message_id)
        extras: dict[str, object] = {}
        if widget is not None and widget.speed.points:
            from ui.chat.speed_panel import POINTS_KEY

            extras[POINTS_KEY] = widget.speed.kept_points()
        if widget is not None and widget.speed.busy_seen:
            from ui.presenters.verdict import BUSY_KEY

            extras[BUSY_KEY] = True
        return extras

    def _show_sources(self, spans: Iterable[DraftSpan]) -> None:
        """The legend names a new source as soon as its tint shows (a reply holds a few hundred
        stretches at most: a set's worth of work)."""
        sources = {s.source for s in spans}
        if not sources <= self._sources:
            self._sources |= sources
            self.sources_shown.emit(frozenset(self._sources))

    def clear(self) -> None:
        for widget in self._widgets.values():
            self.messages_layout.removeWidget(widget)
            widget.deleteLater()
        self._widgets.clear()
        self._should_follow = True
        self.empty_state.setVisible(True)
        self.earlier_button.setVisible(False)

    def keep_place(self) -> None:
        """Earlier messages are about to be added above: the view stays on what it shows."""
        bar = self.scroll_area.verticalScrollBar()
        self._from_bottom = bar.maximum() - bar.value()
        self._should_follow = False
        QTimer.singleShot(200, self._release_place)

    def _release_place(self) -> None:
        self._from_bottom = None

    def add_row(self, row: MessageRow, position: int | None = None) -> MessageWidget:
        """A message as the presenter has it, its drafted stretches tinted by their sources (where
        the chat tints: set_tint) and its documents named by their chips' words; position: where
        among the messages shown (0: first, above the others), None: last."""
        from app.library.documents import format_size

        widget = MessageWidget(row.id, row.role)
        widget.set_content(row.text, row.spans, self._tint)
        widget.set_status(
            row.status,
            row.stats,
            note="(no text)"
            if row.role == "assistant" and not row.text and row.status != MessageStatus.STREAMING
            else "",
        )
        widget.edit_requested.connect(self.edit_requested)
        widget.regenerate_requested.connect(self.regenerate_requested)
        widget.continue_requested.connect(self.continue_requested)
        widget.changes_requested.connect(self.changes_requested)
        widget.version_requested.connect(self.version_requested)
        widget.set_version(*row.version)
        if row.attachments:
            names = ", ".join(f"{d.name} ({format_size(d.n_bytes)})" for d in row.attachments)
            carried = label("Attached: " + names, "messageAttachments")
            widget.attachments_label = carried
            layout = widget.layout()
            if layout is not None:
                layout.addWidget(carried)
        if position is None:
            self.messages_layout.insertWidget(self.messages_layout.count() - 1, widget)
            self._widgets[row.id] = widget
        else:  # after the button and the empty state
            self.messages_layout.insertWidget(2 + position, widget)
            shown = list(self._widgets.items())
            shown.insert(position, (row.id, widget))
            self._widgets = dict(shown)
        self._update_edit_buttons()
        self.empty_state.setVisible(False)
        if row.status == MessageStatus.STREAMING:
            self._streaming_id = row.id
        self._show_sources(row.spans)
        return widget

    def remove_messages(self, message_ids: Sequence[int]) -> None:
        for message_id in message_ids:
            widget = self._widgets.pop(message_id, None)
            if widget is not None:
                self.messages_layout.removeWidget(widget)
                widget.deleteLater()
        self._update_edit_buttons()
        self.empty_state.setVisible(not self._widgets)

    def widget_for(self, message_id: int) -> MessageWidget | None:
        return self._widgets.get(message_id)

    def message_widgets(self) -> list[MessageWidget]:
        return list(self._widgets.values())

    def on_replies_reply_progressed(self, progress: LiveProgress) -> None:
        """The reply being generated (ui/presenters/reply_presenter.py) grew, or its numbers came:
        its message shows the new text (only that is laid out) and its live speed panel."""
        widget = self._widgets.get(progress.message_id)
        if widget is None:
            return
        if progress.text is not None:
            widget.stream(progress.text, self._tint)
            self._show_sources(progress.text.spans)
        if progress.stats:
            widget.add_stats(progress.stats, progress.plain_tokens_per_s, progress.usual_steps_tokens_per_s)

    def set_tint(self, tint: bool) -> None:
        self._tint = tint
        for widget in self._widgets.values():
            widget.body.set_tint(tint)

    def restyle(self) -> None:
        """The theme changed: every message in its colours."""
        for widget in self._widgets.values():
            widget.restyle()

    def _update_edit_buttons(self) -> None:
        """Edit on the last message of yours, Regenerate on the last reply; not while one runs.
        Changes on each reply to a message that carried documents (not while it is written)."""
        users = [w for w in self._widgets.values() if w.role == "user"]
        for w in users:
            w.edit_button.setVisible(w is users[-1] and not self._is_busy)
        replies = [w for w in self._widgets.values() if w.role == "assistant"]
        for w in replies:
            w.regenerate_button.setVisible(w is replies[-1] and not self._is_busy)
        asked_with_documents = False
        for w in self._widgets.values():  # in the conversation's order
            if w.role == "user":
                asked_with_documents = w.attachments_label is not None
            else:
                w.changes_button.setVisible(asked_with_documents and not (self._is_busy and w is replies[-1]))

    # ---- state shown

    def set_busy(self, is_busy: bool) -> None:
        self._is_busy = is_busy
        self.send_button.setEnabled(not is_busy)
        self.stop_button.setEnabled(is_busy)
        had_focus = self.send_button.hasFocus() or self.stop_button.hasFocus()
        self.send_button.setVisible(not is_busy)
        self.stop_button.setVisible(is_busy)
        if had_focus:  # the keyboard stays on the button in that place
            (self.stop_button if is_busy else self.send_button).setFocus()
        self._update_edit_buttons()

    def set_notice(self, text: str, is_warning: bool = False) -> None:
        background = "rgba(230, 160, 40, 60)" if is_warning else "rgba(90, 140, 230, 40)"
        self.notice.setStyleSheet(
            f"QLabel#notice {{ background: {background}; padding: 4px; border-radius: 4px; }}"
        )
        self.notice.setText(text)
        self.notice.setVisible(bool(text))
        self.notice_close.setVisible(bool(text))
        self.set_notice_action("", None)  # a new notice offers nothing until told

    def set_notice_action(self, text: str, do: Callable[[], None] | None) -> None:
        """A button beside the notice that does what it offers (and hides the notice)."""
        self._notice_do = do
        self.notice_action.setText(text)
        self.notice_action.setAccessibleName(text or "Do what the notice offers")
        self.notice_action.setVisible(bool(text) and do is not None)

    def on_notice_action_clicked(self) -> None:
        do = self._notice_do
        self.set_notice("")
        if do is not None:
            do()

    def set_system_prompt(self, text: str) -> None:
        self.system_prompt.setText(text)
        self.system_toggle.setText("Instructions (set)" if text else "Instructions")

    def on_system_toggle_toggled(self, is_open: bool) -> None:
        self.system_prompt.setVisible(is_open)
        self.system_toggle.setArrowType(Qt.ArrowType.DownArrow if is_open else Qt.ArrowType.RightArrow)
        if is_open:
            self.system_prompt.setFocus()

    def set_editing(self, text: str | None) -> None:
        """Show `text` in the input for editing; None leaves editing mode."""
        self._is_editing = text is not None
        self.editing_banner.setVisible(self._is_editing)
        if text is not None:
            self.input.setPlainText(text)
            self.input.setFocus()
            self.input.moveCursor(self.input.textCursor().MoveOperation.End)

    def show_match(self, term: str) -> MessageWidget | None:
        """A search's match in the transcript: the first message holding `term` (any case),
        scrolled to, its first occurrence selected (highlighted); None where none holds it."""
        if not term:
            return None
        for widget in self.message_widgets():
            if term.casefold() in widget.text().casefold():
                widget.body.moveCursor(QTextCursor.MoveOperation.Start)
                if widget.body.find(term):
                    widget.body.setFocus(Qt.FocusReason.OtherFocusReason)
                self._should_follow = False
                container = self.scroll_area.widget()
                if container is not None:
                    self.scroll_area.setWidgetResizable(True)  # the container sized to its messages now
                    layout = container.layout()
                    if layout is not None:
                        layout.activate()  # laid out now: the match's place is known
                    at = widget.body.viewport().mapTo(container, widget.body.cursorRect().center())
                    self.scroll_area.ensureVisible(at.x(), at.y(), 0, 60)
                return widget
        return None

    def scroll_to_end(self) -> None:
        self._should_follow = True
        bar = self.scroll_area.verticalScrollBar()
        QTimer.singleShot(0, lambda: bar.setValue(bar.maximum()))

    # ---- handlers

    def on_input_submitted(self) -> None:
        text = self.input.toPlainText().strip()
        if (not text and not self.attachments.documents()) or self._is_busy:
            return
        if self.attachments.has_problems:
            # Nothing is sent and nothing typed is touched: the chip says what is wrong.
            self.set_notice(
                "Remove the files that cannot be attached (their chips say why), then send.", True
            )
            return
        self.input.clear()
        self.scroll_to_end()
        self.send_requested.emit(text)

    # ---- attachments

    def on_attach_button_clicked(self) -> None:
        self.attachments.add_paths(pick_files(self))

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 (Qt's name)
        if event.mimeData().hasUrls() and any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:  # noqa: N802 (Qt's name)
        if event.mimeData().hasUrls():
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 (Qt's name)
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if not paths:
            super().dropEvent(event)
            return
        self.attachments.add_paths(paths)
        event.acceptProposedAction()

    def on_input_long_pasted(self, start: int, end: int) -> None:
        self._long_paste = (start, end, self.input.toPlainText()[start:end])
        self.attachments.offer_paste(end - start)

    def on_attachments_paste_attach_requested(self) -> None:
        """The long paste leaves the box for a chip; if the box changed since, it is copied instead."""
        if self._long_paste is None:
            return
        start, end, pasted = self._long_paste
        self._long_paste = None
        self.attachments.hide_paste_offer()
        if self.input.toPlainText()[start:end] == pasted:
            cursor = self.input.textCursor()
            cursor.setPosition(start)
            cursor.setPosition(end, cursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
        self.attachments.add_text(pasted)

    def on_attachments_action_requested(self, prompt: str) -> None:
        """A quick action: its request goes into the box, to change or send as it is. It replaces
        an empty box or another quick action's request as it was put there; after anything else,
        the user's own words, it is added below them (nothing the user typed is lost)."""
        typed = self.input.toPlainText().strip()
        if typed and quick_action_of(typed) is None:
            cursor = self.input.textCursor()
            cursor.movePosition(cursor.MoveOperation.End)
            cursor.insertText("\n\n" + prompt)  # one undo step, the user's words kept
        else:
            self.input.setPlainText(prompt)
        self.input.setFocus()
        self.input.moveCursor(self.input.textCursor().MoveOperation.End)
        self.task_suggested.emit(prompt)  # edit work chooses its preset (ui.presenters.words.task_preset)

    def on_input_escaped(self) -> None:
        if self._is_editing:
            self.set_editing(None)
            self.input.clear()
            self.edit_cancelled.emit()
        elif self._is_busy:
            self.stop_requested.emit()

    def on_system_prompt_editing_finished(self) -> None:
        text = self.system_prompt.text().strip()
        self.system_toggle.setText("Instructions (set)" if text else "Instructions")
        self.system_prompt_changed.emit(text)

    def on_scrollbar_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._from_bottom is not None:
            self.scroll_area.verticalScrollBar().setValue(maximum - self._from_bottom)
        elif self._should_follow:
            self.scroll_area.verticalScrollBar().setValue(maximum)

    def on_scrollbar_value_changed(self, value: int) -> None:
        bar = self.scroll_area.verticalScrollBar()
        self._should_follow = value >= bar.maximum() - 24
        at_top = value == bar.minimum() < bar.maximum() and self._from_bottom is None
        if at_top and not self.earlier_button.isHidden():  # the earlier messages come
            QTimer.singleShot(0, self.on_earlier_button_clicked)

    def on_earlier_button_clicked(self) -> None:
        if not self.earlier_button.isHidden():
            self.earlier_requested.emit()
