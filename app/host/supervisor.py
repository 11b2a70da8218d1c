"""One supervisor of the engine's process for every user of it: the window (app.host.controller)
and the API server (app.api.serve), alone in `tandem serve` or beside the window (Serve API).

It starts the worker (app.host.worker.WorkerProcess, or app.host.remote_worker.RemoteWorker for
an engine on a server), loads it with the last configuration, starts a fresh one by itself when
the last one died, routes each reply's messages to whoever asked for that reply (by request id),
and fails the replies a dead or replaced engine owed. Stop belongs to one request:
cancel(request_id) never touches another user's reply. Token counts are routed the same way
(count_tokens); a dead or replaced engine's owed counts are dropped: the asker keeps its estimate.

Listeners are called on the worker's reader thread (or on the caller's thread, for what the
supervisor decides itself: a replaced engine), with the supervisor's generation at the time; each
listener moves the message to its own thread (the window's event loop, the server's asyncio loop).
This module imports no Qt.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, assert_never

from app.host.messages import (
    CountMessage,
    DraftChanged,
    DraftFailed,
    EngineFailed,
    EngineInfo,
    EngineLoaded,
    EngineNews,
    HostMessage,
    LoadProgressed,
    LoadRequest,
    ReplyEvents,
    ReplyFailed,
    ReplyMessage,
    ReplyReading,
    ReplyRequest,
    ReplyStarted,
    SetDraftRequest,
    TokenCountFailed,
    TokenCountRequest,
    TokensCounted,
    WorkerDied,
    WorkerRequest,
)
from app.host.worker import WorkerProcess, death_sentence
from engine.config import DraftChoice, EngineConfig
from engine.errors import Failure, TandemError

log = logging.getLogger(__name__)

EngineMessage = EngineNews | WorkerDied


class EngineProcess(Protocol):
    """What the supervisor needs of the engine's process (WorkerProcess, RemoteWorker, or a test's
    stand-in); made with an on_message that it calls, on a thread of its own, with every message."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exitcode(self) -> int | None: ...

    def start(self) -> None: ...

    def is_alive(self) -> bool: ...

    def send(self, request: WorkerRequest) -> None: ...

    def cancel(self, request_id: int) -> None: ...

    def shutdown(self, timeout_s: float = 3.0) -> None: ...


WorkerFactory = Callable[[Callable[[HostMessage], None]], EngineProcess]
# listener(generation, message): an engine's news, or one reply's messages (then WorkerDied
# where the engine ended before the reply did).
EngineListener = Callable[[int, EngineMessage], None]
ReplyListener = Callable[[int, ReplyMessage | WorkerDied], None]
CountListener = Callable[[int, CountMessage], None]


class EngineSupervisor:
    def __init__(self, worker_factory: WorkerFactory = WorkerProcess) -> None:
        self._factory = worker_factory
        self._lock = threading.RLock()
        self._worker: EngineProcess | None = None
        self.generation = 0  # which worker's messages count; bumped whenever one is replaced or dies
        self.config: EngineConfig | None = None
        self.info: EngineInfo | None = None  # the loaded engine (None: loading, failed, died, replaced)
        self.load_error = "no model is loaded"
        self._changed = threading.Condition(self._lock)  # notified whenever a load ends
        self.is_loading = False  # a load was asked for and has not ended (loaded, failed, died)
        self.n_loads_ended = 0  # wait_loaded(after=...) waits for the next one
        self._routes: dict[int, ReplyListener] = {}
        self._count_routes: dict[int, CountListener] = {}
        self._dead: list[EngineProcess] = []  # found dead, not reaped yet
        self._listeners: list[EngineListener] = []
        self._next_request_id = 1
        # Earlier answers handed to every engine this starts, for drafting (LoadRequest.earlier).
        self.earlier_exchanges: Callable[[], tuple[tuple[str, str], ...]] = tuple
        # Every engine this starts grows llama.cpp's logits buffer before it is loaded
        # (LoadRequest.grow_outputs): set by `tandem serve`, which listens once loaded.
        self.grow_outputs_at_load = False

    # ---- state

    @property
    def pid(self) -> int | None:
        worker = self._worker
        return worker.pid if worker else None

    def listen(self, listener: EngineListener) -> None:
        """Be told of every engine message (loads, drafts, deaths), for as long as the supervisor lives."""
        with self._lock:
            self._listeners.append(listener)

    # ---- requests

    def load(self, config: EngineConfig) -> None:
        """Load a configuration (an empty target_path: the embedded default model), in the running
        engine or a fresh one."""
        with self._lock:
            self.config = config
            self.info = None
            self.is_loading = True
            died = self._settle_dead_worker()
            self._ensure_worker(send_load=False)
            assert self._worker is not None
            self._worker.send(self._load_request(config))
        self._announce(died)

    def set_draft(self, draft: DraftChoice) -> None:
        """Switch speculation; applies from the next reply."""
        with self._lock:
            if self.config is None:
                return
            self.config = replace(self.config, draft=draft)
            if self._worker is not None and self._worker.is_alive():
                self._worker.send(SetDraftRequest(draft))

    def submit(self, request: ReplyRequest, listener: ReplyListener) -> int:
        """Queue a reply (its request_id is given here); returns the id. Replies run one after
        the other, whoever sent them; the listener gets this reply's messages only."""
        with self._lock:
            died = self._settle_dead_worker()
            fresh = self._ensure_worker(send_load=True)
            assert self._worker is not None
            request_id = self._next_request_id
            self._next_request_id += 1
            self._routes[request_id] = listener
            self._worker.send(replace(request, request_id=request_id))
            listeners = list(self._listeners)
        self._announce(died)
        if fresh is not None:
            for engine_listener in listeners:
                engine_listener(fresh, LoadProgressed("Starting a fresh engine…"))
        return request_id

    def count_tokens(self, texts: tuple[str, ...], listener: CountListener) -> int | None:
        """Ask the loaded engine for the texts' token counts (app.host.messages.TokenCountRequest);
        returns the request id its answer carries, or None where no engine is loaded and running
        (loading, failed, dead): nothing is started for a count. Answered beside a reply, not
        after it; an engine that dies first never answers."""
        with self._lock:
            worker = self._worker
            if worker is None or self.info is None or not worker.is_alive():
                return None
            request_id = self._next_request_id
            self._next_request_id += 1
            self._count_routes[request_id] = listener
            worker.send(TokenCountRequest(request_id, texts))
        return request_id

    def cancel(self, request_id: int) -> None:
        """Stop one reply: generating, or still queued (it then ends "cancelled" as it starts)."""
        worker = self._worker
        if worker is not None and request_id in self._routes:
            worker.cancel(request_id)

    def forget(self, request_id: int) -> None:
        """Its asker wants no more of a reply's messages (they are dropped)."""
        with self._lock:
            self._routes.pop(request_id, None)

    def replace_engine(
        self, sentence: str, factory: WorkerFactory | None = None, timeout_s: float = 1.0
    ) -> None:
        """End the engine now (a cancelled reply that never stopped, an engine on a server chosen
        instead, the app closing): every reply it owed fails with the sentence, and the next
        request or load starts a fresh one (made by `factory` from now on, if given). Engine
        listeners are not told: the caller decided it."""
        with self._lock:
            worker = self._worker
            if factory is not None:
                self._factory = factory
            generation, died, routes = self._died(WorkerDied(None, sentence))
        if worker is not None:
            worker.shutdown(timeout_s=timeout_s)
        for listener in routes.values():
            listener(generation, died)

    def wait_loaded(self, timeout_s: float | None = None, after: int | None = None) -> EngineInfo:
        """Block until the load asked for ends (after=n: until a load ends after the n-th, or an
        engine is loaded); TandemError with the engine's sentence if it failed or timed out."""
        with self._changed:
            if after is None:
                self._changed.wait_for(lambda: not self.is_loading, timeout_s)
            else:
                self._changed.wait_for(lambda: self.info is not None or self.n_loads_ended > after, timeout_s)
            info = self.info
        if info is None:
            raise TandemError(self.load_error or "the engine did not load in time")
        return info

    def _load_ended(self) -> None:
        """(lock held)"""
        self.is_loading = False
        self.n_loads_ended += 1
        self._changed.notify_all()

    # ---- the worker

    def _ensure_worker(self, send_load: bool) -> int | None:
        """(lock held) A running worker; a fresh one loading the last configuration if none runs.
        Returns the fresh one's generation where it was sent a load (its listeners are told)."""
        if self._worker is not None:
            return None
        self.generation += 1
        generation = self.generation
        self._worker = self._factory(lambda message: self._on_message(generation, message))
        self._worker.start()
        if send_load and self.config is not None:
            self.info = None
            self.is_loading = True
            self._worker.send(self._load_request(self.config))
            return generation
        return None

    def _load_request(self, config: EngineConfig) -> LoadRequest:
        return LoadRequest(config, self.earlier_exchanges(), grow_outputs=self.grow_outputs_at_load)

    def _settle_dead_worker(self) -> tuple[int, WorkerDied, dict[int, ReplyListener]] | None:
        """(lock held) A worker found dead whose death its reader has not reported yet: settle it
        now (its WorkerDied, when it comes, is from a past generation and dropped)."""
        worker = self._worker
        if worker is None or worker.is_alive():
            return None
        exitcode = worker.exitcode
        self._dead.append(worker)  # reaped outside the lock (_announce): its reader may be waiting on it
        return self._died(WorkerDied(exitcode, death_sentence(exitcode)))

    def _died(self, message: WorkerDied) -> tuple[int, WorkerDied, dict[int, ReplyListener]]:
        """(lock held) The engine is gone: what it owed, to be told outside the lock (_announce)."""
        self._worker = None
        self.info = None
        self.generation += 1
        self.load_error = message.sentence
        self._load_ended()
        routes, self._routes = self._routes, {}
        self._count_routes.clear()
        return self.generation, message, routes

    def _announce(self, died: tuple[int, WorkerDied, dict[int, ReplyListener]] | None) -> None:
        with self._lock:
            dead, self._dead = self._dead, []
        for worker in dead:
            worker.shutdown(timeout_s=0.5)
        if died is None:
            return
        generation, message, routes = died
        log.warning("engine died: %s", message.sentence)
        # The engine's listeners first: a window says why before it settles the replies.
        for listener in list(self._listeners):
            listener(generation, message)
        for route in routes.values():
            route(generation, message)

    def _on_message(self, generation: int, message: HostMessage) -> None:
        """The worker's reader thread: route one message."""
        route: ReplyListener | None = None
        count_route: CountListener | None = None
        died = None
        with self._lock:
            if generation != self.generation:
                return  # from a worker that was replaced
            match message:
                case ReplyStarted(request_id=request_id) | ReplyReading(request_id=request_id):
                    route = self._routes.get(request_id)
                case ReplyEvents(request_id=request_id):
                    route = self._routes.get(request_id)
                    if message.finished is not None:
                        self._routes.pop(request_id, None)
                case ReplyFailed(request_id=request_id):
                    route = self._routes.pop(request_id, None)
                case TokensCounted(request_id=request_id) | TokenCountFailed(request_id=request_id):
                    count_route = self._count_routes.pop(request_id, None)
                case EngineLoaded(info=info) | DraftChanged(info=info):
                    self.info = info
                    if self.config is not None:
                        self.config = replace(self.config, target_path=info.target_path, draft=info.draft)
                    self._load_ended()
                case EngineFailed(failure=Failure(sentence=sentence)):
                    self.load_error = sentence
                    self._load_ended()
                case DraftFailed():
                    if self.config is not None and self.info is not None:
                        self.config = replace(self.config, draft=self.info.draft)
                case LoadProgressed():
                    pass
                case WorkerDied():
                    died = self._died(message)
                case unreachable:
                    assert_never(unreachable)
            listeners = list(self._listeners)
        if died is not None:
            self._announce(died)
            return
        if isinstance(message, CountMessage):
            if count_route is not None:
                count_route(generation, message)
        elif route is not None:
            assert isinstance(message, ReplyMessage)
            route(generation, message)
        elif not isinstance(message, ReplyMessage):
            for listener in listeners:
                listener(generation, message)
