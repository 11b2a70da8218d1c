"""The two generation endpoints, POST /v1/chat/completions and /v1/completions, as ASGI apps:
the body read within its bounds, parsed (app/api/requests.py), a place in line taken
(app/api/engine_bridge.py), and the reply sent whole or streamed (app/api/responses.py) while
the client is watched, so that one who leaves has its reply cancelled within one step."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol, assert_never

from app.api.connections import MAX_BODY_BYTES, Connections
from app.api.engine_bridge import ApiEngine, Job
from app.api.requests import (
    ApiError,
    GenerationRequest,
    Receive,
    Scope,
    Send,
    bad_request,
    parse_request,
    send_json,
)
from app.api.responses import Reply, say, sse, timings
from app.host.messages import (
    EngineInfo,
    ReplyEvents,
    ReplyFailed,
    ReplyMessage,
    ReplyReading,
    ReplyStarted,
    WorkerDied,
)
from engine.errors import Failure
from engine.events import Finished, Stats, TextPiece


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class Server(Protocol):
    """What an endpoint asks of the server (app.api.serve.ApiServer): its engine, its checks and
    its bounds."""

    host: ApiEngine
    connections: Connections
    body_timeout_s: float
    write_timeout_s: float

    def check_auth(self, headers: Any) -> None: ...

    def check_model(self, name: str | None, info: EngineInfo) -> None: ...


class Endpoint:
    """POST /v1/chat/completions or /v1/completions, as an ASGI app."""

    def __init__(self, server: Server, chat: bool) -> None:
        self.server = server
        self.chat = chat

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.datastructures import Headers

        host = self.server.host
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
            client = str((scope.get("client") or ("?",))[0])
            raw = await _read_body(receive, self.server.connections, self.server.body_timeout_s, client)
            try:
                body = json.loads(raw)
            except RecursionError:
                raise bad_request("the request body is nested too deeply") from None
            except (ValueError, UnicodeDecodeError) as e:
                raise bad_request(f"the request body is not valid JSON ({e})") from None
            del raw
            info = host.supervisor.info
            n_ctx = info.n_ctx if info is not None else 1 << 30
            request = parse_request(body, self.chat, n_ctx)
            if info is not None:
                self.server.check_model(request.model, info)
            host.reserve()  # the last step: nothing after it may fail before the try below
        except ApiError as e:
            await e.send(send)
            return
        try:
            await self._serve(request, receive, send)
        finally:
            host.unreserve()

    async def _serve(self, request: GenerationRequest, receive: Receive, send: Send) -> None:
        host = self.server.host
        gone = asyncio.Event()
        job: Job | None = None

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
                reply = Reply(request, info)
                job = host.submit(request, info)
                if gone.is_set():
                    host.cancel(job)
                t0 = time.monotonic()
                # Hold the response until the first token (or the failure; not streamed: the end):
                # a prompt too long or a crash during the prefill still gets its own status code.
                head: list[ReplyMessage | WorkerDied] = []
                finished: Finished | None = None
                while True:
                    message = await job.get()
                    head.append(message)
                    match message:
                        case ReplyStarted():
                            continue
                        case ReplyReading():
                            if not (request.stream and request.return_progress):
                                continue  # (streamed: the reading's progress opens the stream)
                        case ReplyEvents(events=events) if not any(
                            isinstance(e, TextPiece | Finished) for e in events
                        ):
                            continue  # numbers only: the first token is still to come
                        case ReplyEvents():
                            finished = message.finished
                        case ReplyFailed() | WorkerDied():
                            raise self._failure(message, head, info)
                        case _:
                            assert_never(message)
                    if request.stream or finished is not None:
                        break
                started = True
                if request.stream:
                    await self._stream(reply, job, head, send, gone)
                else:
                    assert finished is not None
                    if not gone.is_set():
                        await send_json(send, 200, reply.whole(finished))
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
        self, message: ReplyFailed | WorkerDied, seen: list[ReplyMessage | WorkerDied], info: EngineInfo
    ) -> ApiError:
        match message:
            case WorkerDied(sentence=sentence):
                reason = sentence.split(". ")[0].rstrip(".")
                return ApiError(
                    500,
                    f"{reason} during this reply; the next request starts a fresh engine",
                    kind="server_error",
                )
            case ReplyFailed(failure=Failure(sentence=sentence)):
                started = next((m for m in seen if isinstance(m, ReplyStarted)), None)
                if started is not None and started.n_prompt_tokens >= info.n_ctx:
                    return ApiError(400, sentence, code="context_length_exceeded")
                return ApiError(500, sentence, kind="server_error")
            case _:
                assert_never(message)

    async def _stream(
        self, reply: Reply, job: Job, head: list[ReplyMessage | WorkerDied], send: Send, gone: asyncio.Event
    ) -> None:
        t0 = time.monotonic()
        write_timeout_s = self.server.write_timeout_s

        async def emit(data: bytes, more: bool = True) -> None:
            if gone.is_set():
                return
            try:
                # A client that takes nothing (its socket's buffers full) holds the one turn no
                # longer than the write deadline: uvicorn's send waits for the buffers to drain.
                async with asyncio.timeout(write_timeout_s):
                    await send({"type": "http.response.body", "body": data, "more_body": more})
            except Exception as e:  # the client took nothing, or the connection is gone (OSError)
                if isinstance(e, TimeoutError):
                    say(
                        f"tandem serve: a streaming client took nothing for {write_timeout_s:g} s; reply cancelled"
                    )
                gone.set()
                self.server.host.cancel(job)

        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        first = True
        pending = list(head)  # (what came before the first token: the stream starts with it)
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
                chunk["timings"] = timings(stats)
            out.append(sse(chunk))
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
                                    out.append(sse(reply.chunk("", first=True)))
                                out.extend(sse(chunk) for chunk in reply.last_chunks(event))
                                out.append(b"data: [DONE]\n\n")
                                await emit(b"".join(out), more=False)
                                self._log(reply.request, event, gone.is_set(), time.monotonic() - t0)
                                return
                            case _:
                                assert_never(event)
                    end_run()
                case ReplyFailed() | WorkerDied():
                    error = self._failure(message, head, reply.info)
                    out.append(sse({"error": {**error.body()["error"], "code": error.status}}))
                    await emit(b"".join(out), more=False)
                    say(f"tandem serve: {error.status} mid-stream: {error.message}")
                    return
                case ReplyReading(reading=reading):
                    if reply.request.return_progress and first:
                        out.append(sse(reply.progress_chunk(reading)))
                case ReplyStarted():
                    pass
                case _:
                    assert_never(message)

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


async def _read_body(receive: Receive, connections: Connections, timeout_s: float, client: str) -> bytes:
    """The whole body, within timeout_s and MAX_BODY_BYTES (408, 413), its bytes counted in
    `connections` while it is read (503 when all bodies being read would pass their bound), and
    the body itself counted against its client's bodies arriving (the oldest of which a newer
    one stops with a 408: Connections.start_reading)."""
    chunks: list[bytes] = []
    size = 0
    task, token, stopped = asyncio.current_task(), object(), False

    def stop() -> None:
        nonlocal stopped
        stopped = True
        if task is not None:
            task.cancel()

    connections.start_reading(client, token, stop)
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
    except asyncio.CancelledError:
        if not stopped or task is None:
            raise
        task.uncancel()
        raise ApiError(
            408,
            "the request body was still arriving when newer requests from the same address needed room",
            headers={"Connection": "close"},
        ) from None
    finally:
        connections.done_reading(client, token)
        connections.give_body_bytes(size)
