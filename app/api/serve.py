"""The engine on an OpenAI-compatible HTTP API: the server of `tandem serve` (app/cli/serve.py)
and of the window's serve toggle (ui/settings/serve_toggle.py).

Built on Starlette (routing, requests, JSON responses) served by uvicorn: both are small, widely
used and maintained, and together they are the ASGI stack most Python model servers stand on,
so the HTTP parsing, keep-alive and shutdown are theirs, not ours. The two generation endpoints
are plain ASGI apps under Starlette's router: a generation needs the request's receive channel
for its whole life, to notice a client that leaves and cancel its reply within one step.

The engine runs in the same worker process the window uses (app/host/worker.py), under the same
supervisor (app/host/supervisor.py): a native crash in llama.cpp kills only that child, the
request it was serving gets a 500, and the next request starts a fresh engine. One generation runs at a time; up to `--queue` more wait their turn, and
beyond that a request gets 503 with Retry-After. The engine keeps its KV cache between requests,
so a request that shares a prefix with the one before (a chat's next turn) prefills only what
is new.

Speculation is reported the way existing clients read it: llama-server's `timings` object and
LM Studio's `stats`, on every response and on the last streamed chunk. A request may set
`"speculation": "off"` to be decoded plainly (to compare); the response's `speculation` says
what ran: "ngram", "draft" or "none". Each streamed text chunk also says which of its tokens the
draft wrote (`"tandem": {"drafted": bool, "n_tokens": int}`, an extension other clients ignore;
the window on a server tints from it), and `"timings_per_token": true` (llama-server's option)
adds `timings` to the text chunks as the engine reports them. A text chunk holds what the
worker sent in one message (app.host.messages.ReplyEvents: at most every 30 ms, the first text at
once), drafted and undrafted text in chunks of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import ipaddress
import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.host.messages import (
    ChatTurn,
    EngineInfo,
    ReplyEvents,
    ReplyFailed,
    ReplyMessage,
    ReplyRequest,
    ReplyStarted,
    WorkerDied,
)
from app.host.supervisor import EngineSupervisor
from engine.config import EngineConfig, SamplingParams
from engine.errors import TandemError
from engine.events import Finished, Stats, TextPiece

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
DEFAULT_QUEUE = 8  # requests that may wait while one generates
DEFAULT_TEMPERATURE = 0.8  # llama-server's default when a request names none
RETRY_AFTER_S = 2
CANCEL_GRACE_S = 30.0  # a cancelled reply must end within this, or its engine is replaced
MAX_BODY_BYTES = 32 * 1024 * 1024
# What one client, or all together, can hold (docs/trust.md "What a client can hold"): a
# connection that has not sent a whole request's headers within HEADER_TIMEOUT_S (a fresh one,
# or one kept alive after a reply) is closed; a body must arrive within BODY_TIMEOUT_S; at most
# MAX_CONNECTIONS are open (fewer where the open-file limit is low: half of it), half of them
# from one address (over either, the oldest idle one is closed to make room, else the new one
# is answered 503); bodies being read hold at most MAX_BODY_BYTES_READING between them. A place
# in the queue is taken only once the body is read, so slow uploads never hold one. The caps are
# large enough that 1,000 idle sockets are simply held until their timeout, beside the clients.
HEADER_TIMEOUT_S = 10.0
EVICT_GRACE_S = 1.0  # a connection this young is never closed to make room (its request may be unread)
BODY_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 2048
MAX_BODY_BYTES_READING = 128 * 1024 * 1024
OPEN_FILES_WANTED = 8192  # the soft limit of open files is raised to this where the hard one allows

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def say(line: str) -> None:
    """A line of the server's log (stderr), rate-limited by kind: a flood of requests cannot
    flood the log (app/library/logs.py)."""
    from app.library.logs import say_limited

    say_limited(line, sys.stderr)


# ---------------------------------------------------------------------------------------------
# Errors, the way OpenAI's API writes them


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    async def send(self, send: Send) -> None:
        await _send_json(send, self.status, self.body(), self.headers)


async def _send_json(send: Send, status: int, obj: object, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(obj, ensure_ascii=False).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


# ---------------------------------------------------------------------------------------------
# Requests: checked field by field, every bad value a 400 naming the field


@dataclass
class GenerationRequest:
    chat: bool
    model: str | None
    turns: tuple[ChatTurn, ...] = ()
    system_prompt: str = ""
    prompt: str | None = None  # a text completion's raw prompt
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    speculate: bool | None = None
    timings_per_token: bool = False  # llama-server's option: `timings` on every streamed chunk


def _describe(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(body: dict[str, Any], key: str, lo: float, hi: float, integer: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        return None
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise _bad(f"'{key}' must be {kind} (got {_describe(value)})", key)
    if not lo <= value <= hi:
        raise _bad(f"'{key}' must be between {lo:g} and {hi:g} (got {value})", key)
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(f"'{key}' must be true or false (got {_describe(value)})", key)
    return value


def _text_content(content: object, where: str) -> str:
    """A message's content: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else None
                raise _bad(
                    f"{where}.content: only text parts are supported (got a part of type {_describe(kind)})",
                    "messages",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise _bad(
        f"{where}.content must be a string or a list of text parts (got {_describe(content)})", "messages"
    )


def parse_request(body: object, chat: bool, n_ctx: int) -> GenerationRequest:
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad(f"'model' must be a string (got {_describe(model)})", "model")
    n = _number(body, "n", 1, 128, integer=True)
    if n is not None and n != 1:
        raise _bad(f"'n' must be 1: this server generates one choice per request (got {n})", "n")
    if body.get("logprobs") not in (None, False, 0):
        raise _bad("'logprobs' is not supported by this server", "logprobs")
    if body.get("tools") or body.get("functions"):
        raise _bad("tools and function calling are not supported by this server", "tools")
    if body.get("echo") not in (None, False):
        raise _bad("'echo' is not supported by this server", "echo")
    if body.get("suffix") not in (None, ""):
        raise _bad("'suffix' is not supported by this server", "suffix")
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type") != "text"
    ):
        raise _bad(
            '\'response_format\' must be {"type": "text"}: structured output is not supported',
            "response_format",
        )
    for key in ("frequency_penalty", "presence_penalty"):
        _number(
            body, key, -2.0, 2.0
        )  # accepted for compatibility; llama.cpp's repeat_penalty is used instead

    temperature = _number(body, "temperature", 0.0, 5.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0:
        raise _bad("'top_p' must be more than 0 (got 0)", "top_p")
    top_k = _number(body, "top_k", 0, 1_000_000, integer=True)
    min_p = _number(body, "min_p", 0.0, 1.0)
    repeat_penalty = _number(body, "repeat_penalty", 0.0, 10.0)
    if repeat_penalty == 0:  # llama.cpp divides by it
        raise _bad("'repeat_penalty' must be more than 0 (got 0)", "repeat_penalty")
    seed = _number(body, "seed", -(2**63), 2**63 - 1, integer=True)
    defaults = SamplingParams()
    params = SamplingParams(
        temperature=DEFAULT_TEMPERATURE if temperature is None else float(temperature),
        top_k=defaults.top_k if top_k is None else int(top_k),
        top_p=defaults.top_p if top_p is None else float(top_p),
        min_p=defaults.min_p if min_p is None else float(min_p),
        repeat_penalty=defaults.repeat_penalty if repeat_penalty is None else float(repeat_penalty),
        seed=None if seed is None else int(seed) % (2**63),
    )

    max_tokens = _number(body, "max_completion_tokens", 1, 10**9, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, 10**9, integer=True)
    if max_tokens is not None and max_tokens > n_ctx:
        max_tokens = n_ctx  # the reply ends at the context's end anyway

    stop_value = body.get("stop")
    if stop_value is None:
        stop: tuple[str, ...] = ()
    elif isinstance(stop_value, str):
        stop = (stop_value,) if stop_value else ()
    elif isinstance(stop_value, list) and all(isinstance(s, str) for s in stop_value):
        if len(stop_value) > 16:
            raise _bad(f"'stop' may hold at most 16 strings (got {len(stop_value)})", "stop")
        stop = tuple(s for s in stop_value if s)
    else:
        raise _bad(f"'stop' must be a string or a list of strings (got {_describe(stop_value)})", "stop")

    stream = _flag(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _bad(f"'stream_options' must be an object (got {_describe(options)})", "stream_options")
        include_usage = _flag(options, "include_usage")

    speculation = body.get("speculation")
    if speculation not in (None, "on", "off"):
        raise _bad(f'\'speculation\' must be "on" or "off" (got {_describe(speculation)})', "speculation")

    request = GenerationRequest(
        chat=chat,
        model=model,
        params=params,
        max_tokens=max_tokens,
        stop=stop,
        stream=stream,
        include_usage=include_usage,
        speculate=False if speculation == "off" else None,
        timings_per_token=_flag(body, "timings_per_token"),
    )
    if chat:
        request.turns, request.system_prompt = _parse_messages(body.get("messages"))
    else:
        request.prompt = _parse_prompt(body.get("prompt"))
    return request


def _parse_messages(messages: object) -> tuple[tuple[ChatTurn, ...], str]:
    if not isinstance(messages, list) or not messages:
        raise _bad(f"'messages' must be a non-empty list of messages (got {_describe(messages)})", "messages")
    turns: list[ChatTurn] = []
    system: list[str] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _bad(
                f"{where} must be an object with 'role' and 'content' (got {_describe(message)})", "messages"
            )
        role = message.get("role")
        content = _text_content(message.get("content"), where)
        if role in ("system", "developer"):
            system.append(content)
        elif role in ("user", "assistant"):
            turns.append(ChatTurn(role, content))
        else:
            raise _bad(
                f'{where}.role must be "system", "developer", "user" or "assistant" (got {_describe(role)})',
                "messages",
            )
    if not turns:
        raise _bad("'messages' holds no user or assistant message", "messages")
    return tuple(turns), "\n\n".join(s for s in system if s.strip())


def _parse_prompt(prompt: object) -> str:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
        raise _bad("'prompt' may hold one prompt: this server generates one choice per request", "prompt")
    if not isinstance(prompt, str):
        raise _bad(f"'prompt' must be a string (got {_describe(prompt)})", "prompt")
    if not prompt:
        raise _bad("'prompt' is empty", "prompt")
    return prompt


# ---------------------------------------------------------------------------------------------
# The engine's worker process, seen from the event loop


class _Job:
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
        match message:
            case ReplyFailed() | WorkerDied():
                self.done = True
            case ReplyEvents() if message.finished is not None:
                self.done = True
        return message


class ApiEngine:
    """The engine as the API serves it: an EngineSupervisor's (app.host.supervisor), its own in
    `tandem serve`, the window's beside it (the Serve API switch). The API's replies run one at a
    time, up to max_queue more wait, and beyond that a request gets 503.

    Owning the engine (`tandem serve`), a dead engine is replaced by the next request and a
    cancelled reply that never stops gets its engine replaced; beside the window, the window owns
    it: a missing engine is asked of the window (`want_engine`, on its own thread) and waited for.
    """

    LOAD_TIMEOUT_S: float | None = None  # a big model may take long; a failure ends the wait anyway

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
        self.config = config
        self.max_queue = max_queue
        self.owns_engine = want_engine is None
        self._want_engine = want_engine
        self.created = int(time.time())
        self._job: _Job | None = None
        self._occupied = 0  # the running request and those waiting (event loop only)
        self._turn: asyncio.Lock | None = None
        if not self.owns_engine:
            self.LOAD_TIMEOUT_S = 300.0

    @property
    def info(self) -> EngineInfo | None:
        return self.supervisor.info

    @property
    def load_error(self) -> str:
        return self.supervisor.load_error

    @property
    def alive(self) -> bool:
        return self.supervisor.info is not None

    # -- the engine (owned)

    def start(self) -> None:
        """Load the engine (wait_loaded() waits for it)."""
        assert self.config is not None
        self.supervisor.load(self.config)

    def wait_loaded(self, timeout_s: float | None = None) -> EngineInfo:
        return self.supervisor.wait_loaded(timeout_s)

    def shutdown(self) -> None:
        if self.owns_engine:
            self.supervisor.shutdown("the server is stopping")

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
            await asyncio.to_thread(self.supervisor.wait_loaded, self.LOAD_TIMEOUT_S, n_ended)
        info = self.supervisor.info
        if info is None:
            raise ApiError(500, f"the engine could not start: {self.load_error}", kind="server_error")
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

    @property
    def turn(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()
        return self._turn

    def submit(self, request: GenerationRequest, info: EngineInfo) -> _Job:
        job = _Job(asyncio.get_running_loop())
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

    def cancel(self, job: _Job) -> None:
        """Stop this job's reply only (the engine may be the window's, busy with its own)."""
        self.supervisor.cancel(job.request_id)

    def _give_up(self) -> None:
        """A cancelled reply did not stop in time."""
        if self.owns_engine:
            say("tandem serve: a cancelled reply did not stop; replacing the engine")
            self.supervisor.replace_engine("a cancelled reply did not stop; the engine was replaced")
        else:
            say("tandem serve: a cancelled reply did not stop in time")

    async def finish(self, job: _Job) -> None:
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


def uvicorn_config(server: ApiServer, graceful_shutdown_s: int) -> Any:
    """How uvicorn runs the API, in `tandem serve` and in the window: quiet (Tandem logs one line
    a request itself), no lifespan events, open streams given graceful_shutdown_s to end; every
    connection bounded (bounded_protocol), the loggers that could flood rate-limited."""
    import uvicorn

    from app.library.logs import limit_logger

    server.connections.fit_to_open_files(raise_open_file_limit())
    for name in ("asyncio", "uvicorn.error", "uvicorn"):
        limit_logger(name)
    return uvicorn.Config(
        server.build_app(),
        http=bounded_protocol(server.connections, server.header_timeout_s),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=graceful_shutdown_s,
    )


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED) -> int:
    """Raise this process's soft limit of open files towards `wanted` (within the hard limit), as
    servers do at start: a desktop's usual 1024 leaves little room beside SQLite and the models.
    Returns the limit now (0 where the OS has none to change)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return int(soft)


_BUSY_BODY = json.dumps(
    {
        "error": {
            "message": "the server has too many connections open; retry later",
            "type": "server_error",
            "param": None,
            "code": "too_many_connections",
        }
    }
).encode()
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    + f"retry-after: {RETRY_AFTER_S}\r\nconnection: close\r\ncontent-length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class Connections:
    """The open connections of one server, oldest first, in all and by client address, and what
    the bounds did (counted for the log and the tests)."""

    def __init__(self, max_total: int = MAX_CONNECTIONS, max_per_client: int = MAX_CONNECTIONS // 2) -> None:
        self.max_total, self.max_per_client = max_total, max_per_client
        self.open: dict[Any, str] = {}  # connection -> client address (dicts keep insertion order)
        self.by_client: dict[str, dict[Any, None]] = {}
        self.n_refused = 0  # answered 503: full of connections that were all busy
        self.n_evicted = 0  # idle connections closed to make room
        self.n_timed_out = 0  # idle connections closed after HEADER_TIMEOUT_S
        self.body_bytes_reading = 0  # bytes of bodies being read now (MAX_BODY_BYTES_READING)

    def fit_to_open_files(self, limit: int) -> None:
        """At most half the process's open files for connections (the rest: SQLite, models, the
        window); limit 0: the OS sets none this process can read."""
        if limit > 0:
            self.max_total = max(64, min(self.max_total, limit // 2 - 32))
            self.max_per_client = max(32, min(self.max_per_client, self.max_total // 2))

    def admit(self, conn: Any, client: str) -> bool:
        """Take a new connection in, closing the oldest idle one where a bound is reached; False
        where every connection under the bound is busy with a request (the new one is refused)."""
        peers = self.by_client.get(client, {})
        if len(peers) >= self.max_per_client and not self._evict(list(peers)):
            self.n_refused += 1
            return False
        if len(self.open) >= self.max_total and not self._evict(list(self.open)):
            self.n_refused += 1
            return False
        self.open[conn] = client
        self.by_client.setdefault(client, {})[conn] = None
        return True

    def _evict(self, oldest_first: list[Any]) -> bool:
        """Close the oldest idle connection that has sent nothing at all, else the oldest that has
        not sent a whole request, else the oldest kept alive after a reply (a client between
        requests, which may be about to send one on it: closing those is the last resort)."""

        # A connection younger than EVICT_GRACE_S may have sent its request already, unread
        # while the server accepts a burst of sockets: never taken for an idle one.
        def rank(c: Any) -> int | None:  # 0 goes first; None: not to be closed
            if not c.is_idle():
                return None
            if c.has_replied():
                return 2
            if c.age_s() < EVICT_GRACE_S:
                return None
            return 1 if c.has_sent() else 0

        for wanted in (0, 1, 2):
            for conn in oldest_first:
                if rank(conn) == wanted:
                    self.n_evicted += 1
                    conn.close_idle()
                    return True
        return False

    def forget(self, conn: Any) -> None:
        client = self.open.pop(conn, None)
        if client is None:
            return
        peers = self.by_client.get(client)
        if peers is not None:
            peers.pop(conn, None)
            if not peers:
                del self.by_client[client]

    def take_body_bytes(self, n: int) -> None:
        if self.body_bytes_reading + n > MAX_BODY_BYTES_READING:
            raise ApiError(
                503,
                "the server is reading too many request bodies at once; retry later",
                kind="server_error",
                code="server_busy",
                headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
            )
        self.body_bytes_reading += n

    def give_body_bytes(self, n: int) -> None:
        self.body_bytes_reading -= n


def bounded_protocol(
    connections: Connections, header_timeout_s: float = HEADER_TIMEOUT_S
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with bounds on what a connection holds: admitted by `connections`
    (else answered 503 and closed), closed when it has sent no whole request's headers within
    HEADER_TIMEOUT_S of opening or of its last reply (uvicorn's own keep-alive timeout starts only
    after a reply, so a socket that never sends a request, or drips its headers, stayed open)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class BoundedProtocol(base):  # type: ignore[misc]
        _idle_timer: asyncio.TimerHandle | None = None
        _admitted = False
        _has_sent = False
        _opened_at = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._opened_at = self.loop.time()
            client = self.client[0] if self.client else "?"
            if not connections.admit(self, str(client)):
                transport.write(BUSY_RESPONSE)
                transport.close()
                return
            self._admitted = True
            self._arm()

        def is_idle(self) -> bool:
            """Not inside a request: no whole request's headers yet, or its reply is sent."""
            return self.cycle is None or bool(self.cycle.response_complete)

        def has_replied(self) -> bool:
            """Has a reply been sent on this connection (a client's kept-alive one)?"""
            return self.cycle is not None

        def age_s(self) -> float:
            return float(self.loop.time() - self._opened_at)

        def has_sent(self) -> bool:
            """Has the client sent any bytes on this connection?"""
            return self._has_sent

        def data_received(self, data: bytes) -> None:
            self._has_sent = True
            super().data_received(data)

        def close_idle(self) -> None:
            connections.forget(self)
            if not self.transport.is_closing():
                self.transport.close()

        def _arm(self) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = self.loop.call_later(header_timeout_s, self._on_idle_timeout)

        def _on_idle_timeout(self) -> None:
            self._idle_timer = None
            if self.is_idle() and not self.transport.is_closing():
                connections.n_timed_out += 1
                self.close_idle()
            # Inside a request: the body's deadline (BODY_TIMEOUT_S) and the reply govern it; the
            # timer starts again when the reply is sent.

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            connections.forget(self)
            super().connection_lost(exc)

    return BoundedProtocol


class BackgroundServer:
    """The API on a thread of its own (uvicorn without signal handlers), for the window."""

    def __init__(self, server: ApiServer, sock: socket.socket) -> None:
        import uvicorn

        server.listen_on(sock)
        self.sock = sock
        self._server = uvicorn.Server(uvicorn_config(server, graceful_shutdown_s=2))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="tandem-api", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self.sock.close()


# ---------------------------------------------------------------------------------------------
# Responses


def _timings(stats: Stats | None) -> dict[str, Any]:
    """llama-server's `timings` object."""
    if stats is None:
        return {}
    return {
        "cache_n": stats.n_prompt_tokens - stats.n_prefilled,
        "prompt_n": stats.n_prefilled,
        "prompt_ms": round(stats.prefill_s * 1000, 3),
        "prompt_per_token_ms": round(stats.prefill_s * 1000 / stats.n_prefilled, 3)
        if stats.n_prefilled
        else 0.0,
        "prompt_per_second": round(stats.prefill_tokens_per_s, 3),
        "predicted_n": stats.n_generated,
        "predicted_ms": round(stats.decode_s * 1000, 3),
        "predicted_per_token_ms": round(stats.decode_s * 1000 / stats.n_generated, 3)
        if stats.n_generated
        else 0.0,
        "predicted_per_second": round(stats.decode_tokens_per_s, 3),
        "draft_n": stats.n_drafted,
        "draft_n_accepted": stats.n_accepted,
    }


def _lmstudio_stats(stats: Stats | None, info: EngineInfo) -> dict[str, Any]:
    """LM Studio's `stats` object (its speculative-decoding counters)."""
    if stats is None:
        return {}
    return {
        "tokens_per_second": round(stats.decode_tokens_per_s, 3),
        "time_to_first_token": round(stats.prefill_s, 4),
        "generation_time": round(stats.decode_s, 4),
        "stop_reason": None,
        "draft_model": info.draft_name if stats.speculation != "none" else None,
        "total_draft_tokens_count": stats.n_drafted,
        "accepted_draft_tokens_count": stats.n_accepted,
        "rejected_draft_tokens_count": stats.n_drafted - stats.n_accepted,
        "ignored_draft_tokens_count": 0,
    }


def _usage(stats: Stats | None) -> dict[str, int]:
    n_prompt = stats.n_prompt_tokens if stats else 0
    n_generated = stats.n_generated if stats else 0
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_generated,
        "total_tokens": n_prompt + n_generated,
    }


FINISH_REASONS = {
    "length": "length",
    "context": "length",
    "eos": "stop",
    "stop": "stop",
    "cancelled": "stop",
    "repetition": "stop",
}


def model_id(info: EngineInfo) -> str:
    return Path(info.target_path).stem


class _Reply:
    """Builds the JSON of one response (whole or streamed) for a chat or a text completion."""

    def __init__(self, request: GenerationRequest, info: EngineInfo) -> None:
        self.request = request
        self.info = info
        prefix = "chatcmpl" if request.chat else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model_id(info)

    def _head(self, chunk: bool) -> dict[str, Any]:
        if self.request.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "tandem",
        }

    def extras(self, stats: Stats | None, stop_reason: str) -> dict[str, Any]:
        lm = _lmstudio_stats(stats, self.info)
        if lm:
            lm["stop_reason"] = stop_reason
        return {
            "timings": _timings(stats),
            "stats": lm,
            "speculation": stats.speculation if stats else "none",
        }

    def whole(self, finished: Finished) -> dict[str, Any]:
        reason = FINISH_REASONS.get(finished.stop_reason, "stop")
        if self.request.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": finished.text},
                "logprobs": None,
                "finish_reason": reason,
            }
        else:
            choice = {"index": 0, "text": finished.text, "logprobs": None, "finish_reason": reason}
        return {
            **self._head(chunk=False),
            "choices": [choice],
            "usage": _usage(finished.stats),
            **self.extras(finished.stats, finished.stop_reason),
        }

    def chunk(
        self, text: str | None, finish_reason: str | None = None, first: bool = False
    ) -> dict[str, Any]:
        if self.request.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        out = {**self._head(chunk=True), "choices": [choice]}
        if self.request.include_usage:
            out["usage"] = None
        return out

    def last_chunks(self, finished: Finished) -> list[dict[str, Any]]:
        reason = FINISH_REASONS.get(finished.stop_reason, "stop")
        extras = self.extras(finished.stats, finished.stop_reason)
        last = {**self.chunk(None, reason), **extras}
        if not self.request.include_usage:
            return [last]
        usage = {**self._head(chunk=True), "choices": [], "usage": _usage(finished.stats), **extras}
        return [last, usage]


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


# ---------------------------------------------------------------------------------------------
# The app


class ApiServer:
    def __init__(
        self,
        host: ApiEngine,
        api_key: str | None = None,
        allowed_origins: tuple[str, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
    ) -> None:
        """allowed_origins: web pages (scheme://host[:port], or "*") that may use the API from a
        browser; allowed_hosts: more Host names than the addresses served (or "*": any)."""
        self.host = host
        self.api_key = api_key
        self.allowed_origins = tuple(o.rstrip("/").lower() for o in allowed_origins)
        self.allowed_hosts = tuple(h.lower().rstrip(".") for h in allowed_hosts)
        self.address: tuple[str, int] | None = None  # where it listens (listen_on)
        # A reason to refuse every caller without a key (the window relaying an engine on another
        # server with the user's key for it), or None: asked on each request.
        self.needs_key: Callable[[], str | None] = lambda: None
        self.connections = Connections()  # what clients hold open (bounded_protocol)
        self.body_timeout_s = BODY_TIMEOUT_S  # a request's body must arrive within this
        self.header_timeout_s = HEADER_TIMEOUT_S  # an idle connection is closed after this

    def listen_on(self, sock: socket.socket) -> None:
        self.address = sock.getsockname()[:2]

    # -- checks shared by every endpoint

    def check_boundary(self, headers: Any) -> str | None:
        """Refuse what a web page can make a browser send: a Host other than the addresses served
        (DNS rebinding: a page on attacker.example whose name now points at 127.0.0.1), an Origin
        other than the server's own or one allowed. None: allowed; else the sentence of a 403.
        Clients that are not browsers send no Origin and the Host they were given."""
        host_header = headers.get("host")
        if host_header is not None and not self._is_served_host(host_header):
            name = _host_name(host_header)
            return (
                f"the Host '{name}' is not an address this server listens on (a web page reached "
                "it by another name); use its address, or allow the name with --allow-host"
            )
        origin = headers.get("origin")
        if origin is None:
            return None
        origin = origin.rstrip("/").lower()
        if origin in self.allowed_origins or "*" in self.allowed_origins:
            return None
        if host_header is not None and origin in (
            f"http://{host_header.lower()}",
            f"https://{host_header.lower()}",
        ):
            return None
        return (
            f"requests from web pages are refused: the page at {origin} may not use this API "
            "(allow it with --allow-origin, or in the window's settings)"
        )

    def _is_served_host(self, host_header: str) -> bool:
        if "*" in self.allowed_hosts:
            return True
        name = _host_name(host_header)
        if name in self.allowed_hosts:
            return True
        bound = self.address[0] if self.address else "127.0.0.1"
        try:
            bound_ip = ipaddress.ip_address(bound)
        except ValueError:
            bound_ip = None
        wildcard = bound_ip is not None and bound_ip.is_unspecified
        loopback = bound_ip is None or bound_ip.is_loopback or wildcard
        if name == "localhost":
            return loopback
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            # A name: only this computer's own names, and only where other computers may connect.
            return wildcard and name in _own_names()
        if wildcard:
            return True
        return ip == bound_ip or (loopback and ip.is_loopback)

    def check_auth(self, headers: Any) -> None:
        refusal = self.needs_key()
        if refusal is not None and not self.api_key:
            raise ApiError(403, refusal, code="api_key_required")
        if not self.api_key:
            return
        given = headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.api_key.encode()
        ):
            what = "no API key was given" if not given else "the API key is not valid"
            raise ApiError(
                401,
                f"{what}: send 'Authorization: Bearer KEY' with the key this server was started with",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def check_model(self, name: str | None, info: EngineInfo) -> None:
        if name in (None, "", model_id(info), info.target_name, Path(info.target_path).name):
            return
        raise ApiError(
            404,
            f"The model '{name}' does not exist: this server serves '{model_id(info)}'",
            param="model",
            code="model_not_found",
        )

    # -- endpoints

    def build_app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def models(request: Request) -> JSONResponse:
            try:
                self.check_auth(request.headers)
            except ApiError as e:
                return JSONResponse(e.body(), e.status, headers=e.headers)
            info = self.host.info
            data = []
            if info is not None:
                data.append(
                    {
                        "id": model_id(info),
                        "object": "model",
                        "created": self.host.created,
                        "owned_by": "tandem",
                        "speculation": info.speculation,
                        "draft_model": info.draft_name or None,
                        "n_ctx": info.n_ctx,
                    }
                )
            return JSONResponse({"object": "list", "data": data})

        async def health(request: Request) -> JSONResponse:
            if self.host.alive:
                return JSONResponse({"status": "ok", **self.host.load()})
            return JSONResponse({"status": "loading"}, 503)

        async def http_error(request: Request, exc: Exception) -> JSONResponse:
            assert isinstance(exc, HTTPException)
            error = ApiError(exc.status_code, exc.detail, code=None)
            return JSONResponse(error.body(), exc.status_code, headers=dict(exc.headers or {}))

        async def server_error(request: Request, exc: Exception) -> JSONResponse:
            say(f"tandem serve: unexpected error: {type(exc).__name__}: {exc}")
            error = ApiError(500, f"unexpected server error: {type(exc).__name__}", kind="server_error")
            return JSONResponse(error.body(), 500)

        app = Starlette(
            routes=[
                Route("/v1/models", models, methods=["GET"]),
                Route("/v1/chat/completions", _Endpoint(self, chat=True), methods=["POST"]),
                Route("/v1/completions", _Endpoint(self, chat=False), methods=["POST"]),
                Route("/health", health, methods=["GET"]),
            ],
            exception_handlers={HTTPException: http_error, Exception: server_error},
        )
        return _Boundary(self, app)


def _host_name(host_header: str) -> str:
    """The name in a Host header, without its port: "127.0.0.1:8080" -> "127.0.0.1", "[::1]:80" -> "::1"."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@functools.lru_cache(maxsize=1)
def _own_names() -> frozenset[str]:
    """This computer's names, as another computer on the network may reach it."""
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn().lower())
    names |= {f"{n.split('.')[0]}.local" for n in list(names)}
    return frozenset(n.rstrip(".") for n in names if n)


class _Boundary:
    """The API's edge with web pages, before any route: the Host and Origin checks (403 with a
    sentence), the CORS answers for the origins allowed (preflight included), and nothing else."""

    def __init__(self, server: ApiServer, app: Any) -> None:
        self.server = server
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        refusal = self.server.check_boundary(headers)
        if refusal is not None:
            say(f"tandem serve: 403: {refusal}")
            await ApiError(403, refusal, kind="invalid_request_error", code="forbidden_origin").send(send)
            return
        origin = headers.get("origin")
        allowed = self.server.allowed_origins
        if origin is None or not ("*" in allowed or origin.rstrip("/").lower() in allowed):
            await self.app(scope, receive, send)
            return
        cors = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            preflight = [
                *cors,
                (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                (b"access-control-allow-headers", b"Authorization, Content-Type"),
                (b"access-control-max-age", b"600"),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": preflight})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class _Endpoint:
    """POST /v1/chat/completions or /v1/completions, as an ASGI app."""

    def __init__(self, server: ApiServer, chat: bool) -> None:
        self.server = server
        self.chat = chat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.datastructures import Headers

        host = self.server.host
        reserved = False
        try:
            headers = Headers(scope=scope)
            self.server.check_auth(headers)
            if not _is_json(headers.get("content-type")):
                # A web page's form or text/plain post (no CORS preflight) ends here, unread.
                given = headers.get("content-type") or "none"
                raise ApiError(
                    415, f"the request body must be JSON: send 'Content-Type: application/json' (got {given})"
                )
            # The body first, within BODY_TIMEOUT_S (bodies being read are bounded in bytes by
            # Connections), then a place in line: a slow upload never holds one.
            raw = await _read_body(receive, self.server.connections, self.server.body_timeout_s)
            try:
                body = json.loads(raw)
            except RecursionError:
                raise _bad("the request body is nested too deeply") from None
            except (ValueError, UnicodeDecodeError) as e:
                raise _bad(f"the request body is not valid JSON ({e})") from None
            del raw
            info = host.info
            n_ctx = info.n_ctx if info is not None else 1 << 30
            request = parse_request(body, self.chat, n_ctx)
            if info is not None:
                self.server.check_model(request.model, info)
            host.reserve()
            reserved = True
        except ApiError as e:
            if reserved:
                host.unreserve()
            await e.send(send)
            return
        except BaseException:
            if reserved:
                host.unreserve()
            raise
        try:
            await self._serve(request, receive, send)
        finally:
            host.unreserve()

    async def _serve(self, request: GenerationRequest, receive: Receive, send: Send) -> None:
        host = self.server.host
        gone = asyncio.Event()
        job: _Job | None = None

        async def watch() -> None:
            """The client leaving: cancel its reply (the engine checks every step)."""
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    if job is not None and not job.done:
                        host.cancel(job)
                    return

        watcher = asyncio.create_task(watch())
        started = False
        try:
            # Wait for our turn, unless the client leaves first.
            acquire = asyncio.ensure_future(host.turn.acquire())
            left = asyncio.ensure_future(gone.wait())
            await asyncio.wait({acquire, left}, return_when=asyncio.FIRST_COMPLETED)
            left.cancel()
            if not acquire.done() or acquire.cancelled():
                acquire.cancel()
                return
            try:
                if gone.is_set():
                    return
                info = await host.ensure_engine()
                self.server.check_model(request.model, info)
                reply = _Reply(request, info)
                job = host.submit(request, info)
                if gone.is_set():
                    host.cancel(job)
                t0 = time.monotonic()
                # Hold the response until the first token (or the failure): a prompt too long or
                # a crash during the prefill still gets its own status code.
                head: list[ReplyMessage | WorkerDied] = []
                finished: Finished | None = None
                while True:
                    message = await job.get()
                    head.append(message)
                    match message:
                        case ReplyStarted():
                            continue
                        case ReplyEvents(events=events) if not any(
                            isinstance(e, TextPiece | Finished) for e in events
                        ):
                            continue  # numbers only: the first token is still to come
                        case ReplyEvents():
                            finished = message.finished
                        case ReplyFailed() | WorkerDied():
                            raise self._failure(message, head, info)
                    break
                if request.stream:
                    started = True
                    await self._stream(reply, job, head, send, gone)
                else:
                    while finished is None:
                        message = await job.get()
                        match message:
                            case ReplyFailed() | WorkerDied():
                                raise self._failure(message, [*head, message], info)
                            case ReplyEvents():
                                finished = message.finished
                            case ReplyStarted():
                                pass
                    started = True
                    if not gone.is_set():
                        await _send_json(send, 200, reply.whole(finished))
                    self._log(request, finished, gone.is_set(), time.monotonic() - t0)
            finally:
                if job is not None:
                    await host.finish(job)
                host.turn.release()
        except ApiError as e:
            if not started and not gone.is_set():
                await e.send(send)
            say(f"tandem serve: {e.status}: {e.message}")
        finally:
            watcher.cancel()

    def _failure(
        self, message: ReplyMessage | WorkerDied, seen: list[ReplyMessage | WorkerDied], info: EngineInfo
    ) -> ApiError:
        match message:
            case WorkerDied(sentence=sentence):
                reason = sentence.split(". ")[0].rstrip(".")
                return ApiError(
                    500,
                    f"{reason} during this reply; the next request starts a fresh engine",
                    kind="server_error",
                )
            case ReplyFailed(sentence=sentence):
                started = next((m for m in seen if isinstance(m, ReplyStarted)), None)
                if started is not None and started.n_prompt_tokens >= info.n_ctx:
                    return ApiError(400, sentence, code="context_length_exceeded")
                return ApiError(500, sentence, kind="server_error")
            case _:
                raise AssertionError(f"not a failure: {message!r}")

    async def _stream(
        self, reply: _Reply, job: _Job, head: list[ReplyMessage | WorkerDied], send: Send, gone: asyncio.Event
    ) -> None:
        t0 = time.monotonic()

        async def emit(data: bytes, more: bool = True) -> None:
            if gone.is_set():
                return
            try:
                await send({"type": "http.response.body", "body": data, "more_body": more})
            except Exception:  # the connection is gone (uvicorn raises OSError subclasses)
                gone.set()
                self.server.host.cancel(job)

        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        first = True
        pending: list[ReplyMessage | WorkerDied] = [m for m in head if isinstance(m, ReplyEvents)]
        stats: Stats | None = None
        out: list[bytes] = []  # events for one write: whatever arrived in one turn of the loop
        run: list[TextPiece] = []  # neighbouring pieces of one batch, all drafted or none: one chunk

        def end_run() -> None:
            nonlocal first
            if not run:
                return
            chunk = reply.chunk("".join(p.text for p in run), first=first)
            # Extension: which tokens the draft wrote (a remote Tandem window tints them).
            chunk["tandem"] = {"drafted": run[0].is_draft, "n_tokens": sum(p.n_tokens for p in run)}
            if reply.request.timings_per_token and stats is not None:
                chunk["timings"] = _timings(stats)
            out.append(_sse(chunk))
            first = False
            run.clear()

        while True:
            if not pending:
                if out:
                    await emit(b"".join(out))
                    out.clear()
                pending.append(await job.get())
                pending.extend(job.drain())
            message = pending.pop(0)
            match message:
                case ReplyEvents(events=events):
                    for event in events:
                        match event:
                            case Stats():
                                stats = event
                            case TextPiece():
                                if run and run[0].is_draft != event.is_draft:
                                    end_run()
                                run.append(event)
                            case Finished():
                                end_run()
                                if first:
                                    out.append(_sse(reply.chunk("", first=True)))
                                out.extend(_sse(chunk) for chunk in reply.last_chunks(event))
                                out.append(b"data: [DONE]\n\n")
                                await emit(b"".join(out), more=False)
                                self._log(reply.request, event, gone.is_set(), time.monotonic() - t0)
                                return
                    end_run()
                case ReplyFailed() | WorkerDied():
                    error = self._failure(message, head, reply.info)
                    out.append(_sse({"error": {**error.body()["error"], "code": error.status}}))
                    await emit(b"".join(out), more=False)
                    say(f"tandem serve: {error.status} mid-stream: {error.message}")
                    return
                case ReplyStarted():
                    pass

    def _log(self, request: GenerationRequest, finished: Finished, gone: bool, elapsed_s: float) -> None:
        s = finished.stats
        what = "chat" if request.chat else "completion"
        end = finished.stop_reason + (" (client went away)" if gone else "")
        read = f"{s.n_prompt_tokens - s.n_prefilled} cached"
        if finished.stop_reason == "cancelled" and not s.n_generated:
            read = f"{s.n_prefilled} read before the stop"  # a Stop during the prefill
        say(
            f"tandem serve: {what}: {s.n_prompt_tokens} prompt tokens ({read}), "
            f"{s.n_generated} generated in {elapsed_s:.2f} s, {s.decode_tokens_per_s:.1f} tok/s, "
            f"[{s.speculation}] drafted {s.n_drafted}, accepted {s.n_accepted}; stop: {end}"
        )


async def _read_body(
    receive: Receive, connections: Connections | None = None, timeout_s: float = BODY_TIMEOUT_S
) -> bytes:
    """The whole body, within timeout_s and MAX_BODY_BYTES (408, 413), its bytes counted in
    `connections` while it is read (503 when all bodies being read would pass their bound)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ApiError(400, "the client closed the request before sending its body")
                chunk = message.get("body", b"")
                if size + len(chunk) > MAX_BODY_BYTES:
                    raise ApiError(
                        413,
                        f"the request body is larger than {MAX_BODY_BYTES // (1024 * 1024)} MB",
                        headers={"Connection": "close"},
                    )
                if connections is not None:
                    connections.take_body_bytes(len(chunk))
                size += len(chunk)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {timeout_s:g} s",
            headers={"Connection": "close"},
        ) from None
    finally:
        if connections is not None:
            connections.give_body_bytes(size)


# ---------------------------------------------------------------------------------------------
# The socket (`tandem serve` and the window's serve toggle listen on it)


def listen(host: str, port: int) -> socket.socket:
    from engine.errors import TandemError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise TandemError(f"cannot listen on {host}: {e.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        reason = "the port is in use by another program" if e.errno == 98 else e.strerror
        raise TandemError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock
