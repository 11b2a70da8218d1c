"""The engine's worker process, and the parent-side handle that talks to it.

llama.cpp runs in a child process (multiprocessing "spawn": no inherited Qt or threads), so a
native crash, a SIGKILL or the OOM killer takes down only the child; the window stays and the
next request starts a fresh child. Requests and replies cross two one-way pipes as small frozen
dataclasses (app.host.messages); a reply's text and stats are gathered into one ReplyEvents at
most every BATCH_INTERVAL_S (its first text and its end at once), so the pipe costs little per
token. Stop is not a message: the child is busy in its token loop then, so the parent writes
the id of the request to stop into shared memory (CancelBoard) that the engine checks every step.
A stop belongs to one request: stopping one never stops another queued behind it, whoever sent
them (the window, or a client of the API on the same engine). A token count is the one request
served beside a reply rather than after it (_read_requests).

This module imports no Qt: tests and scripts can drive a worker directly.

Why this file is long: the two ends of one pipe (the child's request loop and the parent's handle)
stay together, so a message and both its handlers change in one place.
"""

from __future__ import annotations

import faulthandler
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, assert_never

from app.host.messages import (
    DraftChanged,
    DraftFailed,
    EngineFailed,
    EngineInfo,
    EngineLoaded,
    HostMessage,
    LastWords,
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
    TokensCounted,
    WorkerDied,
    WorkerMessage,
    WorkerRequest,
)
from app.host.reread import ReadConversation, reread_reason
from engine.chat import (
    ChatPrompt,
    PromptCancelled,
    TokenCounts,
    build_chat_prompt,
    generate_reply,
    remember_exchanges,
)
from engine.config import PLAIN_DECODING, DraftChoice, EngineConfig
from engine.errors import ErrorKind, Failure, TandemError
from engine.events import Event, Finished, Reading, Speculation, Stats, TextPiece
from engine.reading import watch_reading

if TYPE_CHECKING:
    from engine.session import Engine  # loads llama.cpp: imported in the worker process only

log = logging.getLogger(__name__)
_IDLE_GRACE_S = 1.0  # idle this long before the engine's idle work (timing batches) starts

# A reply's text and stats go to the parent at most this often (its first text, its end and
# every other message at once): see _Outbox.
BATCH_INTERVAL_S = 0.030
# A prompt's reading is reported at most this often (engine.reading reports each chunk it reads).
READING_INTERVAL_S = 0.25

# ---------------------------------------------------------------------------------------------
# Stop, per request


class CancelBoard:
    """Which requests are stopped, in memory shared by the parent and the child.

    A ring of the last SLOTS request ids stopped, plus one flag that stops everything (shutdown).
    The parent writes; the engine asks `flag(request_id).is_set()` every step, which reads the
    ring (a few dozen integers, microseconds). A stop for a request the child has not started yet
    is on the board when it starts: it ends at once, "cancelled", and nothing else does.
    """

    SLOTS = 64
    _CURSOR, _ALL, _FIRST = 0, 1, 2

    def __init__(self, shared: Any) -> None:
        # multiprocessing Array('q', _FIRST + SLOTS), made by create(): a spawned child is given it.
        self.shared = shared

    @classmethod
    def create(cls, ctx: Any) -> CancelBoard:
        return cls(ctx.Array("q", cls._FIRST + cls.SLOTS))

    def cancel(self, request_id: int) -> None:
        with self.shared.get_lock():
            cursor = self.shared[self._CURSOR]
            self.shared[self._FIRST + cursor % self.SLOTS] = request_id
            self.shared[self._CURSOR] = cursor + 1

    def cancel_all(self) -> None:
        self.shared[self._ALL] = 1

    def is_cancelled(self, request_id: int) -> bool:
        ids = self.shared.get_obj()  # a plain read: each slot is written whole
        return bool(ids[self._ALL]) or request_id in ids[self._FIRST :]

    def flag(self, request_id: int) -> _RequestFlag:
        return _RequestFlag(self, request_id)


class _RequestFlag(threading.Event):
    """One request's stop, as the threading.Event the engine checks (is_set reads the board)."""

    def __init__(self, board: CancelBoard, request_id: int) -> None:
        super().__init__()
        self._board = board
        self._request_id = request_id

    def is_set(self) -> bool:
        return self._board.is_cancelled(self._request_id)


# ---------------------------------------------------------------------------------------------
# The child


def _engine_info(engine: Engine, config: EngineConfig, refusal: Failure | None = None) -> EngineInfo:
    speculation: Speculation = engine.speculation
    draft = config.draft if speculation is not Speculation.NONE else PLAIN_DECODING
    target_name = engine.info_target.name  # (the headers the engine read: not read again)
    if speculation is Speculation.DRAFT and engine.info_draft is not None:
        draft_name = engine.info_draft.name
        pair = f"{target_name} drafted by {draft_name}: vocabularies compatible"
    elif speculation is Speculation.NGRAM:
        draft_name = "n-gram lookup"
        pair = f"{target_name} with n-gram lookup (drafts from the conversation itself; always compatible)"
    else:
        draft_name = ""
        pair = f"{target_name}, speculation off"
    return EngineInfo(
        target_path=config.target_path,
        target_name=target_name,
        draft=draft,
        draft_name=draft_name,
        speculation=speculation,
        n_ctx=int(engine.n_ctx),
        has_chat_template=bool(engine.has_chat_template),
        gpu_offload_supported=bool(engine.gpu_offload_supported),
        pair_note=f"{pair}. Draft model not used: {refusal.sentence}." if refusal else pair,
        draft_refusal=refusal,
        can_roll_back=bool(engine.target.can_roll_back),
    )


def _unexpected(e: BaseException) -> str:
    log.error("unexpected error in the engine worker:\n%s", traceback.format_exc())
    return f"the engine hit an unexpected error ({type(e).__name__}: {e}); details are in the worker log"


def _failure(e: BaseException) -> Failure:
    """An error as the parent is told it: a TandemError's own sentence, else a bug's (logged)."""
    return Failure.of(e) if isinstance(e, TandemError) else Failure.of(e, _unexpected(e))


class _Outbox:
    """The child's end of the event pipe, gathering a reply's events into few messages.

    Each message costs both processes a pickle, a pipe write and a wake-up, on the cores llama.cpp
    decodes on. So a reply's TextPieces and Stats wait and go together in one ReplyEvents, at most
    every BATCH_INTERVAL_S: a flusher thread sends a waiting batch when its time is up, so text
    never waits for the engine's next event. The first text of a reply, the Finished and every
    other message go at once, after whatever waited before them (order is kept across all)."""

    def __init__(self, conn: multiprocessing.connection.Connection) -> None:
        self._conn = conn
        self._cond = threading.Condition()  # guards everything below and every write to conn
        self._request_id: int | None = None
        self._events: list[Event] = []
        self._has_text = False  # the current reply's first text has gone
        self._last_sent_s = 0.0
        threading.Thread(target=self._flush_when_due, name="tandem-outbox", daemon=True).start()

    def send(self, message: WorkerMessage) -> None:
        with self._cond:
            self._flush()
            self._conn.send(message)
            self._last_sent_s = time.monotonic()
            self._request_id = None  # what follows (the next ReplyStarted's events) is a new reply

    def send_aside(self, message: WorkerMessage) -> None:
        """A message from beside the reply (another thread): written now, whole; the reply's
        waiting batch and its timing are left as they are."""
        with self._cond:
            self._conn.send(message)

    def send_event(self, request_id: int, event: Event) -> None:
        with self._cond:
            if request_id != self._request_id:
                self._flush()
                self._request_id, self._has_text = request_id, False
            opens_batch = not self._events
            if isinstance(event, Stats) and not opens_batch:
                # A snapshot: a newer one replaces the one still waiting.
                self._events = [e for e in self._events if not isinstance(e, Stats)]
            self._events.append(event)
            first_text = isinstance(event, TextPiece) and not self._has_text
            self._has_text = self._has_text or first_text
            if (
                first_text
                or not isinstance(event, TextPiece | Stats)
                or time.monotonic() - self._last_sent_s >= BATCH_INTERVAL_S
            ):
                self._flush()
            elif opens_batch:  # the flusher sends it when due (woken once a batch, not per event)
                self._cond.notify()

    def flush(self) -> None:
        with self._cond:
            self._flush()

    def _flush(self) -> None:
        if self._events:
            assert self._request_id is not None
            events, self._events = tuple(self._events), []
            self._conn.send(ReplyEvents(self._request_id, events))
            self._last_sent_s = time.monotonic()

    def _flush_when_due(self) -> None:
        with self._cond:
            while True:
                if not self._events:
                    self._cond.wait()
                    continue
                left = self._last_sent_s + BATCH_INTERVAL_S - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                try:
                    self._flush()
                except (OSError, EOFError):
                    return  # the parent is gone; the request loop finds out on its next send


class _Child:
    """The request loop of the worker process. One engine, one request at a time."""

    def __init__(self, events: multiprocessing.connection.Connection, cancels: CancelBoard) -> None:
        self.outbox = _Outbox(events)
        self.cancels = cancels
        self.engine: Engine | None = None
        # Held while the engine is closed, and while a count reads its vocabulary beside a reply:
        # never a model freed under a count.
        self.engine_lock = threading.Lock()
        self.config: EngineConfig | None = None
        self.load_error = "no model is loaded"
        self.n_dropped: dict[str, int] = {}  # history_key -> turns left out last time
        self.token_counts = TokenCounts()  # messages' token counts, kept between replies
        self.last_read: ReadConversation | None = None  # the conversation the model read last

    def _load_progress_reporter(self, what: str) -> Callable[[float], None]:
        """llama.cpp reports load progress many times a second: pass on every 5%."""
        last = [-1.0]

        def report(fraction: float) -> None:
            if fraction - last[0] >= 0.05 or fraction >= 1.0:
                last[0] = fraction
                self.outbox.send(LoadProgressed(f"Loading {what}…", fraction))

        return report

    def handle(self, request: WorkerRequest) -> bool:
        """Serve one request; False ends the loop."""
        match request:
            case ShutdownRequest():
                return False
            case LoadRequest(config=config, earlier=earlier, grow_outputs=grow):
                self.load(config, grow)
                self.remember(earlier)
            case SetDraftRequest(draft=draft):
                self.set_draft(draft)
            case ReplyRequest():
                self.reply(request)
            case TokenCountRequest():  # (_read_requests serves these itself, beside a reply)
                self.count_tokens(request)
            case _:
                assert_never(request)
        return True

    @property
    def idle_work_due(self) -> bool:
        """Verify batches to time (engine.session's calibrate) or a logits buffer to grow?"""
        return self.engine is not None and (self.engine.calibration_due or self.engine.outputs_due)

    def idle_work(self, request_waiting: Callable[[], bool]) -> None:
        """Time this machine's verify batches until a request arrives (the cost cache keeps them);
        a failure costs only the calibration, logged."""
        if self.engine is None:
            return
        try:
            if self.engine.calibration_due and self.engine.calibrate(request_waiting):
                log.info("verify batches timed for this machine and model")
            if self.engine.outputs_due and not request_waiting():
                self.engine.grow_outputs()  # (a first long copy need not pay it: docs/findings.md)
        except (BrokenPipeError, EOFError):
            raise
        except Exception:
            log.exception("timing verify batches failed; replies measure them as they go")

    def close_engine(self) -> None:
        with self.engine_lock:
            engine, self.engine = self.engine, None
            if engine is not None:
                engine.close()
        self.n_dropped.clear()
        self.last_read = None
        self.token_counts.clear()

    def count_tokens(self, request: TokenCountRequest) -> None:
        """The texts' token counts by the loaded target's tokenizer, as parts of a prompt (no BOS).

        Runs on the request reader's thread, beside a reply: llama.cpp's tokenizer only reads the
        vocabulary, which nothing changes after the load (llama-server does the same), and the
        engine lock keeps the model from being closed under it."""
        message: WorkerMessage
        with self.engine_lock:
            engine = self.engine
            if engine is None:
                failure = Failure(ErrorKind.NO_ENGINE, f"not counted: {self.load_error}")
                message = TokenCountFailed(request.request_id, failure)
            else:
                try:
                    counts = tuple(len(engine.tokenize(text, add_special=False)) for text in request.texts)
                    message = TokensCounted(request.request_id, counts)
                except Exception as e:
                    message = TokenCountFailed(request.request_id, _failure(e))
        self.outbox.send_aside(message)

    def load(self, config: EngineConfig, grow_outputs: bool = False) -> None:
        """grow_outputs: llama.cpp's logits buffer grown before EngineLoaded (LoadRequest's)."""
        from engine.session import Engine

        self.close_engine()
        try:
            from app.library.model_spec import parse_model, resolve_draft

            # `default` (or nothing), `smollm2`, a path: read as the command line reads it.
            target = parse_model(config.target_path)
            if target.embedded is not None:
                self.outbox.send(LoadProgressed("Preparing the embedded model (first start only)…"))
            config = replace(config, target_path=target.resolve(), draft=resolve_draft(config.draft))
            size_mb = os.path.getsize(config.target_path) / 1e6 if os.path.exists(config.target_path) else 0
            what = f"{Path(config.target_path).name} ({size_mb:.0f} MB)"
            if config.rpc_servers:
                what += f", its layers on {', '.join(config.rpc_servers)}"
            if config.draft.model:
                what += f" and draft {Path(config.draft.model).name}"
            self.outbox.send(LoadProgressed(f"Loading {what}…"))
            refusal: Failure | None = None
            # A draft that cannot be used must not cost the user their target model: the target
            # is kept, plain, and why the draft is off is shown as state rather than an error.
            try:
                self.engine = Engine(
                    config,
                    on_progress=self._load_progress_reporter(what),
                    keep_target_if_draft_refused=True,
                )
            except TandemError as e:
                if config.speculation is not Speculation.DRAFT:
                    raise
                # (The target failed to load beside its draft, short of memory say: it loads again, alone.)
                log.warning("draft not used: %s", e)
                config = replace(config, draft=PLAIN_DECODING)
                self.engine = Engine(config, on_progress=self._load_progress_reporter(what))
                refusal = Failure.of(e)
            if self.engine.draft_refused is not None:
                log.warning("draft not used: %s", self.engine.draft_refused)
                config = replace(config, draft=PLAIN_DECODING)
                refusal = Failure.of(self.engine.draft_refused)
            self.config = config
            if grow_outputs and self.engine.outputs_due:
                try:  # a failure costs only the growth (a reply pays it)
                    self.engine.grow_outputs()
                except Exception:
                    log.exception("growing the logits buffer failed; the first long reply grows it")
            self.outbox.send(EngineLoaded(_engine_info(self.engine, config, refusal)))
        except Exception as e:
            failure = _failure(e)
            self.load_error = failure.sentence
            self.outbox.send(EngineFailed(failure))

    def remember(self, earlier: tuple[tuple[str, str], ...]) -> None:
        """Seed the engine's reply memory with earlier answers, after the load is reported; never
        fails a load (a memory is only a speed-up)."""
        if self.engine is None or not earlier:
            return
        try:
            n = remember_exchanges(self.engine, earlier)
        except Exception as e:
            log.warning("earlier answers not kept for drafting: %s", _unexpected(e))
        else:
            log.info("%d earlier answers kept for drafting", n)

    def set_draft(self, draft: DraftChoice) -> None:
        if self.engine is None or self.config is None:
            sentence = f"speculation cannot change: {self.load_error}"
            self.outbox.send(DraftFailed(Failure(ErrorKind.NO_ENGINE, sentence)))
            return
        try:
            from app.library.model_spec import resolve_draft

            draft = resolve_draft(draft)
            self.engine.set_draft(draft)
            self.config = replace(self.config, draft=draft)
            self.outbox.send(DraftChanged(_engine_info(self.engine, self.config)))
        except Exception as e:
            self.outbox.send(DraftFailed(_failure(e)))

    def reply(self, request: ReplyRequest) -> None:
        if self.engine is None:
            failure = Failure(ErrorKind.NO_ENGINE, f"no reply: {self.load_error}")
            self.outbox.send(ReplyFailed(request.request_id, failure))
            return
        cancel = self.cancels.flag(request.request_id)
        try:
            # The prompt is tokenized once here; those tokens are what the engine decodes.
            prompt: list[int] | ChatPrompt
            if request.prompt is not None:  # a raw text completion
                prompt = list(self.engine.tokenize(request.prompt))
                n_dropped, n_prompt = 0, len(prompt)
            else:
                prompt = build_chat_prompt(
                    self.engine,
                    request.turns,
                    request.system_prompt,
                    request.max_tokens,
                    self.n_dropped.get(request.history_key, 0),
                    cancel=cancel,
                    token_counts=self.token_counts,
                    documents=request.documents,
                )
                n_dropped, n_prompt = prompt.n_dropped, prompt.n_tokens
                if request.documents:  # not fitting even with its older turns left out
                    from app.library.documents import check_fits

                    n_ctx = int(self.engine.n_ctx)
                    n_reply = min(request.max_tokens, n_ctx // 2)  # the room build_chat_prompt keeps
                    check_fits(self.engine.info_target, n_ctx, n_prompt, n_reply, True, n_dropped)
            if request.history_key:
                self.n_dropped[request.history_key] = n_dropped
            self.outbox.send(ReplyStarted(request.request_id, n_prompt, n_dropped, self.engine.speculation))
            args = (
                request.params,
                request.max_tokens,
                request.stop,
                cancel,
                request.speculate,
                request.remember,
            )
            if isinstance(prompt, ChatPrompt):  # a chat reply ends at a base model's new speaker line
                events = generate_reply(self.engine, prompt, *args)
            else:  # a raw text completion: the engine's own
                events = self.engine.generate(prompt, *args)
            for event in self._watched(request, prompt, n_dropped, events):
                self.outbox.send_event(request.request_id, event)
        except PromptCancelled:  # stopped while a long conversation was fitted to the context
            self.outbox.send(ReplyStarted(request.request_id, 0, 0, self.engine.speculation))
            stopped = Finished("cancelled", "", (), Stats(self.engine.speculation))  # nothing read
            self.outbox.send_event(request.request_id, stopped)
            self.outbox.flush()
        except (BrokenPipeError, EOFError):
            raise
        except Exception as e:
            self.outbox.send(ReplyFailed(request.request_id, _failure(e)))
        else:
            self.outbox.flush()  # nothing of the reply may wait once its events end

    def _watched(
        self, request: ReplyRequest, prompt: list[int] | ChatPrompt, n_dropped: int, events: Iterator[Event]
    ) -> Iterator[Event]:
        """The reply's events with its reading reported (at most every READING_INTERVAL_S, the
        first at once) and what it reused of the cache in its Stats (engine.reading), the reason
        for a re-read taken from what changed since the model's last request (app.host.reread)."""
        assert self.engine is not None
        now = None
        if request.prompt is None:
            now = ReadConversation(request.history_key, request.system_prompt, request.turns, n_dropped)
        before, self.last_read = self.last_read, now
        last_sent = [-READING_INTERVAL_S]

        def report(reading: Reading) -> None:
            if time.monotonic() - last_sent[0] >= READING_INTERVAL_S:
                last_sent[0] = time.monotonic()
                self.outbox.send(ReplyReading(request.request_id, reading))

        tokens = prompt.tokens if isinstance(prompt, ChatPrompt) else prompt
        return watch_reading(self.engine.target, tokens, events, report, reread_reason(before, now))


def _read_requests(
    requests: multiprocessing.connection.Connection,
    child: _Child,
    inbox: queue.Queue[WorkerRequest | None],
) -> None:
    """The child's reader of the request pipe, on a thread of its own. A token count is answered
    here at once, even while the main thread generates a reply (_Child.count_tokens says why that
    is safe); every other request is handed to the main thread, in order. None: the pipe ended."""
    try:
        while True:
            request = requests.recv()
            if isinstance(request, TokenCountRequest):
                child.count_tokens(request)
            else:
                inbox.put(request)
    except (EOFError, OSError):
        pass  # the parent is gone (or closed its end after a shutdown)
    except Exception:
        log.exception("the request reader stopped")
    finally:
        inbox.put(None)


def worker_main(
    requests: multiprocessing.connection.Connection,
    events: multiprocessing.connection.Connection,
    cancels: Any,
    log_path: str,
) -> None:
    """The child process's entry point."""
    # Ctrl+C in a terminal goes to the whole process group: the parent decides, not the child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from app.library.logs import setup_file_logging

    setup_file_logging(Path(log_path), "%(asctime)s worker %(process)d %(levelname)s %(message)s")
    # A native crash (SIGSEGV in llama.cpp) leaves a Python traceback in the log.
    with open(log_path, "a", encoding="utf-8") as crash_log:
        faulthandler.enable(crash_log)
        child = _Child(events, CancelBoard(cancels))
        from engine import rpc

        # llama.cpp aborts the process when an RPC server is lost: say which one first.
        rpc.set_abort_reporter(
            lambda sentence: child.outbox.send(
                LastWords(
                    f"The engine stopped: {sentence}. Your conversation is saved; the next message "
                    "starts a fresh engine."
                )
            )
        )
        inbox: queue.Queue[WorkerRequest | None] = queue.Queue()
        threading.Thread(
            target=_read_requests, args=(requests, child, inbox), name="tandem-requests", daemon=True
        ).start()
        try:
            while True:
                if child.idle_work_due:
                    try:  # not at once: a window sends a waiting message right after a load
                        request = inbox.get(timeout=_IDLE_GRACE_S)
                    except queue.Empty:
                        child.idle_work(lambda: not inbox.empty())
                        continue
                else:
                    request = inbox.get()
                if request is None:
                    break  # the parent is gone
                if not child.handle(request):
                    break
        except (BrokenPipeError, EOFError, ConnectionResetError):
            pass  # the parent is gone mid-reply
        finally:
            child.close_engine()


# ---------------------------------------------------------------------------------------------
# The parent's handle


_SIGNAL_REASONS: dict[int, str] = {  # by signal number (a Signals is an int)
    signal.SIGKILL: "was killed (SIGKILL: out of memory, or stopped by another program)",
    signal.SIGSEGV: "crashed inside llama.cpp (SIGSEGV)",
    signal.SIGABRT: "aborted inside llama.cpp (SIGABRT)",
    signal.SIGBUS: "crashed inside llama.cpp (SIGBUS)",
    signal.SIGILL: "crashed: this CPU lacks an instruction the llama.cpp build uses (SIGILL)",
    signal.SIGFPE: "crashed inside llama.cpp (SIGFPE)",
    signal.SIGTERM: "was terminated (SIGTERM)",
}


def death_sentence(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        reason = _SIGNAL_REASONS.get(-exitcode, f"was stopped by signal {-exitcode}")
    elif exitcode:
        reason = f"exited with code {exitcode}"
    else:
        reason = "exited unexpectedly"
    return f"The engine process {reason}. Your conversation is saved; the next message starts a fresh engine."


class WorkerProcess:
    """Parent-side handle of one worker process.

    `on_message` is called on a reader thread with every message from the child, then once with
    WorkerDied if the child ends without shutdown() having been called. send() never blocks the
    caller: a writer thread owns the request pipe, so a long conversation cannot stall the GUI
    thread on a full pipe while the child is busy generating.
    """

    def __init__(self, on_message: Callable[[HostMessage], None], log_path: Path | None = None) -> None:
        from app import paths

        self._on_message = on_message
        self._log_path = log_path or paths.logs_dir() / "worker.log"
        self._ctx = multiprocessing.get_context("spawn")
        self._cancels = CancelBoard.create(self._ctx)
        self._outbox: queue.Queue[WorkerRequest | None] = queue.Queue()
        self._closing = False
        self._process: Any = None
        self._last_words: str | None = None

    def start(self) -> None:
        requests_recv, self._requests = self._ctx.Pipe(duplex=False)
        self._events, events_send = self._ctx.Pipe(duplex=False)
        self._process = self._ctx.Process(
            target=worker_main,
            args=(requests_recv, events_send, self._cancels.shared, str(self._log_path)),
            name="tandem-engine",
            daemon=True,
        )
        self._process.start()
        # The parent keeps only its own ends: the child's death then reads as EOF here.
        requests_recv.close()
        events_send.close()
        threading.Thread(target=self._write_loop, name="tandem-worker-writer", daemon=True).start()
        self._reader = threading.Thread(target=self._read_loop, name="tandem-worker-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode if self._process else None

    def is_alive(self) -> bool:
        return bool(self._process and self._process.is_alive())

    def send(self, request: WorkerRequest) -> None:
        self._outbox.put(request)

    def cancel(self, request_id: int) -> None:
        """Stop one reply: the one generating, or one still queued (it then ends at its start)."""
        self._cancels.cancel(request_id)

    def shutdown(self, timeout_s: float = 3.0) -> None:
        """Ask the child to finish; kill it if it does not within timeout_s."""
        if self._process is None:
            return
        self._closing = True
        self._cancels.cancel_all()
        self._outbox.put(ShutdownRequest())
        self._outbox.put(None)
        # The reader thread reaps the child when it exits. Joining the process here as well
        # would race it for waitpid(): the loser sees no exit code and takes the child for alive.
        self._reader.join(timeout_s)
        if self._reader.is_alive():
            self._process.kill()
            self._reader.join(2.0)

    def _write_loop(self) -> None:
        while True:
            request = self._outbox.get()
            if request is None:
                break
            try:
                self._requests.send(request)
            except (BrokenPipeError, OSError):
                break  # the child is gone; the reader reports it
        self._requests.close()

    def _read_loop(self) -> None:
        process = self._process
        while True:
            ready = multiprocessing.connection.wait([self._events, process.sentinel])
            if self._events in ready:
                try:
                    message = self._events.recv()
                except (EOFError, OSError):
                    break
                self._deliver(message)
                continue
            # The child has exited: deliver what it sent before dying, then report.
            try:
                while self._events.poll(0):
                    self._deliver(self._events.recv())
            except (EOFError, OSError):
                pass
            break
        process.join(5.0)
        self._outbox.put(None)
        self._events.close()
        if not self._closing:
            sentence = self._last_words or death_sentence(process.exitcode)
            self._on_message(WorkerDied(process.exitcode, sentence))

    def _deliver(self, message: WorkerMessage) -> None:
        match message:
            case LastWords(sentence=sentence):
                self._last_words = sentence
            case _:
                self._on_message(message)
