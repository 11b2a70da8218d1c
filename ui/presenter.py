"""Presenters: the window's state and decisions, without widgets (tested without any).

`ChatPresenter` owns what MainWindow shows and decides: the settings (saved on change), the
conversation being shown and its saving (app/store.py), the reply being generated, Compare
routing, and the one copy of the speculation state (`SpeculationView`: the kind chosen, the
kind in effect, whether it can be switched). It drives the engine controller and listens to
it; the window builds widgets, forwards user actions here and follows the signals.

`SpeedPresenter` (composed, as `ChatPresenter.speed`): the speed baseline (this machine's plain
decoding speed per target model, measured by a plain reply or Compare's plain run, kept in the
settings) and the stats record each reply keeps (the engine's numbers, how it ended, and the
baseline it is compared with).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.host.controller import EngineController
from app.host.reply import Reply, ReplyProgress, ReplyText
from app.host.worker import ChatTurn, EngineInfo, ReplyStarted
from app.library.model_spec import parse_draft
from app.settings import Settings, save_settings
from app.store import Conversation, Message, MessageStatus, Store
from engine.errors import ErrorKind, Failure
from engine.events import Finished, Stats, StatsRecord

log = logging.getLogger(__name__)

MIN_TOKENS_FOR_BASELINE = 8  # a plain reply shorter than this is too noisy to be the speed baseline


class SpeedPresenter(QObject):
    """The speed baseline per target model and the stats records of replies."""

    baseline_changed = Signal(str, float)  # target path, plain tokens/s

    def __init__(
        self,
        settings: Callable[[], Settings],
        update_settings: Callable[..., None],
        target_path: Callable[[], str | None],
        parent: QObject | None = None,
    ) -> None:
        """settings: the current settings; update_settings(**changes) saves changes;
        target_path: the loaded target model's path (None while none is loaded)."""
        super().__init__(parent)
        self._settings = settings
        self._update_settings = update_settings
        self._target_path = target_path

    def plain_tokens_per_s(self) -> float | None:
        """The measured plain speed of the loaded target on this machine, if any."""
        path = self._target_path()
        return self._settings().plain_tokens_per_s.get(path) if path else None

    def record_plain_speed(self, finished: Finished) -> bool:
        """Keep a plain reply's decode speed as the baseline; True when it was kept.

        Only a plain reply (speculation off) that ended by itself and was long enough counts."""
        stats = finished.stats
        path = self._target_path()
        if (
            path is None
            or finished.stop_reason == "cancelled"
            or stats.speculation != "none"
            or stats.n_generated < MIN_TOKENS_FOR_BASELINE
        ):
            return False
        speed = round(stats.decode_tokens_per_s, 3)
        speeds = dict(self._settings().plain_tokens_per_s)
        speeds[path] = speed
        self._update_settings(plain_tokens_per_s=speeds)
        self.baseline_changed.emit(path, speed)
        return True

    def record(self, finished: Finished, **extras: Any) -> StatsRecord:
        """What a finished reply keeps: the engine's numbers, how it ended, the baseline."""
        stats = finished.stats
        record = StatsRecord.of(stats, finished.stop_reason, **extras)
        return replace(record, n_steps_with_draft=stats.n_steps_with_draft, plain_tokens_per_s=self._plain())

    def partial_record(self, stats: Stats | None) -> StatsRecord | None:
        """What an interrupted reply keeps (its last numbers), or None when it had none."""
        if stats is None:
            return None
        return replace(StatsRecord.of(stats, "interrupted"), plain_tokens_per_s=self._plain())

    def _plain(self) -> float | None:
        return self.plain_tokens_per_s() or None


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


@dataclass(frozen=True)
class SpeculationView:
    """The one speculation state, as the toolbar and Compare follow it."""

    choice: str  # "none" | "ngram" | "draft": the kind chosen (the toolbar's combo)
    in_effect: str  # what the engine runs (Compare's speculative side)
    can_switch: bool  # False while a server is the engine: it decides its own speculation


@dataclass(frozen=True)
class PairView:
    """The pair label: its text, whether it reports a problem, its tooltip and the window title
    (None: unchanged)."""

    text: str
    is_problem: bool = False
    tooltip: str | None = None
    title: str | None = None


def _title_from(text: str) -> str:
    first_line = text.strip().splitlines()[0] if text.strip() else "New conversation"
    return first_line if len(first_line) <= TITLE_LENGTH else first_line[: TITLE_LENGTH - 1] + "…"


def _turns(messages: list[Message]) -> tuple[ChatTurn, ...]:
    """The conversation as the model sees it: user/assistant turns, neighbours of one role merged.

    Merging matters after a failed reply (two user messages in a row): many chat templates
    refuse roles that do not alternate.
    """
    turns: list[ChatTurn] = []
    for m in messages:
        if m.role not in ("user", "assistant") or not m.content.strip():
            continue
        if turns and turns[-1].role == m.role:
            turns[-1] = ChatTurn(m.role, turns[-1].content + "\n\n" + m.content)
        else:
            turns.append(ChatTurn(m.role, m.content))
    return tuple(turns)


def _kind(draft: str | None) -> str:
    return str(parse_draft(draft).kind)


# ---- words: what crosses from the engine's side is data; the window says it

STRICT_ENV = "TANDEM_STRICT"  # set (the tests set it): a bug reported by the engine's side raises


class UnexpectedFailure(RuntimeError):
    """A failure of kind UNEXPECTED (a bug in the engine's side, not a user's problem), raised
    by the presenter where TANDEM_STRICT is set, after the window has shown it: under pytest a
    bug fails the test instead of becoming one more notice."""


def raise_if_unexpected(failure: Failure) -> None:
    if failure.kind is ErrorKind.UNEXPECTED and os.environ.get(STRICT_ENV):
        raise UnexpectedFailure(failure.sentence)


def failure_words(failure: Failure) -> str:
    """A failure as the window says it: a refused pair from its rule and both values, any other
    from its sentence."""
    pair = failure.pair
    if failure.kind is ErrorKind.INCOMPATIBLE_PAIR and pair is not None:
        return (
            f"the draft model's vocabulary does not match the target's: {pair.rule} differs "
            f"(target: {pair.target_value!r}, draft: {pair.draft_value!r})"
        )
    return failure.sentence


def pair_words(info: EngineInfo) -> str:
    """The loaded pair's state as the header says it, from the engine's values (the model's
    name is the model picker's)."""
    if info.server:
        how = f", drafting with {info.draft_name}" if info.draft_name else ""
        return f"{info.target_name} on {info.server}{how} (the server decides its speed-up)"
    if info.speculation == "draft" and info.draft:
        pair = f"{info.draft_name} guesses ahead (same vocabulary: compatible)"
    elif info.speculation == "ngram":
        pair = "n-gram: fastest where a reply reuses text"
    else:
        pair = "Speed-up off: the model writes every word itself"
    if info.draft_refusal is not None:
        pair += f". Draft model not used: {failure_words(info.draft_refusal)}."
    return pair


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
    speculation_changed = Signal(object)  # SpeculationView
    pair_changed = Signal(object)  # PairView
    loading_finished = Signal()  # the engine loaded, failed or died: no load in progress
    compare_started = Signal(int, int)  # plain and speculative request ids
    compare_progressed = Signal(object)  # ReplyProgress of a Compare run
    compare_finished = Signal(object)  # Reply of a Compare run, its `finished` set
    compare_failed = Signal(int, str)  # request id, sentence

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
        self._model_override = model
        self._draft_override = draft
        self.live: LiveReply | None = None
        self.conversation_id: int | None = None
        self.editing_message_id: int | None = None
        self._pending_system_prompt = ""
        self.compare_runs: dict[int, str] = {}  # request id -> "plain" | "speculative"
        self.speculation = SpeculationView(_kind(self.draft), _kind(self.draft), True)
        # What a finished reply keeps besides its numbers (the window adds its sparkline's points).
        self.record_extras: Callable[[LiveReply], dict[str, Any]] = lambda _live: {}
        c = controller
        c.engine_loaded.connect(self.on_controller_engine_loaded)
        c.engine_failed.connect(self.on_controller_engine_failed)
        c.engine_died.connect(self.on_controller_engine_died)
        c.draft_changed.connect(self.on_controller_draft_changed)
        c.draft_failed.connect(self.on_controller_draft_failed)
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

    # ---- the engine and the speculation state

    @property
    def draft(self) -> str:
        """The draft to load: the command line's for this session, else the saved choice."""
        return self._draft_override or self.settings.draft

    def start_engine(self) -> None:
        """(Re)load the engine: a server (Settings → Engine) or this computer, with the chosen pair."""
        from app.host.remote_worker import RemoteTarget

        s = self.settings
        remote = RemoteTarget(s.remote_url, s.remote_api_key, s.remote_model) if s.is_remote else None
        self.controller.use_remote(remote)
        self._show_speculation(can_switch=remote is None)
        target = self._model_override or s.model_path or ""
        config = s.engine_config(target)
        if self._draft_override is not None:
            config = s.replace(draft=self._draft_override).engine_config(target)
        self.controller.load(config)

    def _show_speculation(
        self, draft: str | None = None, in_effect: str | None = None, can_switch: bool | None = None
    ) -> None:
        """Change the one speculation state (what is not given stays) and announce it."""
        now = self.speculation
        choice = now.choice if draft is None else _kind(draft)
        if draft is not None and choice != "none" and self.settings.speed_up_auto:
            choice = "auto"
        if in_effect is None:
            in_effect = now.in_effect if draft is None else choice
        self.speculation = SpeculationView(
            choice, in_effect, now.can_switch if can_switch is None else can_switch
        )
        self.speculation_changed.emit(self.speculation)

    def set_speculation(self, draft: str, is_auto: bool = False) -> None:
        """Switch to "none", "ngram" or a draft GGUF path; applies from the next reply. is_auto:
        chosen as "Automatic" (the header shows that choice)."""
        changes: dict[str, Any] = {"draft": draft, "speed_up_auto": is_auto}
        if parse_draft(draft).model is not None:
            changes["draft_model_path"] = draft
        self._draft_override = None
        self.update_settings(**changes)
        self._show_speculation(draft)
        self.pair_changed.emit(PairView("Switching the speed-up… (applies from the next reply)"))
        self.controller.set_draft(parse_draft(draft).engine_value())

    def has_draft_model(self) -> bool:
        """Whether a draft model was chosen before and is still there."""
        path = self.settings.draft_model_path
        return bool(path) and Path(str(path)).exists()

    def choose_speculation(self, kind: str) -> bool:
        """The header's choice: "auto", "none", "ngram" or "draft" (the draft model chosen last).
        Automatic is the draft model chosen last where there is one (it also drafts from the
        text, and leaves the draft model aside where it does not pay), else the text alone.
        False when there is no draft model to switch to: the window asks for a file."""
        if kind == "auto":
            model = str(self.settings.draft_model_path) if self.has_draft_model() else "ngram"
            self.set_speculation(model, is_auto=True)
        elif kind in ("none", "ngram"):
            self.set_speculation(kind)
        elif self.has_draft_model():
            self.set_speculation(str(self.settings.draft_model_path))
        else:
            return False
        return True

    def next_speculation(self) -> str:
        """The kind after the current one: off -> n-gram -> the draft model (when one exists) -> off."""
        kinds = ["none", "ngram"]
        if self.has_draft_model():
            kinds.append("draft")
        current = self.speculation.choice
        return kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else "none"

    def reshow_speculation(self) -> None:
        """The toolbar went out of step (a file dialog cancelled): show the choice again."""
        self._show_speculation(self.draft)

    def model_key(self) -> str:
        """The model in use as the model picker names it: a path, or a built-in model's name."""
        return self._model_override or self.settings.model_path or "default"

    def choose_model(self, model: str) -> None:
        """The header's model picker: this model, with the speed-up chosen now (a draft model
        gives way to the text: it was chosen for the model before)."""
        draft = self.settings.draft
        if parse_draft(draft).model is not None:
            draft = "ngram"  # a draft model belongs to the target it was chosen for
        self.choose_pair(model, draft)

    def choose_pair(self, target_path: str, draft: str) -> None:
        """A pair from the Models page (or the welcome panel's download): saved, then loaded."""
        changes: dict[str, Any] = {"model_path": target_path, "draft": parse_draft(draft).text}
        if parse_draft(draft).model is not None:
            changes["draft_model_path"] = draft
        self._model_override = self._draft_override = None
        self.update_settings(**changes)
        self._show_speculation(draft)
        self.start_engine()

    def _show_pair(self, info: EngineInfo | None, problem: str = "") -> None:
        if info is None:
            self.pair_changed.emit(PairView(problem or "No model loaded", is_problem=bool(problem)))
            return
        text = pair_words(info)
        if problem:
            text += f" — {problem}"
        self.pair_changed.emit(
            PairView(
                text,
                is_problem=bool(problem) or info.draft_refusal is not None,
                tooltip=f"Target: {info.target_path}" + (f"\nDraft: {info.draft}" if info.draft else ""),
                title=f"Tandem — {info.target_name}",
            )
        )

    def on_controller_engine_loaded(self, info: EngineInfo) -> None:
        self.loading_finished.emit()
        self._show_pair(info)
        self._show_speculation(info.draft or "none", in_effect=info.speculation)

    def on_controller_engine_failed(self, failure: Failure) -> None:
        words = failure_words(failure)
        self.loading_finished.emit()
        self._show_pair(None, f"Model not loaded: {words}")
        self.notice_changed.emit(f"The model could not be loaded: {words}", True)
        raise_if_unexpected(failure)

    def on_controller_engine_died(self, failure: Failure) -> None:
        self.loading_finished.emit()
        self._show_pair(None, "Engine stopped; the next message starts a fresh one")
        self.notice_changed.emit(failure_words(failure), True)

    def on_controller_draft_changed(self, info: EngineInfo) -> None:
        self._show_pair(info)
        self._show_speculation(info.draft or "none", in_effect=info.speculation)

    def on_controller_draft_failed(self, failure: Failure) -> None:
        info = self.controller.info
        self._show_pair(info, f"Speed-up unchanged: {failure_words(failure)}")
        if info is not None:
            self.update_settings(draft=info.draft or "none")
            self._show_speculation(info.draft or "none")
        raise_if_unexpected(failure)

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
        rows = []
        for m in self.store.messages(conversation_id):
            if self.live is not None and self.live.message_id == m.id:
                shown = self.live.reply.shown()
                rows.append(
                    MessageRow(m.id, m.role, shown.text, shown.draft_spans, MessageStatus.STREAMING, None)
                )
            else:
                stats = StatsRecord.from_dict(m.stats) if m.stats is not None else None
                rows.append(MessageRow(m.id, m.role, m.content, m.draft_spans, m.status, stats))
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
        turns = _turns(messages)
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
        )
        buffer = self.controller.reply(request_id)
        assert buffer is not None
        self.live = LiveReply(conversation_id, reply.id, buffer, last_saved_s=time.monotonic())
        self.speed_line_changed.emit("Reading the conversation…")

    def send(self, text: str) -> None:
        """Send a user message in the current conversation (a new one if none is open)."""
        if self.controller.is_busy or not text.strip():
            return
        if self.editing_message_id is not None:
            self._supersede_from(self.editing_message_id)
            self.editing_message_id = None
            self.editing_changed.emit(None)
        conversation_id = self._ensure_conversation(text)
        message = self.store.add_message(conversation_id, "user", text)
        self.message_added.emit(MessageRow(message.id, "user", text))
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

    def compare(self, prompt: str) -> None:
        """Run the prompt twice, plain then with speculation, with the same sampling."""
        if self.controller.is_busy:
            return
        turns = (ChatTurn("user", prompt),)
        params, max_tokens = self.settings.sampling(), self.settings.max_tokens
        if not params.is_greedy and params.seed is None:
            # One seed for both runs: with n-gram drafts sampled speculation then writes the very
            # text plain decoding writes (engine/sampling.py, keyed sampling), so only speed differs.
            params = replace(params, seed=random.randrange(1 << 31))
        # Neither run drafts from earlier replies nor is kept: the speculative run must not draft
        # the plain run's reply (engine.reply_memory), or Compare would show that, not speculation.
        plain_id = self.controller.start_reply(
            turns, params=params, max_tokens=max_tokens, speculate=False, remember=False
        )
        speculative_id = self.controller.start_reply(
            turns, params=params, max_tokens=max_tokens, speculate=None, remember=False
        )
        self.compare_runs = {plain_id: "plain", speculative_id: "speculative"}
        self.compare_started.emit(plain_id, speculative_id)

    # ---- the controller's replies: to Compare or to the chat

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
        if progress.request_id in self.compare_runs:
            self.compare_progressed.emit(progress)
            if progress.stats:
                self._show_live_stats(progress.stats[-1])
            return
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
        name = self.compare_runs.pop(reply.request_id, None)
        if name is not None:
            if name == "plain":
                self.speed.record_plain_speed(finished)
            self.compare_finished.emit(reply)
            self._show_live_stats(finished.stats, prefix="Ready")
            return
        live = self.live
        if live is None or reply.request_id != live.request_id:
            return
        self.speed.record_plain_speed(finished)
        record = self.speed.record(finished, **self.record_extras(live))
        status = MessageStatus.CANCELLED if finished.stop_reason == "cancelled" else MessageStatus.COMPLETE
        note = "stopped at the context limit" if finished.stop_reason == "context" else ""
        self._end_live(status, record, note)
        self._show_live_stats(finished.stats, prefix="Ready")
        self.conversations_changed.emit()

    def on_controller_reply_failed(self, request_id: int, failure: Failure, has_engine_died: bool) -> None:
        sentence = failure_words(failure)
        if self.compare_runs.pop(request_id, None) is not None:
            self.compare_failed.emit(request_id, sentence)
            raise_if_unexpected(failure)
            return
        live = self.live
        if live is None or request_id != live.request_id:
            return
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
