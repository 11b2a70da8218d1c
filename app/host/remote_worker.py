"""The window's engine on another computer: an OpenAI-compatible server in place of the worker.

RemoteWorker has WorkerProcess's interface and delivers the same messages, so the window works
as with a local engine. Requests are served one at a time by a thread that streams through
app.host.remote_client.RemoteClient.

What the server says is shown as it says it: tokens the draft wrote are tinted where the server
marks them (`tandem serve` adds `"tandem": {"drafted", "n_tokens"}` to each chunk); acceptance
is the server's own `timings` (draft_n, draft_n_accepted; asked per chunk with llama-server's
`timings_per_token`) or LM Studio's `stats`. A server that tells neither gets a note saying so.

This module imports no Qt.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, assert_never

from app.host.messages import (
    DraftFailed,
    EngineFailed,
    EngineInfo,
    EngineLoaded,
    HostMessage,
    LoadProgressed,
    LoadRequest,
    ReplyEvents,
    ReplyFailed,
    ReplyReading,
    ReplyRequest,
    ReplyStarted,
    SetDraftRequest,
    ShutdownRequest,
    TokenCountFailed,
    TokenCountRequest,
    WorkerRequest,
)
from app.host.remote_client import (
    RemoteClient,
    RemoteError,
    RemoteResult,
    api_base,
    cleartext_warning,
)
from engine.config import PLAIN_DECODING
from engine.errors import ErrorKind, Failure
from engine.events import Event, Finished, Reading, Speculation, Stats, TextPiece
from engine.loop_guard import TextLoopGuard

log = logging.getLogger(__name__)

NO_DRAFT_MARKS = "this server does not say which tokens were drafted"
STATS_INTERVAL_S = 0.25
STOP_REASONS = {"length": "length", "stop": "eos", "cancelled": "cancelled", "repetition": "repetition"}


@dataclass(frozen=True)
class RemoteTarget:
    """A server the window uses as its engine: its address, key and model (empty: the first it lists)."""

    url: str
    api_key: str = ""
    model: str = ""


def _sentence(e: Exception) -> str:
    """A RemoteError as the window says it (its Settings fields named), or any error's text."""
    text = e.sentence("the server address", "set it in Settings") if isinstance(e, RemoteError) else str(e)
    if not text.startswith("http"):  # an address starts as written
        text = text[:1].upper() + text[1:]
    return text + ("" if text.endswith(".") else ".")


def _reading(progress: object) -> Reading | None:
    """A server's `prompt_progress` (llama-server's, tandem serve's) as a Reading, the time left at
    the speed so far; None where it is not one."""
    if not isinstance(progress, dict):
        return None
    numbers = [progress.get(k) for k in ("total", "cache", "processed", "time_ms")]
    counts = [n for n in numbers if type(n) is int and n >= 0]
    if len(counts) != len(numbers):
        return None
    total, cache, processed, time_ms = counts
    elapsed_s, n_read = time_ms / 1000, processed - cache
    left = (total - processed) * elapsed_s / n_read if n_read > 0 and elapsed_s > 0 else None
    return Reading(total, cache, processed, elapsed_s, left)


def _speculation(value: object) -> Speculation | None:
    """What `tandem serve` says it runs ("none", "ngram", "draft"); None for anything else."""
    return Speculation(value) if isinstance(value, str) and value in tuple(Speculation) else None


class _ReplyState:
    """One streamed reply: its text, what the server told of its drafts, the stats built from that."""

    def __init__(self, speculation: Speculation) -> None:
        self.speculation = speculation
        self.text = ""
        self.n_tokens = 0
        self.has_draft_marks = False
        # What the server said so far: llama-server's timings, LM Studio's stats, vLLM's metrics, usage.
        self.seen = RemoteResult()
        self.t0 = time.perf_counter()
        self.t_first: float | None = None

    def stats(self) -> Stats:
        t, usage = self.seen.timings, self.seen.usage
        now = time.perf_counter()
        drafted, accepted, _source = self.seen.drafts()
        drafted, accepted = drafted or 0, accepted or 0
        speculation = self.speculation
        if drafted and speculation is Speculation.NONE:
            speculation = Speculation.DRAFT
        n_generated = t.get("predicted_n") if isinstance(t.get("predicted_n"), int) else None
        if n_generated is None and isinstance(usage.get("completion_tokens"), int):
            n_generated = usage["completion_tokens"]
        if n_generated is None:
            n_generated = self.n_tokens
        n_prompt = usage.get("prompt_tokens")
        n_prefilled = int(t["prompt_n"]) if isinstance(t.get("prompt_n"), int) else 0
        if not isinstance(n_prompt, int):
            n_prompt = n_prefilled + int(t.get("cache_n") or 0)
        # Times as this computer sees them (the first token includes the network), the server's
        # own where it reports them.
        first = self.t_first if self.t_first is not None else now
        prefill_s = (
            float(t["prompt_ms"]) / 1000 if isinstance(t.get("prompt_ms"), int | float) else first - self.t0
        )
        decode_s = (
            float(t["predicted_ms"]) / 1000 if isinstance(t.get("predicted_ms"), int | float) else now - first
        )
        return Stats(
            speculation=speculation,
            n_prompt_tokens=n_prompt,
            n_prefilled=n_prefilled,
            n_generated=n_generated,
            n_drafted=drafted,
            n_accepted=accepted,
            n_steps=n_generated,
            prefill_s=max(0.0, prefill_s),
            decode_s=max(0.0, decode_s),
            note="" if self.has_draft_marks else NO_DRAFT_MARKS,
        )


class RemoteWorker:
    """Parent-side handle of a remote engine, shaped as app.host.worker.WorkerProcess."""

    pid: int | None = None  # no process here
    exitcode: int | None = None

    def __init__(self, on_message: Callable[[HostMessage], None], target: RemoteTarget) -> None:
        self._on_message = on_message
        self.target = target
        self._cancelled: set[int] = set()  # request ids stopped (a Stop belongs to one request)
        self._closing = False
        self._outbox: queue.Queue[WorkerRequest | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._client: RemoteClient | None = None
        self._model: str | None = None
        self._speculation = Speculation.NONE
        self._load_error = ""  # why the last connection failed ("" once loaded)
        self.base = ""

    # ---- WorkerProcess's interface

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="tandem-remote-engine", daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._closing

    def send(self, request: WorkerRequest) -> None:
        self._outbox.put(request)

    def cancel(self, request_id: int) -> None:
        """Stop one reply: streaming now, or queued (it then ends "cancelled" as it starts)."""
        self._cancelled.add(request_id)

    def _is_cancelled(self, request_id: int) -> bool:
        return self._closing or request_id in self._cancelled

    def shutdown(self, timeout_s: float = 3.0) -> None:
        self._closing = True
        self._outbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout_s)

    # ---- the thread

    def _loop(self) -> None:
        try:
            while True:
                request = self._outbox.get()
                if request is None or self._closing:
                    break
                try:
                    self._handle(request)
                except Exception as e:  # a bug here must not leave a reply waiting forever
                    log.exception("remote engine")
                    if isinstance(request, ReplyRequest):
                        failure = Failure(ErrorKind.UNEXPECTED, f"unexpected error: {e}")
                        self._on_message(ReplyFailed(request.request_id, failure))
        finally:
            if self._client is not None:
                self._client.close()

    def _handle(self, request: WorkerRequest) -> None:
        match request:
            case LoadRequest():
                self._load()
            case SetDraftRequest():
                where = self.base or self.target.url
                sentence = f"the server at {where} decides its own speculation"
                self._on_message(DraftFailed(Failure(ErrorKind.OTHER, sentence)))
            case ReplyRequest():
                try:
                    self._reply(request)
                finally:
                    self._cancelled.discard(request.request_id)
            case TokenCountRequest(request_id=request_id):
                # A server's tokenizer is not asked for counts (the window keeps its estimate).
                sentence = "the server's tokens are not counted here"
                self._on_message(TokenCountFailed(request_id, Failure(ErrorKind.REMOTE, sentence)))
            case ShutdownRequest():
                pass
            case unreachable:
                assert_never(unreachable)

    def _fail_load(self, sentence: str) -> None:
        self._load_error = sentence
        self._on_message(EngineFailed(Failure(ErrorKind.REMOTE, sentence)))

    def _load(self) -> None:
        self._load_error = "not connected yet"
        try:
            self.base = api_base(self.target.url)
        except RemoteError as e:
            self._fail_load(_sentence(e))
            return
        self._on_message(LoadProgressed(f"Connecting to {self.base}…"))
        if self._client is None:
            self._client = RemoteClient(self.base, self.target.api_key or None)
        try:
            model = self._client.pick_model(self.target.model or None)
        except RemoteError as e:
            self._fail_load(_sentence(e))
            return
        self._load_error = ""
        self._model = model
        # tandem serve's entry adds speculation, draft_model and n_ctx.
        entry = self._client.entries.get(model, {}) if model else {}
        self._speculation = _speculation(entry.get("speculation")) or Speculation.NONE
        n_ctx = int(entry["n_ctx"]) if isinstance(entry.get("n_ctx"), int) else 0
        name = model or "the server's model"
        warning = cleartext_warning(self.base, self.target.api_key or None)
        if warning:
            log.warning("%s", warning)
        info = EngineInfo(
            target_path=self.base,
            target_name=name,
            draft=PLAIN_DECODING,
            draft_name=str(entry.get("draft_model") or ""),
            speculation=self._speculation,
            n_ctx=n_ctx,
            has_chat_template=True,
            gpu_offload_supported=False,
            server=self.base,
        )
        self._on_message(EngineLoaded(info))

    def _body(self, request: ReplyRequest) -> tuple[str, dict[str, Any]]:
        p = request.params
        body: dict[str, Any] = {
            "max_tokens": request.max_tokens,
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": p.top_k,
            "min_p": p.min_p,
            "repeat_penalty": p.repeat_penalty,
            "stream": True,
            "stream_options": {"include_usage": True},
            "timings_per_token": True,  # llama-server (and tandem serve): acceptance as it goes
            "return_progress": True,  # ...and how far the prompt is read (prompt_progress chunks)
        }
        if p.seed is not None:
            body["seed"] = p.seed
        if self._model:
            body["model"] = self._model
        if request.speculate is False:
            body["speculation"] = "off"  # tandem serve's extension (Compare's plain run)
        if request.stop:
            body["stop"] = list(request.stop)
        if request.prompt is not None:
            body["prompt"] = request.prompt
            return "/completions", body
        messages = [{"role": "system", "content": request.system_prompt}] if request.system_prompt else []
        messages += [{"role": t.role, "content": t.content} for t in request.turns]
        body["messages"] = messages
        return "/chat/completions", body

    def _reply(self, request: ReplyRequest) -> None:
        rid = request.request_id
        if self._client is None or self._load_error:
            self._load()  # not connected yet, or it failed: try again (the server may be back)
            if self._load_error:
                self._on_message(ReplyFailed(rid, Failure(ErrorKind.NO_ENGINE, self._load_error)))
                return
        state = _ReplyState(self._speculation)
        self._on_message(ReplyStarted(rid, 0, 0, self._speculation))
        if self._is_cancelled(rid):  # stopped while it waited its turn: never sent
            self._on_message(ReplyEvents(rid, (Finished("cancelled", "", (), state.stats()),)))
            return
        path, body = self._body(request)
        last: dict[str, Any] = {"numbers": None, "at": 0.0}
        # The stream runs on a thread of its own, so that Stop answers at once even while the
        # server is still reading the prompt (no line comes then): the reply ends here, and the
        # stream, told by its own event, closes the connection at its next line (the server
        # takes that as the client leaving). Nothing of it is delivered after the reply ended.
        lock = threading.Lock()
        closed = [False]
        stop_stream = threading.Event()
        # A reply that repeats one stretch again and again ends here, as the local engine's does
        # (engine/loop_guard.py): a server (llama-server, LM Studio) would write to its cap.
        loop_guard, looped = TextLoopGuard(), threading.Event()

        def on_chunk(chunk: dict[str, Any], text: str) -> None:
            with lock:
                if closed[0]:
                    return
                reading = _reading(chunk.get("prompt_progress"))
                if reading is not None and state.t_first is None:
                    self._on_message(ReplyReading(rid, reading))
                events: list[Event] = []  # one chunk's text and numbers: one message
                state.seen.absorb(chunk)
                said = _speculation(chunk.get("speculation"))
                if said is not None:
                    state.speculation = said
                if text:
                    mark = chunk.get("tandem")
                    drafted, n_tokens = False, 1
                    if isinstance(mark, dict):
                        state.has_draft_marks = True
                        drafted = bool(mark.get("drafted"))
                        if isinstance(mark.get("n_tokens"), int) and mark["n_tokens"] > 0:
                            n_tokens = mark["n_tokens"]
                    if state.t_first is None:
                        state.t_first = time.perf_counter()
                    state.text += text
                    state.n_tokens += n_tokens
                    events.append(TextPiece(text, n_tokens, drafted))
                    if loop_guard.add(text):  # nothing after this piece is shown; the stream closes
                        looped.set()
                        closed[0] = True
                        stop_stream.set()
                # The numbers whenever the server's change, and at least every STATS_INTERVAL_S while
                # text comes (a server that reports none: the speed measured here).
                numbers = (state.seen.drafts(), state.seen.timings.get("predicted_n"))
                now = time.perf_counter()
                if (
                    (state.seen.timings or state.seen.stats or state.seen.metrics)
                    and numbers != last["numbers"]
                    or (text and now - last["at"] >= STATS_INTERVAL_S)
                ):
                    last["numbers"], last["at"] = numbers, now
                    events.append(state.stats())
                if events:
                    self._on_message(ReplyEvents(rid, tuple(events)))

        client = self._client
        assert client is not None
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                outcome["result"] = client.stream(path, body, on_chunk, cancel=stop_stream)
            except Exception as e:  # RemoteError, or a bug: said below either way
                outcome["error"] = e
            finally:
                done.set()

        threading.Thread(target=run, name="tandem-remote-stream", daemon=True).start()
        while not done.wait(0.05):
            if self._is_cancelled(rid) or looped.is_set():
                stop_stream.set()
                break
        with lock:
            closed[0] = True
            error = outcome.get("error")
            result: RemoteResult | None = outcome.get("result")
            if error is not None and not self._is_cancelled(rid) and not looped.is_set():
                kind = ErrorKind.REMOTE
                if isinstance(error, RemoteError):
                    sentence = _sentence(error)
                else:
                    log.error("remote stream failed", exc_info=error)
                    sentence = f"the reply from {self.base} failed: {type(error).__name__}: {error}"
                    kind = ErrorKind.UNEXPECTED
                self._on_message(ReplyFailed(rid, Failure(kind, sentence)))
                return
            if looped.is_set():
                stop_reason = "repetition"
            elif result is None or self._is_cancelled(rid):
                stop_reason = "cancelled"
            else:
                stop_reason = STOP_REASONS.get(result.finish_reason or "stop", "eos")
            finished = Finished(stop_reason, state.text, (), state.stats())  # type: ignore[arg-type]
            self._on_message(ReplyEvents(rid, (finished,)))
