"""The engine's worker process seen from the API's event loop: ApiEngine runs the API's replies
one at a time through an EngineSupervisor (app/host/supervisor.py), up to `--queue` more wait,
beyond that a request gets 503; each reply's messages reach the loop through a Job."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from app.api.requests import ApiError, GenerationRequest
from app.api.responses import say
from app.host.messages import (
    EngineInfo,
    ReplyEvents,
    ReplyFailed,
    ReplyMessage,
    ReplyRequest,
    WorkerDied,
)
from app.host.supervisor import EngineSupervisor
from engine.config import EngineConfig
from engine.errors import TandemError

DEFAULT_QUEUE = 8  # requests that may wait while one generates
RETRY_AFTER_S = 2
CANCEL_GRACE_S = 30.0  # a cancelled reply must end within this, or its engine is replaced


class Job:
    """One reply: its messages, handed from the worker's reader thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.request_id = 0  # given by the supervisor
        self.loop = loop
        self.queue: asyncio.Queue[ReplyMessage | WorkerDied] = asyncio.Queue()
        self.done = False

    def put(self, generation: int, message: ReplyMessage | WorkerDied) -> None:  # reader thread
        self.loop.call_soon_threadsafe(self.queue.put_nowait, message)

    async def get(self) -> ReplyMessage | WorkerDied:
        return self._seen(await self.queue.get())

    def drain(self) -> list[ReplyMessage | WorkerDied]:
        """Every message that has arrived already, without waiting."""
        out = []
        while not self.queue.empty():
            out.append(self._seen(self.queue.get_nowait()))
        return out

    def _seen(self, message: ReplyMessage | WorkerDied) -> ReplyMessage | WorkerDied:
        if isinstance(message, ReplyFailed | WorkerDied) or (
            isinstance(message, ReplyEvents) and message.finished is not None
        ):
            self.done = True  # the reply's end
        return message


class ApiEngine:
    """The engine as the API serves it: an EngineSupervisor's (app.host.supervisor), its own in
    `tandem serve`, the window's beside it (the Serve API switch). The API's replies run one at a
    time, up to max_queue more wait, and beyond that a request gets 503.

    Owning the engine (`tandem serve`), a dead engine is replaced by the next request and a
    cancelled reply that never stops gets its engine replaced; beside the window, the window owns
    it: a missing engine is asked of the window (`want_engine`, on its own thread) and waited for.
    """

    def __init__(
        self,
        supervisor: EngineSupervisor,
        config: EngineConfig | None = None,
        max_queue: int = DEFAULT_QUEUE,
        want_engine: Callable[[], None] | None = None,
    ) -> None:
        """config: the engine to load and reload (`tandem serve`); want_engine instead: the owner
        loads it (the window)."""
        self.supervisor = supervisor
        self.owns_engine = want_engine is None
        if self.owns_engine:  # its own engine: it listens once loaded, the buffer grown
            supervisor.grow_outputs_at_load = True
        # A big model may take long to load (a failure ends the wait anyway); the window's: 5 min.
        self.load_timeout_s = None if self.owns_engine else 300.0
        self.config = config
        self.max_queue = max_queue
        self._want_engine = want_engine
        self.created = int(time.time())
        self._job: Job | None = None
        self._occupied = 0  # the running request and those waiting (event loop only)
        self.turn = asyncio.Lock()  # the reply generating holds it; the others wait their turn

    # -- the engine (owned)

    def start(self) -> None:
        """Load the engine (supervisor.wait_loaded() waits for it)."""
        assert self.config is not None
        self.supervisor.load(self.config)

    def shutdown(self) -> None:
        if self.owns_engine:
            self.supervisor.replace_engine("the server is stopping", timeout_s=3.0)

    async def ensure_engine(self) -> EngineInfo:
        """The loaded engine; a fresh one when the last died (the request waits for the load)."""
        info = self.supervisor.info
        if info is not None:
            return info
        n_ended = self.supervisor.n_loads_ended
        if self.owns_engine:
            say("tandem serve: starting a fresh engine")
            await asyncio.to_thread(self.start)
        else:
            assert self._want_engine is not None
            self._want_engine()
        with contextlib.suppress(TandemError):
            await asyncio.to_thread(self.supervisor.wait_loaded, self.load_timeout_s, n_ended)
        info = self.supervisor.info
        if info is None:
            raise ApiError(
                500, f"the engine could not start: {self.supervisor.load_error}", kind="server_error"
            )
        return info

    # -- one reply at a time

    def reserve(self) -> None:
        """Take a place in line, or 503 when the line is full."""
        if self._occupied >= 1 + self.max_queue:
            raise ApiError(
                503,
                f"the server is busy: one reply is generating and {self.max_queue} more are waiting; retry later",
                kind="server_error",
                code="server_busy",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._occupied += 1

    def unreserve(self) -> None:
        self._occupied -= 1

    def load(self) -> dict[str, int]:
        """Requests generating now (0 or 1) and waiting for their turn."""
        generating = int(self._job is not None)
        return {"generating": generating, "waiting": max(0, self._occupied - generating)}

    def submit(self, request: GenerationRequest, info: EngineInfo) -> Job:
        job = Job(asyncio.get_running_loop())
        job.request_id = self.supervisor.submit(
            ReplyRequest(
                request_id=0,
                turns=request.turns,
                system_prompt=request.system_prompt,
                params=request.params,
                max_tokens=request.max_tokens or info.n_ctx,
                speculate=request.speculate,
                prompt=request.prompt,
                stop=request.stop,
            ),
            job.put,
        )
        self._job = job
        return job

    def cancel(self, job: Job) -> None:
        """Stop this job's reply only (the engine may be the window's, busy with its own)."""
        self.supervisor.cancel(job.request_id)

    def _give_up(self) -> None:
        """A cancelled reply did not stop in time."""
        if self.owns_engine:
            say("tandem serve: a cancelled reply did not stop; replacing the engine")
            self.supervisor.replace_engine("a cancelled reply did not stop; the engine was replaced")
        else:
            say("tandem serve: a cancelled reply did not stop in time")

    async def finish(self, job: Job) -> None:
        """Let the job end before the next one starts: cancel it if it still runs, and wait."""
        try:
            if not job.done:
                self.cancel(job)
                deadline = time.monotonic() + CANCEL_GRACE_S
                while not job.done:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._give_up()
                        break
                    try:
                        await asyncio.wait_for(job.get(), left)
                    except TimeoutError:
                        continue
        finally:
            self.supervisor.forget(job.request_id)
            if self._job is job:
                self._job = None
