"""The Qt side of the engine: drives the worker process and turns its messages into signals.

The GUI thread never waits on the engine. A reader thread (in WorkerProcess) receives every
message and appends it to a queue; the first message into an empty queue wakes the GUI thread
once, and a single-shot timer then drains the whole queue at most every FLUSH_INTERVAL_MS (the
worker already sends a reply's events in batches: app.host.worker.ReplyEvents). The text pieces of one drain are appended to their reply's one buffer (app.host.reply.Reply) and announced
by one ReplyProgress, so a model producing thousands of tokens a second costs the window about
40 repaints a second, and an idle engine costs nothing.

When the child dies (native crash, SIGKILL, out of memory) the replies it owed fail (kind
ENGINE_STOPPED), and the next request starts a fresh child with the last configuration by itself.
Failures reach the window as data: an engine.errors.Failure (kind, sentence, and for a refused
pair the rule and both values), never a bare sentence.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.host.reply import Reply, ReplyProgress
from app.host.worker import (
    ChatTurn,
    DraftChanged,
    DraftFailed,
    EngineFailed,
    EngineInfo,
    EngineLoaded,
    LoadProgressed,
    LoadRequest,
    ReplyEvents,
    ReplyFailed,
    ReplyRequest,
    ReplyStarted,
    SetDraftRequest,
    WorkerDied,
    WorkerProcess,
    death_sentence,
)
from engine.config import EngineConfig, SamplingParams
from engine.errors import ErrorKind, Failure
from engine.events import Finished, Stats

if TYPE_CHECKING:
    from app.host.remote_worker import RemoteTarget

__all__ = ["FLUSH_INTERVAL_MS", "EngineController", "Reply", "ReplyProgress"]

FLUSH_INTERVAL_MS = 25  # at most 40 display updates a second, at least 30 while text arrives
DRAIN_BUDGET_S = 0.005  # one drain handles messages for about this long, then yields the loop


class EngineHost(Protocol):
    """What the controller needs of the engine's process (app.host.worker.WorkerProcess); it calls
    the `on_message` it was made with, on a thread of its own, with every message."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    def start(self) -> None: ...

    def is_alive(self) -> bool: ...

    def send(self, request: object) -> None: ...

    def cancel(self) -> None: ...

    def shutdown(self, timeout_s: float = 3.0) -> None: ...


class EngineController(QObject):
    load_progressed = Signal(str, float)  # stage, fraction loaded (-1: not known)
    engine_loaded = Signal(object)  # EngineInfo
    engine_failed = Signal(object)  # engine.errors.Failure
    engine_died = Signal(object)  # engine.errors.Failure, kind ENGINE_STOPPED
    draft_changed = Signal(object)  # EngineInfo
    draft_failed = Signal(object)  # engine.errors.Failure
    reply_started = Signal(object)  # worker.ReplyStarted
    reply_progressed = Signal(object)  # app.host.reply.ReplyProgress
    reply_finished = Signal(object)  # app.host.reply.Reply, its `finished` set
    reply_failed = Signal(int, object, bool)  # request id, engine.errors.Failure, whether the engine died
    busy_changed = Signal(bool)
    _woke = Signal()  # emitted from the reader thread; queued to the GUI thread

    def __init__(
        self,
        parent: QObject | None = None,
        worker_factory: Callable[[Callable[[object], None]], EngineHost] = WorkerProcess,
    ) -> None:
        """worker_factory(on_message) makes the engine's process (tools.bench_gui passes a stand-in)."""
        super().__init__(parent)
        self._worker_factory = worker_factory
        self._local_factory = worker_factory
        self._remote: RemoteTarget | None = None  # the server used instead of this computer's engine
        self._worker: EngineHost | None = None
        self._generation = 0  # which worker the queued messages came from
        self._config: EngineConfig | None = None
        self._info: EngineInfo | None = None
        self._pending: list[int] = []
        self._replies: dict[int, Reply] = {}  # the buffers of the pending replies
        self._next_request_id = 1
        self._lock = threading.Lock()
        self._tap: Callable[[object], bool] | None = None  # another user of this engine (the API)
        # Earlier answers handed to every engine this starts, for drafting (LoadRequest.earlier).
        self.earlier_exchanges: Callable[[], tuple[tuple[str, str], ...]] = tuple
        self._inbox: deque[tuple[int, object]] = deque()
        self._is_wake_pending = False
        self._last_flush_s = 0.0
        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.timeout.connect(self._flush)
        self._woke.connect(self.on_self_woke)

    # ---- state

    @property
    def info(self) -> EngineInfo | None:
        return self._info

    @property
    def config(self) -> EngineConfig | None:
        return self._config

    @property
    def is_busy(self) -> bool:
        return bool(self._pending)

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker else None

    # ---- requests in

    @Slot(object)
    def load(self, config: EngineConfig) -> None:
        """Load a target/draft pair (an empty target_path: the embedded default model)."""
        self._config = config
        self._info = None
        self._ensure_worker(send_load=False)
        self.load_progressed.emit("Starting the engine…", -1.0)
        assert self._worker is not None
        self._worker.send(self._load_request(config))

    def _load_request(self, config: EngineConfig) -> LoadRequest:
        return LoadRequest(config, earlier=self.earlier_exchanges())

    def use_remote(self, target: RemoteTarget | None) -> None:
        """Use a server (app.host.remote_worker.RemoteTarget) as the engine, or None: this computer's.
        Applies from the next load; a change ends the current engine and what it owed."""
        if target == self._remote:
            return
        from functools import partial

        from app.host.remote_worker import RemoteWorker

        self._remote = target
        self._worker_factory = self._local_factory if target is None else partial(RemoteWorker, target=target)
        worker, self._worker = self._worker, None
        self._generation += 1
        self._info = None
        if worker is not None:
            worker.shutdown(timeout_s=1.0)
        self._fail_pending("the engine was changed", engine_died=True)

    @property
    def remote(self) -> RemoteTarget | None:
        return self._remote

    @Slot(object)
    def set_draft(self, draft: str | None) -> None:
        """Switch speculation ("ngram", a draft GGUF path, None); applies from the next reply."""
        if self._config is None:
            return
        self._config = replace(self._config, draft=draft)
        if self._worker is not None and self._worker.is_alive():
            self._worker.send(SetDraftRequest(draft))

    def start_reply(
        self,
        turns: tuple[ChatTurn, ...],
        system_prompt: str = "",
        params: SamplingParams | None = None,
        max_tokens: int = 512,
        speculate: bool | None = None,
        history_key: str = "",
        remember: bool = True,
    ) -> int:
        """Queue a reply; returns its request id. Replies run one after the other.
        remember=False: the reply neither drafts from earlier replies nor is kept (Compare)."""
        self._ensure_worker(send_load=True)
        assert self._worker is not None
        request_id = self._next_request_id
        self._next_request_id += 1
        was_busy = self.is_busy
        self._pending.append(request_id)
        self._replies[request_id] = Reply(request_id)
        self._worker.send(
            ReplyRequest(
                request_id=request_id,
                turns=turns,
                system_prompt=system_prompt,
                params=params or SamplingParams(),
                max_tokens=max_tokens,
                speculate=speculate,
                history_key=history_key,
                remember=remember,
            )
        )
        if not was_busy:
            self.busy_changed.emit(True)
        return request_id

    def reply(self, request_id: int) -> Reply | None:
        """The buffer of a reply not yet finished or failed (the same object every signal carries)."""
        return self._replies.get(request_id)

    @Slot()
    def stop(self) -> None:
        """Stop the reply being generated (and any queued behind it only if stopped again)."""
        if self._worker is not None:
            self._worker.cancel()

    @Slot()
    def shutdown(self) -> None:
        worker, self._worker = self._worker, None
        self._generation += 1
        if worker is not None:
            worker.shutdown()
        self._fail_pending("the app is closing", engine_died=True)

    # ---- another user of the same engine (the window's API server, app.api.serve.SharedEngineHost)

    def set_tap(self, tap: Callable[[object], bool] | None) -> None:
        """tap(message) sees every worker message first, on the reader thread; the messages it
        returns True for (replies to its own requests) are not the window's."""
        self._tap = tap

    def send_to_worker(self, request: object) -> bool:
        """Send another user's request to the engine (any thread); False when no engine runs."""
        worker = self._worker
        if worker is None or not worker.is_alive():
            return False
        worker.send(request)
        return True

    # ---- the worker

    def _ensure_worker(self, send_load: bool) -> None:
        if self._worker is not None and self._worker.is_alive():
            return
        if self._worker is not None:
            # Dead, but its WorkerDied is still queued: settle the replies it owed first.
            exitcode = self._worker.exitcode
            self._worker.shutdown(timeout_s=0.5)
            self._dispatch(WorkerDied(exitcode, death_sentence(exitcode)))
        self._generation += 1
        generation = self._generation
        self._worker = self._worker_factory(lambda message: self._enqueue(generation, message))
        self._worker.start()
        if send_load and self._config is not None:
            self.load_progressed.emit("Starting a fresh engine…", -1.0)
            self._worker.send(self._load_request(self._config))

    def _enqueue(self, generation: int, message: object) -> None:
        """Reader thread: queue a message and wake the GUI thread if it is not already woken."""
        tap = self._tap
        if tap is not None and tap(message):
            return
        with self._lock:
            self._inbox.append((generation, message))
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
        for i, (generation, message) in enumerate(messages):
            if i % 128 == 127 and time.perf_counter() > deadline:
                # A backlog (an engine faster than the window): the rest in the next turn of the
                # event loop, so that one drain never holds the window for long.
                with self._lock:
                    self._inbox.extendleft(reversed(messages[i:]))
                    self._is_wake_pending = True  # the timer below is the wake-up
                self._flush_timer.start(1)  # not 0: Qt would run it before due timers and input
                break
            if generation != self._generation:
                continue  # from a worker that was replaced
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
                        del self._replies[message.request_id]
                        self._finish(message.request_id)
                        self.reply_finished.emit(reply)
                        break
                    reply.add(event)
                    if isinstance(event, Stats):
                        current[2].append(event)
                continue
            announce()
            self._dispatch(message)
        announce()

    def _dispatch(self, message: object) -> None:
        if isinstance(message, LoadProgressed):
            fraction = message.fraction
            self.load_progressed.emit(message.stage, -1.0 if fraction is None else fraction)
        elif isinstance(message, EngineLoaded):
            self._info = message.info
            if self._config is not None:
                self._config = replace(
                    self._config, target_path=message.info.target_path, draft=message.info.draft
                )
            self.engine_loaded.emit(message.info)
        elif isinstance(message, EngineFailed):
            self.engine_failed.emit(Failure(message.kind, message.sentence, message.pair))
        elif isinstance(message, DraftChanged):
            self._info = message.info
            self.draft_changed.emit(message.info)
        elif isinstance(message, DraftFailed):
            if self._config is not None and self._info is not None:
                self._config = replace(self._config, draft=self._info.draft)
            self.draft_failed.emit(Failure(message.kind, message.sentence, message.pair))
        elif isinstance(message, ReplyStarted):
            self.reply_started.emit(message)
        elif isinstance(message, ReplyFailed):
            self._replies.pop(message.request_id, None)
            self._finish(message.request_id)
            failure = Failure(message.kind, message.sentence, message.pair)
            self.reply_failed.emit(message.request_id, failure, False)
        elif isinstance(message, WorkerDied):
            self._worker = None
            self._info = None
            self._generation += 1
            self._fail_pending(message.sentence, engine_died=True)
            self.engine_died.emit(Failure(ErrorKind.ENGINE_STOPPED, message.sentence))

    def _finish(self, request_id: int) -> None:
        if request_id in self._pending:
            self._pending.remove(request_id)
            if not self._pending:
                self.busy_changed.emit(False)

    def _fail_pending(self, sentence: str, engine_died: bool) -> None:
        pending, self._pending = self._pending, []
        self._replies.clear()
        failure = Failure(ErrorKind.ENGINE_STOPPED, sentence)
        for request_id in pending:
            self.reply_failed.emit(request_id, failure, engine_died)
        if pending:
            self.busy_changed.emit(False)
