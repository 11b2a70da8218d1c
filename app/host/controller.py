"""The Qt side of the engine: drives the worker process and turns its messages into signals.

The GUI thread never waits on the engine. The worker's reader thread appends every message to a
queue; the first into an empty queue wakes the GUI thread once, and a single-shot timer drains the
whole queue at most every FLUSH_INTERVAL_MS. The text pieces of one drain are appended to their
reply's one buffer (app.host.reply.Reply) and announced by one ReplyProgress: a model producing
thousands of tokens a second costs the window about 40 repaints a second, an idle engine nothing.

The worker's lifecycle is the supervisor's (app.host.supervisor, shared with the window's API
server). Stop stops the window's own reply, never an API client's. Failures reach the window as
data (an engine.errors.Failure), never a bare sentence.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, assert_never

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.host.messages import (
    ChatTurn,
    DraftChanged,
    DraftFailed,
    EngineFailed,
    EngineInfo,
    EngineLoaded,
    HostMessage,
    LoadProgressed,
    ReplyEvents,
    ReplyFailed,
    ReplyReading,
    ReplyRequest,
    ReplyStarted,
    TokenCountFailed,
    TokensCounted,
    WorkerDied,
)
from app.host.reply import Reply, ReplyProgress
from app.host.supervisor import EngineSupervisor, WorkerFactory
from app.host.worker import WorkerProcess
from engine.config import EngineConfig, SamplingParams
from engine.errors import ErrorKind, Failure
from engine.events import Finished, Stats

if TYPE_CHECKING:
    from app.host.remote_worker import RemoteTarget

FLUSH_INTERVAL_MS = 25  # at most 40 display updates a second, at least 30 while text arrives
DRAIN_BUDGET_S = 0.005  # one drain handles messages for about this long, then yields the loop


class EngineController(QObject):
    load_progressed = Signal(str, float)  # stage, fraction loaded (-1: not known)
    engine_loaded = Signal(object)  # EngineInfo
    engine_failed = Signal(object)  # engine.errors.Failure
    engine_died = Signal(object)  # engine.errors.Failure, kind ENGINE_STOPPED
    draft_changed = Signal(object)  # EngineInfo
    draft_failed = Signal(object)  # engine.errors.Failure
    reply_started = Signal(object)  # messages.ReplyStarted
    reply_reading = Signal(object)  # messages.ReplyReading: how far its prompt is read
    reply_progressed = Signal(object)  # app.host.reply.ReplyProgress
    reply_finished = Signal(object)  # app.host.reply.Reply, its `finished` set
    reply_failed = Signal(int, object, bool)  # request id, engine.errors.Failure, whether the engine died
    busy_changed = Signal(bool)
    tokens_counted = Signal(int, object)  # request id (count_tokens), the counts: tuple[int, ...]
    _woke = Signal()  # emitted from the reader thread; queued to the GUI thread

    def __init__(
        self,
        parent: QObject | None = None,
        worker_factory: WorkerFactory = WorkerProcess,
    ) -> None:
        """worker_factory(on_message) makes the engine's process (tools.bench_gui passes a stand-in)."""
        super().__init__(parent)
        self._local_factory = worker_factory
        self.remote: RemoteTarget | None = None  # the server used instead of this computer's engine
        self.supervisor = EngineSupervisor(worker_factory)
        # The engine as the window has been told of it (set as its signals go out, on this thread;
        # the supervisor's own `info` runs ahead of them, on the reader thread).
        self._info: EngineInfo | None = None
        self._replies: dict[int, Reply] = {}  # the window's replies not ended, oldest first: their buffers
        self._lock = threading.Lock()
        # (supervisor generation, message, the window's reply it belongs to: None for engine news)
        self._inbox: deque[tuple[int, HostMessage, Reply | None]] = deque()
        self._is_wake_pending = False
        self._last_flush_s = 0.0
        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.timeout.connect(self._flush)
        self._woke.connect(self.on_self_woke)
        self.supervisor.listen(lambda generation, message: self._enqueue(generation, message, None))

    # ---- state

    @property
    def info(self) -> EngineInfo | None:
        return self._info

    @property
    def is_busy(self) -> bool:
        return bool(self._replies)

    # ---- requests in

    @Slot(object)
    def load(self, config: EngineConfig) -> None:
        """Load a target/draft pair (an empty target_path: the embedded default model)."""
        self._info = None
        self.load_progressed.emit("Starting the engine…", -1.0)
        self.supervisor.load(config)

    def use_remote(self, target: RemoteTarget | None) -> None:
        """Use a server (app.host.remote_worker.RemoteTarget) as the engine, or None: this computer's.
        Applies from the next load; a change ends the current engine and what it owed."""
        if target == self.remote:
            return
        from functools import partial

        from app.host.remote_worker import RemoteWorker

        self.remote = target
        factory = self._local_factory if target is None else partial(RemoteWorker, target=target)
        self.supervisor.replace_engine("the engine was changed", factory)
        self._info = None
        self._fail_pending("the engine was changed", engine_died=True)

    def start_reply(
        self,
        turns: tuple[ChatTurn, ...],
        system_prompt: str = "",
        params: SamplingParams | None = None,
        max_tokens: int = 512,
        speculate: bool | None = None,
        history_key: str = "",
        remember: bool = True,
        documents: tuple[str, ...] = (),
    ) -> int:
        """Queue a reply; returns its request id. Replies run one after the other.
        remember=False: the reply neither drafts from earlier replies nor is kept (Compare).
        documents: the texts of documents attached in the conversation (drafts from them say so)."""
        request = ReplyRequest(
            request_id=0,  # given by the supervisor
            turns=turns,
            system_prompt=system_prompt,
            params=params or SamplingParams(),
            max_tokens=max_tokens,
            speculate=speculate,
            history_key=history_key,
            remember=remember,
            documents=documents,
        )
        was_busy = self.is_busy
        # Its messages are read on this thread (in _flush), after its id is known here.
        reply = Reply(0)
        request_id = self.supervisor.submit(
            request, lambda generation, m: self._enqueue(generation, m, reply)
        )
        reply.request_id = request_id
        self._replies[request_id] = reply
        if not was_busy:
            self.busy_changed.emit(True)
        return request_id

    def count_tokens(self, texts: tuple[str, ...]) -> int | None:
        """Ask the loaded engine for the texts' token counts by its own tokenizer (no BOS); the
        answer comes as tokens_counted with the id returned, beside a reply being generated.
        None, and never an answer, where there is nothing to ask: no engine loaded (loading,
        failed, died) or a server as the engine (its tokenizer is not asked)."""
        if self._info is None or self._info.server:
            return None
        return self.supervisor.count_tokens(texts, lambda generation, m: self._enqueue(generation, m, None))

    def reply(self, request_id: int) -> Reply | None:
        """The buffer of a reply not yet finished or failed (the same object every signal carries)."""
        return self._replies.get(request_id)

    @Slot()
    def stop(self) -> None:
        """Stop the window's reply being generated (one queued behind it only if stopped again);
        never a reply another user of the engine (the API) asked for."""
        if self._replies:
            self.supervisor.cancel(next(iter(self._replies)))

    @Slot()
    def shutdown(self) -> None:
        self.supervisor.replace_engine("the app is closing", timeout_s=3.0)
        self._info = None
        self._fail_pending("the app is closing", engine_died=True)

    def _enqueue(self, generation: int, message: HostMessage, reply: Reply | None) -> None:
        """Reader thread: queue a message and wake the GUI thread if it is not already woken."""
        with self._lock:
            self._inbox.append((generation, message, reply))
            if self._is_wake_pending:
                return
            self._is_wake_pending = True
        self._woke.emit()

    @Slot()
    def on_self_woke(self) -> None:
        if self._flush_timer.isActive():
            return
        since_ms = (time.monotonic() - self._last_flush_s) * 1000
        self._flush_timer.start(max(0, int(FLUSH_INTERVAL_MS - since_ms)))

    def _flush(self) -> None:
        self._last_flush_s = time.monotonic()
        with self._lock:
            messages = list(self._inbox)
            self._inbox.clear()
            self._is_wake_pending = False
        # The reply that pieces are being appended to, its length before this drain, its new stats.
        current: tuple[Reply, int, list[Stats]] | None = None

        def announce() -> None:
            nonlocal current
            if current is not None:
                reply, start, stats = current
                if len(reply) != start or stats:
                    self.reply_progressed.emit(ReplyProgress(reply, start, tuple(stats)))
            current = None

        deadline = time.perf_counter() + DRAIN_BUDGET_S
        for i, (generation, message, owner) in enumerate(messages):
            if i % 128 == 127 and time.perf_counter() > deadline:
                # A backlog (an engine faster than the window): the rest in the next turn of the
                # event loop, so that one drain never holds the window for long.
                with self._lock:
                    self._inbox.extendleft(reversed(messages[i:]))
                    self._is_wake_pending = True  # the timer below is the wake-up
                self._flush_timer.start(1)  # not 0: Qt would run it before due timers and input
                break
            if owner is None and generation < self.supervisor.generation:
                continue  # news of an engine since replaced
            if isinstance(message, ReplyEvents):
                reply = self._replies.get(message.request_id)
                if reply is None:
                    continue  # already settled (failed when its engine died)
                if current is None or current[0] is not reply:
                    announce()
                    current = (reply, len(reply), [])
                for event in message.events:
                    if isinstance(event, Finished):  # always a batch's last
                        announce()
                        reply.finish(event)
                        self._settle(message.request_id)
                        self.reply_finished.emit(reply)
                        break
                    reply.add(event)
                    if isinstance(event, Stats):
                        current[2].append(event)
                continue
            announce()
            if owner is not None and isinstance(message, WorkerDied):
                self._fail(owner.request_id, message.sentence)  # its engine is gone
            else:
                self._dispatch(message)
        announce()

    def _fail(self, request_id: int, sentence: str) -> None:
        if self._settle(request_id) is not None:
            self.reply_failed.emit(request_id, Failure(ErrorKind.ENGINE_STOPPED, sentence), True)

    def _dispatch(self, message: HostMessage) -> None:
        match message:
            case LoadProgressed(stage=stage, fraction=fraction):
                self.load_progressed.emit(stage, -1.0 if fraction is None else fraction)
            case EngineLoaded(info=info):
                self._info = info
                self.engine_loaded.emit(info)
            case EngineFailed(failure=failure):
                self.engine_failed.emit(failure)
            case DraftChanged(info=info):
                self._info = info
                self.draft_changed.emit(info)
            case DraftFailed(failure=failure):
                self.draft_failed.emit(failure)
            case ReplyStarted() | ReplyReading() if message.request_id in self._replies:
                signal = self.reply_started if isinstance(message, ReplyStarted) else self.reply_reading
                signal.emit(message)
            case ReplyFailed(request_id=request_id, failure=failure):
                if self._settle(request_id) is not None:
                    self.reply_failed.emit(request_id, failure, False)
            case WorkerDied(sentence=sentence):  # the replies it owed fail through their own routes
                self._info = None
                self.engine_died.emit(Failure(ErrorKind.ENGINE_STOPPED, sentence))
            case TokensCounted(request_id=request_id, counts=counts):
                self.tokens_counted.emit(request_id, counts)
            case TokenCountFailed() | ReplyStarted() | ReplyReading() | ReplyEvents():
                pass  # a failed count: the asker keeps its estimate; a reply's events: in _flush
            case _:
                assert_never(message)

    def _settle(self, request_id: int) -> Reply | None:
        """A reply ended: its buffer let go (None where it was settled already), the window told
        once none is pending."""
        reply = self._replies.pop(request_id, None)
        if reply is not None and not self._replies:
            self.busy_changed.emit(False)
        return reply

    def _fail_pending(self, sentence: str, engine_died: bool) -> None:
        pending = list(self._replies)
        self._replies.clear()
        failure = Failure(ErrorKind.ENGINE_STOPPED, sentence)
        for request_id in pending:
            self.reply_failed.emit(request_id, failure, engine_died)
        if pending:
            self.busy_changed.emit(False)
