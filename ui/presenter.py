"""The chat's presenter: the window's conversation and replies, without widgets (tested without any).

The window's state and decisions are split by job, each a QObject with its own signals:
- `ChatPresenter` (here): the settings (saved on change), the conversation being shown and its
  saving (app/store.py), the reply being generated and its end;
- `EnginePresenter` (ui/engine_presenter.py, as `ChatPresenter.engine`): the loaded pair, the
  one copy of the speed-up state and the pair's state in words;
- `ComparePresenter` (ui/compare_presenter.py, as `ChatPresenter.comparison`): Compare's two
  runs and their routing;
- `SpeedPresenter` (ui/speed_presenter.py, as `ChatPresenter.speed`): the plain-speed baseline
  and the stats record each reply keeps.
The window builds widgets, forwards user actions to them and follows their signals.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.host.controller import EngineController
from app.host.messages import ChatTurn, ReplyStarted
from app.host.reply import Reply, ReplyProgress, ReplyText
from app.library.documents import Document, with_documents
from app.settings import Preset, Settings, save_settings
from app.store import Conversation, Message, MessageStatus, Store
from engine.errors import Failure
from engine.events import Stats, StatsRecord
from ui.compare_presenter import ComparePresenter
from ui.engine_presenter import (  # noqa: F401 (the window's and the tests' names)
    EnginePresenter,
    PairView,
    SpeculationView,
    pair_words,
)
from ui.failures import (  # noqa: F401 (the window's and the tests' names)
    STRICT_ENV,
    UnexpectedFailure,
    failure_words,
    raise_if_unexpected,
)
from ui.speed_presenter import SpeedPresenter, pair_reply

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The chat presenter: everything MainWindow decides, without a widget


SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the database at least this often
TITLE_LENGTH = 48
# Earlier answers handed to the engine for drafting when it starts (a regenerate, or the same
# question asked again, drafts from them); about the reply memory's size at 500 tokens each.
EARLIER_EXCHANGES = 64


@dataclass
class LiveReply:
    """The reply being generated for the chat: the controller's buffer, and where it is shown and stored."""

    conversation_id: int
    message_id: int
    reply: Reply
    last_saved_s: float = 0.0

    @property
    def request_id(self) -> int:
        return self.reply.request_id

    @property
    def text(self) -> str:
        return self.reply.text

    @property
    def stats(self) -> Stats | None:
        return self.reply.stats


@dataclass(frozen=True)
class MessageRow:
    """One message as the chat shows it."""

    id: int
    role: str
    text: str
    draft_spans: tuple[tuple[int, int], ...] = ()
    status: MessageStatus = MessageStatus.COMPLETE
    stats: StatsRecord | None = None
    attachments: tuple[Document, ...] = ()  # a user message's documents, as sent


@dataclass(frozen=True)
class ConversationShown:
    """The conversation the chat shows now (id None: a new one, not yet in the store)."""

    id: int | None
    system_prompt: str
    messages: tuple[MessageRow, ...]


@dataclass(frozen=True)
class ReplyEnded:
    """A chat reply that ended: where it is, what it says, how it ended (as stored)."""

    conversation_id: int
    message_id: int
    text: ReplyText
    status: MessageStatus  # COMPLETE, CANCELLED or INTERRUPTED
    stats: StatsRecord | None
    note: str = ""


def _title_from(text: str) -> str:
    first_line = text.strip().splitlines()[0] if text.strip() else "New conversation"
    return first_line if len(first_line) <= TITLE_LENGTH else first_line[: TITLE_LENGTH - 1] + "…"


def _turns(
    messages: list[Message], attachments: dict[int, tuple[Document, ...]] | None = None
) -> tuple[ChatTurn, ...]:
    """The conversation as the model sees it: user/assistant turns, neighbours of one role merged,
    a user message's documents before its text (app.library.documents.with_documents).

    Merging matters after a failed reply (two user messages in a row): many chat templates
    refuse roles that do not alternate.
    """
    turns: list[ChatTurn] = []
    for m in messages:
        documents = (attachments or {}).get(m.id, ())
        content = with_documents(m.content, documents) if documents else m.content
        if m.role not in ("user", "assistant") or not content.strip():
            continue
        if turns and turns[-1].role == m.role:
            turns[-1] = ChatTurn(m.role, turns[-1].content + "\n\n" + content)
        else:
            turns.append(ChatTurn(m.role, content))
    return tuple(turns)


class ChatPresenter(QObject):
    """The conversation being shown and its saving, the stats records and speed baseline (its
    `speed`), Compare routing, and the one copy of the speculation state. It drives the engine
    controller and listens to it; the window forwards user actions here and follows the signals."""

    conversation_shown = Signal(object)  # ConversationShown
    conversations_changed = Signal()  # the list (titles, order, the current one) to be read again
    message_added = Signal(object)  # MessageRow
    messages_removed = Signal(list)  # message ids
    editing_changed = Signal(object)  # the text being edited, or None: not editing
    notice_changed = Signal(str, bool)  # text ("" hides it), is a warning
    speed_line_changed = Signal(str)  # the status bar's state line (no figures: those are the reply's)
    reply_progressed = Signal(object)  # ReplyProgress of the live chat reply
    reply_ended = Signal(object)  # ReplyEnded

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
        # Every engine started gets the latest answers to draft from (engine.reply_memory).
        controller.earlier_exchanges = lambda: tuple(self.store.recent_exchanges(EARLIER_EXCHANGES))
        self.speed = SpeedPresenter(lambda: self.settings, self.update_settings, self._target_path, self)
        self.engine = EnginePresenter(
            controller, lambda: self.settings, self.update_settings, model, draft, self
        )
        self.comparison = ComparePresenter(controller, lambda: self.settings, self.speed, self)
        self.live: LiveReply | None = None
        self.conversation_id: int | None = None
        self.editing_message_id: int | None = None
        self._pending_system_prompt = ""
        # What a finished reply keeps besides its numbers (the window adds its sparkline's points).
        self.record_extras: Callable[[LiveReply], dict[str, Any]] = lambda _live: {}
        c = controller
        c.reply_started.connect(self.on_controller_reply_started)
        c.reply_progressed.connect(self.on_controller_reply_progressed)
        c.reply_finished.connect(self.on_controller_reply_finished)
        c.reply_failed.connect(self.on_controller_reply_failed)

    # ---- settings

    def update_settings(self, **changes: Any) -> None:
        """Change settings and save them (a failed save is logged: the session goes on)."""
        self.settings = self.settings.replace(**changes)
        try:
            save_settings(self.settings)
        except OSError as e:
            log.warning("cannot save settings: %s", e)

    def _target_path(self) -> str | None:
        info = self.controller.info
        return info.target_path if info else None

    # ---- conversations

    def conversation_list(self, search: str = "") -> list[Conversation]:
        return self.store.conversations(search)

    def open_last_conversation(self) -> None:
        """At start: the conversation shown last time, else the newest one, else none."""
        last = self.settings.last_conversation_id
        if last is not None and self.store.conversation(last) is not None:
            self.show_conversation(last)
        else:
            conversations = self.store.conversations()
            if conversations:
                self.show_conversation(conversations[0].id)

    def show_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self.editing_message_id = None
        self.editing_changed.emit(None)
        if conversation_id is None:
            self.conversation_shown.emit(ConversationShown(None, self._pending_system_prompt, ()))
            self.conversations_changed.emit()
            return
        conversation = self.store.conversation(conversation_id)
        attachments = self.store.attachments(conversation_id)
        rows = []
        for m in self.store.messages(conversation_id):
            if self.live is not None and self.live.message_id == m.id:
                shown = self.live.reply.shown()
                rows.append(
                    MessageRow(m.id, m.role, shown.text, shown.draft_spans, MessageStatus.STREAMING, None)
                )
            else:
                stats = StatsRecord.from_dict(m.stats) if m.stats is not None else None
                rows.append(
                    MessageRow(
                        m.id, m.role, m.content, m.draft_spans, m.status, stats, attachments.get(m.id, ())
                    )
                )
        system_prompt = conversation.system_prompt if conversation else ""
        self.conversation_shown.emit(ConversationShown(conversation_id, system_prompt, tuple(rows)))
        self.conversations_changed.emit()
        if self.settings.last_conversation_id != conversation_id:
            self.settings = self.settings.replace(last_conversation_id=conversation_id)

    def select_conversation(self, conversation_id: int) -> None:
        if conversation_id != self.conversation_id:
            self.show_conversation(conversation_id)

    def new_conversation(self) -> None:
        """Open a new conversation, unless the one shown is still empty."""
        if self.conversation_id is not None and not self.store.messages(self.conversation_id):
            return
        conversation = self.store.create_conversation()
        self.show_conversation(conversation.id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)
        self.conversations_changed.emit()

    def delete_conversation(self, conversation_id: int) -> None:
        if self.live is not None and self.live.conversation_id == conversation_id:
            self.controller.stop()
            self.live = None
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
            temperature=preset.temperature,
            top_p=preset.top_p,
            repeat_penalty=preset.repeat_penalty,
            preset_name=preset.name,
        )
        self.engine.choose_speculation(preset.speed_up)
        self.set_system_prompt(preset.system_prompt)

    def current_preset(self, name: str, system_prompt: str) -> Preset:
        """The settings now as a preset for the model in use."""
        s = self.settings
        speed_up = self.engine.speculation.choice
        return Preset(
            name,
            self.engine.model_key(),
            system_prompt,
            s.temperature,
            s.top_p,
            s.repeat_penalty,
            speed_up if speed_up in ("auto", "ngram", "draft", "none") else "ngram",
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
            self.settings = self.settings.replace(last_conversation_id=conversation.id)
        else:
            conversation_ = self.store.conversation(self.conversation_id)
            if (
                conversation_ is not None
                and conversation_.title == "New conversation"
                and not self.store.messages(self.conversation_id)
            ):
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

    # ---- replies

    def _supersede_from(self, message_id: int) -> None:
        """Hide message_id and everything after it in the current conversation (kept in the database)."""
        assert self.conversation_id is not None
        ids = [m.id for m in self.store.messages(self.conversation_id) if m.id >= message_id]
        self.store.set_status(ids, MessageStatus.SUPERSEDED)
        self.messages_removed.emit(ids)

    def _start_reply(self, conversation_id: int) -> None:
        messages = self.store.messages(conversation_id)
        attachments = self.store.attachments(conversation_id)
        turns = _turns(messages, attachments)
        if not turns or turns[-1].role != "user":
            return
        conversation = self.store.conversation(conversation_id)
        # The reply's row exists before the first token, so a crash at any point leaves it marked.
        reply = self.store.add_message(conversation_id, "assistant", "", status=MessageStatus.STREAMING)
        self.message_added.emit(MessageRow(reply.id, "assistant", "", (), MessageStatus.STREAMING, None))
        request_id = self.controller.start_reply(
            turns,
            system_prompt=conversation.system_prompt if conversation else "",
            params=self.settings.sampling(),
            max_tokens=self.settings.max_tokens,
            history_key=f"conversation-{conversation_id}",
            # Drafts copied from these say so (the tint's words, the saved numbers).
            documents=tuple(d.text for m in messages for d in attachments.get(m.id, ())),
        )
        buffer = self.controller.reply(request_id)
        assert buffer is not None
        self.live = LiveReply(conversation_id, reply.id, buffer, last_saved_s=time.monotonic())
        self.speed_line_changed.emit("Reading the conversation…")

    def attachments_of(self, message_id: int) -> tuple[Document, ...]:
        """The documents sent with a message of the conversation shown (an edit starts from them)."""
        if self.conversation_id is None:
            return ()
        return self.store.attachments(self.conversation_id).get(message_id, ())

    def send(self, text: str, documents: tuple[Document, ...] = ()) -> None:
        """Send a user message in the current conversation (a new one if none is open), with the
        documents attached to it (saved with it: the copy that stands)."""
        if self.controller.is_busy or not (text.strip() or documents):
            return
        if self.editing_message_id is not None:
            self._supersede_from(self.editing_message_id)
            self.editing_message_id = None
            self.editing_changed.emit(None)
        conversation_id = self._ensure_conversation(text or documents[0].name)
        message = self.store.add_message(conversation_id, "user", text)
        if documents:
            self.store.add_attachments(message.id, documents)
        self.message_added.emit(MessageRow(message.id, "user", text, attachments=documents))
        self.notice_changed.emit("", False)
        self._start_reply(conversation_id)
        self.conversations_changed.emit()

    def regenerate(self) -> None:
        if self.controller.is_busy or self.conversation_id is None:
            return
        messages = self.store.messages(self.conversation_id)
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        if last_user is None:
            return
        later = [m for m in messages if m.id > last_user.id]
        if later:
            self._supersede_from(later[0].id)
        self._start_reply(self.conversation_id)

    def is_live_shown(self) -> bool:
        """Whether the reply being generated belongs to the conversation shown."""
        return self.live is not None and self.live.conversation_id == self.conversation_id

    def _save_live(self, status: MessageStatus, stats: StatsRecord | None = None) -> None:
        live = self.live
        if live is None:
            return
        shown = live.reply.shown(is_final=status != MessageStatus.STREAMING)
        self.store.save_reply(live.message_id, shown, status, stats.as_dict() if stats is not None else None)
        live.last_saved_s = time.monotonic()

    def _end_live(self, status: MessageStatus, stats: StatsRecord | None, note: str = "") -> None:
        live = self.live
        if live is None:
            return
        self._save_live(status, stats)
        self.reply_ended.emit(
            ReplyEnded(
                live.conversation_id, live.message_id, live.reply.shown(is_final=True), status, stats, note
            )
        )
        self.live = None

    def stop_live(self) -> None:
        """Closing: stop the reply being generated and keep it, cut short, as interrupted."""
        if self.live is not None:
            self.controller.stop()
            self._end_live(MessageStatus.INTERRUPTED, self.speed.partial_record(self.live.stats))

    def close(self) -> None:
        """Save the settings and close the database (after stop_live and the engine's shutdown)."""
        self.update_settings()
        self.store.close()

    def _show_live_stats(self, stats: Stats, prefix: str = "Writing") -> None:
        """The status bar says what is happening; the numbers are the reply's own (its headline)."""
        if prefix == "Writing":
            self.speed_line_changed.emit("Writing…" if stats.n_generated else "Reading the conversation…")
        else:
            self.speed_line_changed.emit(prefix)

    # ---- Compare

    # ---- the controller's replies (the chat's own; Compare's are its presenter's)

    def on_controller_reply_started(self, started: ReplyStarted) -> None:
        if self.live is None or started.request_id != self.live.request_id:
            return
        if started.n_dropped_turns and self.live.conversation_id == self.conversation_id:
            info = self.controller.info
            n_ctx = f" ({info.n_ctx} tokens)" if info else ""
            self.notice_changed.emit(
                f"This conversation is longer than the model's context{n_ctx}: its oldest "
                f"{started.n_dropped_turns} messages are left out of the prompt. The system prompt is kept.",
                False,
            )

    def on_controller_reply_progressed(self, progress: ReplyProgress) -> None:
        live = self.live
        if live is None or progress.request_id != live.request_id:
            return
        if progress.stats:
            self._show_live_stats(progress.stats[-1])
        self.reply_progressed.emit(progress)
        if time.monotonic() - live.last_saved_s >= SAVE_INTERVAL_S:
            self._save_live(MessageStatus.STREAMING)

    def on_controller_reply_finished(self, reply: Reply) -> None:
        finished = reply.finished
        assert finished is not None
        live = self.live
        if live is None or reply.request_id != live.request_id:
            return
        self.speed.record_plain_speed(finished)
        record = self.speed.record(finished, **self.record_extras(live))
        self._keep_pair_reply(record, live.message_id)
        status = MessageStatus.CANCELLED if finished.stop_reason == "cancelled" else MessageStatus.COMPLETE
        note = "stopped at the context limit" if finished.stop_reason == "context" else ""
        self._end_live(status, record, note)
        self._show_live_stats(finished.stats, prefix="Ready")
        self.conversations_changed.emit()

    def _keep_pair_reply(self, record: StatsRecord, message_id: int) -> None:
        """What this reply measured for its pair, kept for the pair doctor's "measured here"."""
        measured = pair_reply(record, self.controller.info)
        if measured is not None:
            self.store.add_pair_reply(
                measured.target,
                measured.drafter,
                measured.speedup,
                is_plain_estimate=measured.is_plain_estimate,
                n_generated=measured.n_generated,
                message_id=message_id,
            )

    def on_controller_reply_failed(self, request_id: int, failure: Failure, has_engine_died: bool) -> None:
        live = self.live
        if live is None or request_id != live.request_id:
            return
        sentence = failure_words(failure)
        if has_engine_died or live.text:
            self._end_live(MessageStatus.INTERRUPTED, self.speed.partial_record(live.stats))
        else:
            # Nothing was written (the prompt did not fit, no model): the empty reply row is hidden.
            self.store.set_status([live.message_id], MessageStatus.SUPERSEDED)
            self.messages_removed.emit([live.message_id])
            self.live = None
        if not has_engine_died:
            # A reply cut short (a server lost mid-reply) is kept: the sentence says what happened.
            self.notice_changed.emit(sentence if live.text else f"No reply: {sentence}", True)
        raise_if_unexpected(failure)
