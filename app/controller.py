"""The Qt side of the engine: drives the worker process and turns its messages into signals.

The GUI thread never waits on the engine. A reader thread (in WorkerProcess) receives every
message and appends it to a queue; the first message into an empty queue wakes the GUI thread
once, and a single-shot timer then drains the whole queue at most every FLUSH_INTERVAL_MS. The
text pieces of one drain are merged into one ReplyProgress, so a model producing thousands of
tokens a second costs the window about 40 repaints a second, and an idle engine costs nothing.

When the child dies (native crash, SIGKILL, out of memory) the replies it owed fail with a
sentence, and the next request starts a fresh child with the last configuration by itself.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.worker import (
    ChatTurn,
    DraftChanged,
    DraftFailed,
    EngineFailed,
    EngineInfo,
    EngineLoaded,
    LoadProgressed,
    LoadRequest,
    ReplyEvent,
    ReplyFailed,
    ReplyRequest,
    ReplyStarted,
    SetDraftRequest,
    WorkerDied,
    WorkerProcess,
    death_sentence,
)
from engine.config import EngineConfig, SamplingParams
from engine.events import Finished, Stats, TextPiece

FLUSH_INTERVAL_MS = 25  # at most 40 display updates a second, at least 30 while text arrives


@dataclass(frozen=True)
class ReplyProgress:
    """Everything one reply produced since the last display update."""

    request_id: int
    pieces: tuple[tuple[str, bool], ...]  # (text, is_draft), neighbours of the same origin merged
    n_tokens: int
    stats: tuple[Stats, ...]  # the snapshots that arrived, oldest first (empty: none this time)


class _Batch:
    """Pieces and stats of one reply, gathered during one drain."""

    def __init__(self, request_id: int) -> None:
        self.request_id = request_id
        self.pieces: list[tuple[str, bool]] = []
        self.n_tokens = 0
        self.stats: list[Stats] = []

    def add_piece(self, piece: TextPiece) -> None:
        if self.pieces and self.pieces[-1][1] == piece.is_draft:
            self.pieces[-1] = (self.pieces[-1][0] + piece.text, piece.is_draft)
        else:
            self.pieces.append((piece.text, piece.is_draft))
        self.n_tokens += piece.n_tokens

    def progress(self) -> ReplyProgress:
        return ReplyProgress(self.request_id, tuple(self.pieces), self.n_tokens, tuple(self.stats))


class EngineController(QObject):
    load_progressed = Signal(str, float)  # stage, fraction loaded (-1: not known)
    engine_loaded = Signal(object)  # EngineInfo
    engine_failed = Signal(str)
    engine_died = Signal(str)
    draft_changed = Signal(object)  # EngineInfo
    draft_failed = Signal(str)
    reply_started = Signal(object)  # worker.ReplyStarted
    reply_progressed = Signal(object)  # ReplyProgress
    reply_finished = Signal(int, object)  # request id, engine.events.Finished
    reply_failed = Signal(int, str, bool)  # request id, sentence, whether the engine died
    busy_changed = Signal(bool)
    _woke = Signal()  # emitted from the reader thread; queued to the GUI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._worker: WorkerProcess | None = None
        self._generation = 0  # which worker the queued messages came from
        self._config: EngineConfig | None = None
        self._info: EngineInfo | None = None
        self._pending: list[int] = []
        self._next_request_id = 1
        self._lock = threading.Lock()
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
        self._worker.send(LoadRequest(config))

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
    ) -> int:
        """Queue a reply; returns its request id. Replies run one after the other."""
        self._ensure_worker(send_load=True)
        assert self._worker is not None
        request_id = self._next_request_id
        self._next_request_id += 1
        was_busy = self.is_busy
        self._pending.append(request_id)
        self._worker.send(
            ReplyRequest(
                request_id=request_id,
                turns=turns,
                system_prompt=system_prompt,
                params=params or SamplingParams(),
                max_tokens=max_tokens,
                speculate=speculate,
                history_key=history_key,
            )
        )
        if not was_busy:
            self.busy_changed.emit(True)
        return request_id

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

    def kill_worker_for_test(self) -> None:
        """SIGKILL the child, as the OOM killer would (tests only)."""
        import os
        import signal

        if self._worker is not None and self._worker.pid:
            os.kill(self._worker.pid, signal.SIGKILL)

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
        self._worker = WorkerProcess(lambda message: self._enqueue(generation, message))
        self._worker.start()
        if send_load and self._config is not None:
            self.load_progressed.emit("Starting a fresh engine…", -1.0)
            self._worker.send(LoadRequest(self._config))

    def _enqueue(self, generation: int, message: object) -> None:
        """Reader thread: queue a message and wake the GUI thread if it is not already woken."""
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
        batch: _Batch | None = None

        def emit_batch() -> None:
            nonlocal batch
            if batch is not None and (batch.pieces or batch.stats):
                self.reply_progressed.emit(batch.progress())
            batch = None

        for generation, message in messages:
            if generation != self._generation:
                continue  # from a worker that was replaced
            if isinstance(message, ReplyEvent):
                event = message.event
                if isinstance(event, Finished):
                    emit_batch()
                    self._finish(message.request_id)
                    self.reply_finished.emit(message.request_id, event)
                    continue
                if batch is None or batch.request_id != message.request_id:
                    emit_batch()
                    batch = _Batch(message.request_id)
                if isinstance(event, TextPiece):
                    batch.add_piece(event)
                elif isinstance(event, Stats):
                    batch.stats.append(event)
                continue
            emit_batch()
            self._dispatch(message)
        emit_batch()

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
            self.engine_failed.emit(message.sentence)
        elif isinstance(message, DraftChanged):
            self._info = message.info
            self.draft_changed.emit(message.info)
        elif isinstance(message, DraftFailed):
            if self._config is not None and self._info is not None:
                self._config = replace(self._config, draft=self._info.draft)
            self.draft_failed.emit(message.sentence)
        elif isinstance(message, ReplyStarted):
            self.reply_started.emit(message)
        elif isinstance(message, ReplyFailed):
            self._finish(message.request_id)
            self.reply_failed.emit(message.request_id, message.sentence, False)
        elif isinstance(message, WorkerDied):
            self._worker = None
            self._info = None
            self._generation += 1
            self._fail_pending(message.sentence, engine_died=True)
            self.engine_died.emit(message.sentence)

    def _finish(self, request_id: int) -> None:
        if request_id in self._pending:
            self._pending.remove(request_id)
            if not self._pending:
                self.busy_changed.emit(False)

    def _fail_pending(self, sentence: str, engine_died: bool) -> None:
        pending, self._pending = self._pending, []
        for request_id in pending:
            self.reply_failed.emit(request_id, sentence, engine_died)
        if pending:
            self.busy_changed.emit(False)
