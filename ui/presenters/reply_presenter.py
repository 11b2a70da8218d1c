"""The chat's reply being generated, without widgets (`ChatPresenter.replies`): started from a
conversation in the store, saved as it streams, ended as complete, cancelled or interrupted with
its stats record, and what it measured for its pair kept for the pair doctor. Compare's replies
are ui/presenters/compare_presenter.py's.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from app.document import Document
from app.host.controller import EngineController
from app.host.messages import ChatTurn, ReplyReading, ReplyStarted
from app.host.reply import Reply, ReplyProgress, ReplyText
from app.library.documents import with_documents
from app.settings import Settings
from app.store import Message, MessageStatus, Store, store_error_sentence
from engine.errors import Failure
from engine.events import DraftSpan, Reading, Stats, StatsRecord
from ui.presenters import reading_words, verdict
from ui.presenters.failures import failure_words, raise_if_unexpected
from ui.presenters.speed_presenter import SpeedPresenter, pair_reply

log = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the database at least this often
# While a prompt is read, its line is said again this often between the engine's reports (one a
# chunk: seconds apart for a 7B model on a CPU), moved on by reading_words.reading_after.
READING_TICK_MS = 250


@dataclass
class LiveReply:
    """The reply being generated for the chat: the controller's buffer, and where it is shown and stored."""

    conversation_id: int
    message_id: int
    reply: Reply
    last_saved_s: float = 0.0
    save_failed: bool = False  # a save failed (a full disk): said once while streaming
    reading: tuple[Reading, float] | None = None  # the engine's last report on its prompt, and when it came
    same_note: tuple[str, str] = ("", "")  # Regenerate: the text replaced, what to say if it comes again


@dataclass(frozen=True)
class MessageRow:
    """One message as the chat shows it."""

    id: int
    role: str
    text: str
    spans: tuple[DraftSpan, ...] = ()  # the drafted stretches (a source NONE: saved before sources were)
    status: MessageStatus = MessageStatus.COMPLETE
    stats: StatsRecord | None = None
    attachments: tuple[Document, ...] = ()  # a user message's documents, as sent
    version: tuple[int, int] = (1, 1)  # which version of its turn it is, of how many (Regenerate, Edit)


@dataclass(frozen=True)
class LiveProgress:
    """One update of the chat's live reply, in the conversation shown, as its message shows it
    (ui/chat/chat_view.py follows these): the text as shown, when it grew, and the numbers that
    came with the speed panel's two baselines."""

    message_id: int
    text: ReplyText | None  # Reply.shown(): the model's leading whitespace cut; None: no new text
    stats: tuple[Stats, ...] = ()  # this update's snapshots, oldest first
    plain_tokens_per_s: float | None = None  # the target's plain speed here, if measured
    usual_steps_tokens_per_s: float | None = None  # its quietest one-token steps here, if kept


@dataclass(frozen=True)
class ReplyEnded:
    """A chat reply that ended: where it is, what it says, how it ended (as stored)."""

    conversation_id: int
    message_id: int
    text: ReplyText
    status: MessageStatus  # COMPLETE, CANCELLED or INTERRUPTED
    stats: StatsRecord | None
    note: str = ""


def same_version_note(version: int, is_greedy: bool) -> str:
    """Under a regenerated reply that came out as the version it replaced (a control that seemed
    to do nothing): so, and why where sampling was greedy."""
    if not is_greedy:
        return f"Same as version {version}."
    return (
        f"Same as version {version}: at temperature 0 the model writes the same reply each time; "
        "raise Variety (temperature) in Settings for a different one."
    )


def _turns(
    messages: list[Message], attachments: dict[int, tuple[Document, ...]] | None = None
) -> tuple[ChatTurn, ...]:
    """The conversation as the model sees it: user/assistant turns, a user message's documents
    before its text, neighbours of one role merged (after a failed reply, two user messages in a
    row: many chat templates refuse roles that do not alternate)."""
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


class ReplyPresenter(QObject):
    """The chat's one live reply (`live`), from its start to its end, and its saving."""

    message_added = Signal(object)  # MessageRow: the reply's row, before its first token
    messages_removed = Signal(list)  # message ids: an empty reply that failed
    notice_changed = Signal(str, bool)  # text, is a warning
    speed_line_changed = Signal(str)  # the status bar's state line
    reply_progressed = Signal(object)  # LiveProgress of the live reply, in the conversation shown
    reading_shown = Signal(str)  # how far the live reply's prompt is read, in words
    reply_ended = Signal(object)  # ReplyEnded
    reply_finished = Signal()  # a reply ended as generated (the conversation list changed)
    context_offered = Signal(int)  # a larger context that would fit the message that did not

    def __init__(
        self,
        controller: EngineController,
        store: Store,
        settings: Callable[[], Settings],
        speed: SpeedPresenter,
        shown_conversation: Callable[[], int | None],
        record_extras: Callable[[LiveReply], dict[str, object]],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self.store = store
        self._settings = settings
        self.speed = speed
        self._shown_conversation = shown_conversation
        self._record_extras = record_extras
        self.live: LiveReply | None = None
        self._reading_tick = QTimer(self)
        self._reading_tick.setInterval(READING_TICK_MS)
        self._reading_tick.timeout.connect(self._on_reading_tick)
        c = controller
        c.reply_started.connect(self.on_controller_reply_started)
        c.reply_reading.connect(self.on_controller_reply_reading)
        c.reply_progressed.connect(self.on_controller_reply_progressed)
        c.reply_finished.connect(self.on_controller_reply_finished)
        c.reply_failed.connect(self.on_controller_reply_failed)

    def start(self, conversation_id: int, replaced: tuple[int, str] | None = None) -> None:
        """Reply to the conversation's last user message (nothing when the last turn is not one);
        replaced: Regenerate's version this one takes the place of (its number, its text)."""
        messages = self.store.messages(conversation_id)
        attachments = self.store.attachments(conversation_id)
        turns = _turns(messages, attachments)
        if not turns or turns[-1].role != "user":
            return
        conversation = self.store.conversation(conversation_id)
        settings = self._settings()
        # The reply's row exists before the first token, so a crash at any point leaves it marked.
        try:
            reply = self.store.add_message(conversation_id, "assistant", "", status=MessageStatus.STREAMING)
        except sqlite3.Error as e:
            log.error("a reply's row could not be saved: %s", e)
            self.notice_changed.emit(
                f"No reply: it could not be saved ({store_error_sentence(e)}). Your message is kept.", True
            )
            return
        version = self.store.versions_shown(conversation_id, reply.id).get(reply.id, (1, 1))
        self.message_added.emit(
            MessageRow(reply.id, "assistant", "", (), MessageStatus.STREAMING, None, version=version)
        )
        request_id = self.controller.start_reply(
            turns,
            system_prompt=conversation.system_prompt if conversation else "",
            params=settings.sampling(),
            max_tokens=settings.max_tokens,
            history_key=f"conversation-{conversation_id}",
            # Drafts copied from these say so (the tint's words, the saved numbers).
            documents=tuple(d.text for m in messages for d in attachments.get(m.id, ())),
        )
        buffer = self.controller.reply(request_id)
        assert buffer is not None
        self.live = LiveReply(conversation_id, reply.id, buffer, last_saved_s=time.monotonic())
        if replaced is not None and replaced[1]:
            self.live.same_note = (replaced[1], same_version_note(replaced[0], settings.sampling().is_greedy))
        self.speed_line_changed.emit("Reading the conversation…")

    def abandon(self, conversation_id: int) -> None:
        """The conversation is being deleted: stop its reply, keeping nothing of it."""
        if self.live is not None and self.live.conversation_id == conversation_id:
            self.controller.stop()
            self.live = None

    def stop(self) -> None:
        """Closing: stop the reply being generated and keep it, cut short, as interrupted."""
        if self.live is not None:
            self.controller.stop()
            self._end_live(MessageStatus.INTERRUPTED, self.speed.partial_record(self.live.reply.stats))

    def _save_live(self, status: MessageStatus, stats: StatsRecord | None = None) -> None:
        live = self.live
        if live is None:
            return
        shown = live.reply.shown(is_final=status != MessageStatus.STREAMING)
        live.last_saved_s = time.monotonic()
        try:
            self.store.save_reply(
                live.message_id, shown, status, stats.as_dict() if stats is not None else None
            )
        except sqlite3.Error as e:  # a full disk: the reply goes on on screen; the next save tries again
            log.error("a reply could not be saved: %s", e)
            if status != MessageStatus.STREAMING or not live.save_failed:
                self.notice_changed.emit(
                    f"This reply could not be saved ({store_error_sentence(e)}): it is shown, but will "
                    "not be in the history unless you copy it.",
                    True,
                )
            live.save_failed = True

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

    # ---- the controller's replies (the chat's own; Compare's are its presenter's)

    def on_controller_reply_started(self, started: ReplyStarted) -> None:
        if self.live is None or started.request_id != self.live.reply.request_id:
            return
        if started.n_dropped_turns and self.live.conversation_id == self._shown_conversation():
            info = self.controller.info
            n_ctx = f" ({info.n_ctx} tokens)" if info else ""
            self.notice_changed.emit(
                f"This conversation is longer than the model's context{n_ctx}: its oldest "
                f"{started.n_dropped_turns} messages are left out of the prompt. The system prompt is kept.",
                False,
            )

    def on_controller_reply_reading(self, message: ReplyReading) -> None:
        if self.live is None or message.request_id != self.live.reply.request_id or self.live.reply.text:
            return
        self.live.reading = (message.reading, time.monotonic())
        self._show_reading(message.reading)
        if not self._reading_tick.isActive():
            self._reading_tick.start()

    def _on_reading_tick(self) -> None:
        live = self.live
        if live is None or live.reply.text or live.reading is None:
            self._reading_tick.stop()  # ended, or writing: the reply says the rest
            return
        reading, at = live.reading
        if reading.n_processed >= reading.n_prompt_tokens - 1:
            self._reading_tick.stop()  # read: the first text comes next
            return
        self._show_reading(reading_words.reading_after(reading, time.monotonic() - at))

    def _show_reading(self, reading: Reading) -> None:
        line = reading_words.reading_line(reading)
        self.speed_line_changed.emit(line)
        self.reading_shown.emit(line)

    def on_controller_reply_progressed(self, progress: ReplyProgress) -> None:
        live = self.live
        if live is None or progress.request_id != live.reply.request_id:
            return
        stats = progress.stats
        if stats:  # the status bar says what is happening; the numbers are the reply's own
            self.speed_line_changed.emit("Writing…" if stats[-1].n_generated else "Reading the conversation…")
        if live.conversation_id == self._shown_conversation():
            grew = len(live.reply) != progress.start
            self.reply_progressed.emit(
                LiveProgress(
                    live.message_id,
                    live.reply.shown() if grew else None,
                    stats,
                    self.speed.plain_tokens_per_s() if stats else None,
                    self.speed.steps_tokens_per_s(stats[-1]) if stats else None,
                )
            )
        if time.monotonic() - live.last_saved_s >= SAVE_INTERVAL_S:
            self._save_live(MessageStatus.STREAMING)

    def on_controller_reply_finished(self, reply: Reply) -> None:
        finished = reply.finished
        assert finished is not None
        live = self.live
        if live is None or reply.request_id != live.reply.request_id:
            return
        self.speed.record_plain_speed(finished)
        record = self.speed.record(finished.stats, finished.stop_reason, **self._record_extras(live))
        self.speed.note_steps(finished)  # after its record: a reply is compared with what came before
        self._keep_pair_reply(record, live.message_id)
        status = MessageStatus.CANCELLED if finished.stop_reason == "cancelled" else MessageStatus.COMPLETE
        note = verdict.end_note(finished.stop_reason, finished.stats.n_generated)
        replaced, same = live.same_note
        if same and replaced == live.reply.shown(is_final=True).text:
            note = f"{same}\n{note}" if note else same
        self._end_live(status, record, note)
        self.speed_line_changed.emit("Ready")
        self.reply_finished.emit()

    def _keep_pair_reply(self, record: StatsRecord, message_id: int) -> None:
        """What this reply measured for its pair, kept for the pair doctor's "measured here"."""
        measured = pair_reply(record, self.controller.info)
        if measured is None:
            return
        try:
            self.store.add_pair_reply(**dataclasses.asdict(measured), message_id=message_id)
        except sqlite3.Error as e:  # a measurement, not the user's words: logged
            log.warning("a pair measurement could not be saved: %s", e)

    def on_controller_reply_failed(self, request_id: int, failure: Failure, has_engine_died: bool) -> None:
        live = self.live
        if live is None or request_id != live.reply.request_id:
            return
        sentence = failure_words(failure)
        if has_engine_died or live.reply.text:
            # How it ended, under it: interrupted, and why (the failure's sentence).
            partial = self.speed.partial_record(live.reply.stats, sentence)
            self._end_live(MessageStatus.INTERRUPTED, partial, sentence)
        else:
            # Nothing was written (the prompt did not fit, no model): the empty reply row is hidden.
            try:
                self.store.set_status([live.message_id], MessageStatus.SUPERSEDED)
            except sqlite3.Error as e:
                log.error("an empty reply could not be hidden: %s", e)
            self.messages_removed.emit([live.message_id])
            self.live = None
        # However it failed, the state line leaves "Writing…" / "Reading the conversation…" (an
        # engine that died mid-reply left it there for good; the next message starts a fresh one).
        self.speed_line_changed.emit("Ready")
        if not has_engine_died:
            # A reply cut short (a server lost mid-reply) is kept: the sentence says what happened.
            self.notice_changed.emit(sentence if live.reply.text else f"No reply: {sentence}", True)
            if failure.context is not None and failure.context.n_ctx_offer:
                self.context_offered.emit(failure.context.n_ctx_offer)
        raise_if_unexpected(failure)
