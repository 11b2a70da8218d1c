"""The chat's presenter, without widgets: the settings (saved on change), the conversation shown
and its saving, what the user sends, edits and regenerates. It owns the other presenters (its
`replies`, `engine`, `comparison`, `speed`: docs/architecture.md); the window follows each one's
own signals (no presenter re-emits another's).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal

from app.document import Document
from app.host.controller import EngineController
from app.settings import Preset, Settings, save_settings
from app.store import Message, MessageStatus, Store, store_error_sentence
from engine.events import StatsRecord
from ui.presenters.compare_presenter import ComparePresenter
from ui.presenters.engine_presenter import EnginePresenter
from ui.presenters.reply_presenter import MessageRow, ReplyPresenter
from ui.presenters.speed_presenter import SpeedPresenter, engine_extras

log = logging.getLogger(__name__)

TITLE_LENGTH = 48
# Earlier answers handed to the engine for drafting when it starts (a regenerate, or the same
# question asked again, drafts from them); about the reply memory's size at 500 tokens each.
EARLIER_EXCHANGES = 64
# Messages the chat shows of a conversation when it opens, and adds each time earlier ones are
# asked for: a row costs milliseconds and about a third of a megabyte to build, so 50 open in well
# under a second however long the conversation.
PAGE_MESSAGES = 50


@dataclass(frozen=True)
class ConversationShown:
    """The conversation the chat shows now (id None: a new one, not yet in the store)."""

    id: int | None
    system_prompt: str
    messages: tuple[MessageRow, ...]
    has_earlier: bool = False  # the conversation has messages before these (shown on request)


@dataclass(frozen=True)
class EarlierShown:
    """Messages before those the chat shows, to add above them."""

    id: int
    messages: tuple[MessageRow, ...]
    has_earlier: bool  # still more before these


def _title_from(text: str) -> str:
    first_line = text.strip().splitlines()[0] if text.strip() else "New conversation"
    return first_line if len(first_line) <= TITLE_LENGTH else first_line[: TITLE_LENGTH - 1] + "…"


class ChatPresenter(QObject):
    """The conversation being shown and its saving; the window forwards user actions here."""

    conversation_shown = Signal(object)  # ConversationShown
    earlier_shown = Signal(object)  # EarlierShown
    conversations_changed = Signal()  # the list (titles, order, the current one) to be read again
    message_added = Signal(object)  # MessageRow
    messages_removed = Signal(list)  # message ids
    editing_changed = Signal(object)  # the text being edited, or None: not editing
    notice_changed = Signal(str, bool)  # text ("" hides it), is a warning

    def __init__(
        self,
        controller: EngineController,
        store: Store,
        settings: Settings,
        model: str | None = None,
        draft: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        """model/draft override the saved choice for this session (the command line's --model/--draft)."""
        super().__init__(parent)
        self.controller = controller
        self.store = store
        self.settings = settings
        # Every engine started gets the latest answers to draft from (engine.text_index).
        controller.supervisor.earlier_exchanges = lambda: tuple(store.recent_exchanges(EARLIER_EXCHANGES))
        self.speed = SpeedPresenter(lambda: self.settings, self.update_settings, self._target_path, self)
        self.engine = EnginePresenter(
            controller, lambda: self.settings, self.update_settings, model, draft, self
        )
        self.comparison = ComparePresenter(controller, lambda: self.settings, self.speed, self)
        self.conversation_id: int | None = None
        self.editing_message_id: int | None = None
        self._first_shown_id: int | None = None  # the earliest message the chat shows (None: all)
        self._pending_system_prompt = ""
        # What a finished reply keeps besides its numbers and the engine's extras (engine_extras):
        # the chat view's, by the reply's message id (its sparkline's points, a busy computer seen).
        self.view_extras: Callable[[int], dict[str, object]] = lambda _message_id: {}
        self.replies = ReplyPresenter(
            controller,
            store,
            lambda: self.settings,
            self.speed,
            lambda: self.conversation_id,
            lambda live: {**engine_extras(controller.info), **self.view_extras(live.message_id)},
            self,
        )
        self.replies.reply_finished.connect(self.conversations_changed.emit)

    # ---- settings

    def update_settings(self, settings: Settings) -> None:
        """Keep these settings and save them (a failed save is logged: the session goes on)."""
        self.settings = settings
        try:
            save_settings(self.settings)
        except OSError as e:
            log.warning("cannot save settings: %s", e)

    def _target_path(self) -> str | None:
        info = self.controller.info
        return info.target_path if info else None

    # ---- conversations

    def open_last_conversation(self) -> None:
        """At start: the conversation shown last time, else the newest one, else none."""
        last = self.settings.last_conversation_id
        if last is None or self.store.conversation(last) is None:
            conversations = self.store.conversations()
            last = conversations[0].id if conversations else None
        if last is None:
            return
        try:
            self.show_conversation(last)
        except Exception:  # a saved conversation that cannot be shown never stops the window starting
            log.exception("conversation %s cannot be shown", last)
            self.show_conversation(None)
            self.notice_changed.emit(
                "The last conversation could not be shown; it is kept in the list. A new one was started.",
                True,
            )

    def show_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self.editing_message_id = None
        self.editing_changed.emit(None)
        if conversation_id is None:
            self.conversation_shown.emit(ConversationShown(None, self._pending_system_prompt, ()))
            self.conversations_changed.emit()
            return
        conversation = self.store.conversation(conversation_id)
        system_prompt = conversation.system_prompt if conversation else ""
        self.conversation_shown.emit(
            ConversationShown(conversation_id, system_prompt, *self._page(conversation_id))
        )
        n_bad = self.store.bad_versions(conversation_id)
        if n_bad:  # rows another program wrote: shown as they stand, left out of the versions
            self.notice_changed.emit(
                f"{n_bad} saved version{'s' if n_bad > 1 else ''} in this conversation point at "
                "messages that are not there; they are left out of the versions (nothing is deleted).",
                True,
            )
        self.conversations_changed.emit()
        if self.settings.last_conversation_id != conversation_id:
            self.settings = replace(self.settings, last_conversation_id=conversation_id)

    def show_earlier(self) -> None:
        """The page of messages before those shown (earlier_shown), where there is one."""
        conversation_id, before = self.conversation_id, self._first_shown_id
        if conversation_id is not None and before is not None:
            self.earlier_shown.emit(EarlierShown(conversation_id, *self._page(conversation_id, before)))

    def _page(self, conversation_id: int, before: int | None = None) -> tuple[tuple[MessageRow, ...], bool]:
        """The rows of the messages before `before` (None: the newest), and whether more are before."""
        messages, has_earlier = self.store.recent_messages(conversation_id, PAGE_MESSAGES, before)
        self._first_shown_id = messages[0].id if has_earlier and messages else None
        return tuple(self._rows(conversation_id, messages)), has_earlier

    def _rows(self, conversation_id: int, messages: list[Message]) -> list[MessageRow]:
        """Stored messages as the chat's rows (the reply being written as it stands now)."""
        attachments = self.store.attachments(conversation_id, messages[0].id if messages else 0)
        versions = self.store.versions_shown(conversation_id, messages[0].id if messages else 0)
        rows = []
        for m in messages:
            stats = StatsRecord.from_dict(m.stats) if m.stats is not None else None
            version = versions.get(m.id, (1, 1))
            row = MessageRow(
                m.id, m.role, m.content, m.spans, m.status, stats, attachments.get(m.id, ()), version
            )
            if self.replies.live is not None and self.replies.live.message_id == m.id:
                shown = self.replies.live.reply.shown()
                row = replace(
                    row, text=shown.text, spans=shown.spans, status=MessageStatus.STREAMING, stats=None
                )
            rows.append(row)
        return rows

    def select_conversation(self, conversation_id: int, found: str = "") -> None:
        """found: the search it was found by; where only an earlier version of a turn holds it,
        that version is chosen (Store.show_version_found), so the match is there to see. Not
        while a reply is written."""
        chosen = False
        if found and not self.controller.is_busy:
            try:
                chosen = self.store.show_version_found(conversation_id, found)
            except sqlite3.Error as e:
                self.notice_changed.emit(
                    f"That version could not be shown ({store_error_sentence(e)}).", True
                )
        if chosen or conversation_id != self.conversation_id:
            self.show_conversation(conversation_id)

    def new_conversation(self) -> None:
        """Open a new conversation, unless the one shown is still empty; an empty one kept from
        before is opened again rather than a second one made."""
        if self.conversation_id is not None and not self.store.has_messages(self.conversation_id):
            return
        empty = next(
            (
                c
                for c in self.store.conversations()
                if c.title == "New conversation" and not c.system_prompt and not self.store.has_messages(c.id)
            ),
            None,
        )
        conversation = empty or self.store.create_conversation()
        self.show_conversation(conversation.id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)
        self.conversations_changed.emit()

    def delete_conversation(self, conversation_id: int) -> None:
        self.replies.abandon(conversation_id)
        self.store.delete_conversation(conversation_id)
        if conversation_id == self.conversation_id:
            remaining = self.store.conversations()
            self.show_conversation(remaining[0].id if remaining else None)
        else:
            self.conversations_changed.emit()

    def apply_preset(self, preset: Preset) -> None:
        """A preset's sampling and speed-up (saved; from the next reply) and its instructions (the
        conversation shown, or the next new one)."""
        self.update_settings(
            replace(
                self.settings,
                temperature=preset.temperature,
                top_p=preset.top_p,
                repeat_penalty=preset.repeat_penalty,
                preset_name=preset.name,
            )
        )
        self.engine.choose_speculation(preset.speed_up)
        self.set_system_prompt(preset.system_prompt)

    def current_preset(self, name: str, system_prompt: str) -> Preset:
        """The settings now as a preset for the model in use."""
        s, choice = self.settings, self.engine.speculation.choice
        return Preset(
            name, self.engine.model_key(), system_prompt, s.temperature, s.top_p, s.repeat_penalty, choice
        )

    def set_system_prompt(self, text: str) -> None:
        if self.conversation_id is None:
            self._pending_system_prompt = text
        else:
            self.store.set_system_prompt(self.conversation_id, text)

    def _ensure_conversation(self, first_text: str) -> int:
        if self.conversation_id is None:
            conversation = self.store.create_conversation(
                _title_from(first_text), self._pending_system_prompt
            )
            self._pending_system_prompt = ""
            self.conversation_id = conversation.id
            self.settings = replace(self.settings, last_conversation_id=conversation.id)
        elif not self.store.has_messages(self.conversation_id):
            shown = self.store.conversation(self.conversation_id)
            if shown is not None and shown.title == "New conversation":
                self.store.rename_conversation(self.conversation_id, _title_from(first_text))
        return self.conversation_id

    # ---- editing

    def edit(self, message_id: int, text: str) -> None:
        """Edit a user message (its text as shown): the next send replaces it and what follows."""
        if self.controller.is_busy:
            return
        self.editing_message_id = message_id
        self.editing_changed.emit(text)

    def cancel_edit(self) -> None:
        self.editing_message_id = None

    # ---- what the user sends

    def _supersede_from(self, message_id: int) -> None:
        """Hide message_id and everything after it in the current conversation (kept in the database)."""
        assert self.conversation_id is not None
        ids = [m.id for m in self.store.messages(self.conversation_id) if m.id >= message_id]
        self.store.set_status(ids, MessageStatus.SUPERSEDED)
        self.messages_removed.emit(ids)

    def attachments_of(self, message_id: int) -> tuple[Document, ...]:
        """The documents sent with a message of the conversation shown (an edit starts from them)."""
        if self.conversation_id is None:
            return ()
        return self.store.attachments(self.conversation_id).get(message_id, ())

    def send(self, text: str, documents: tuple[Document, ...] = ()) -> bool:
        """Send a user message in the current conversation (a new one if none is open), with the
        documents attached to it (saved with it: the copy that stands). False where it was not
        sent: the store could not keep it (a full disk: the notice says so; the caller keeps the text)."""
        if self.controller.is_busy or not (text.strip() or documents):
            return False
        try:
            if self.editing_message_id is not None:
                self._supersede_from(self.editing_message_id)
                self.editing_message_id = None
                self.editing_changed.emit(None)
            conversation_id = self._ensure_conversation(text or documents[0].name)
            message = self.store.add_message(conversation_id, "user", text, documents=documents)
        except sqlite3.Error as e:
            log.error("a message could not be saved: %s", e)
            self.notice_changed.emit(
                f"Your message was not sent: it could not be saved ({store_error_sentence(e)}). "
                "It is still in the box; send it again once that is fixed.",
                True,
            )
            return False
        version = self.store.versions_shown(conversation_id, message.id).get(message.id, (1, 1))
        self.message_added.emit(MessageRow(message.id, "user", text, attachments=documents, version=version))
        self.notice_changed.emit("", False)
        self.replies.start(conversation_id)
        self.conversations_changed.emit()
        return True

    def regenerate(self) -> None:
        if self.controller.is_busy or self.conversation_id is None:
            return
        messages = self.store.messages(self.conversation_id)
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        if last_user is None:
            return
        later = [m for m in messages if m.id > last_user.id]
        replaced = None  # the version the new one takes the place of: its number, its text
        if later:
            versions = self.store.versions_shown(self.conversation_id, later[0].id)
            replaced = (versions.get(later[0].id, (1, 1))[0], later[0].content)
            self._supersede_from(later[0].id)
        self.replies.start(self.conversation_id, replaced)

    def choose_version(self, message_id: int, step: int) -> None:
        """Show another version of a message's turn (step -1: the one before, +1: after): the
        message and what followed it go, the other version and its branch come (kept in the
        store: a restart shows the same). Not while a reply is written."""
        if self.controller.is_busy or self.conversation_id is None:
            return
        try:
            hidden, shown = self.store.choose_version(message_id, step)
        except sqlite3.Error as e:
            self.notice_changed.emit(f"That version could not be shown ({store_error_sentence(e)}).", True)
            return
        if not shown:
            return
        self.messages_removed.emit(hidden)
        for row in self._rows(self.conversation_id, shown):
            self.message_added.emit(row)
        self.conversations_changed.emit()

    def close(self) -> None:
        """Save the settings and close the database (after replies.stop and the engine's shutdown)."""
        self.update_settings(self.settings)
        self.store.close()
