"""The engine worker process, driven without Qt: real child processes, real llama.cpp, tiny models."""

from __future__ import annotations

import os
import pickle
import queue
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.host.worker import (
    ChatTurn,
    DraftChanged,
    DraftFailed,
    EngineFailed,
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
)
from engine.config import EngineConfig
from engine.errors import ErrorKind
from engine.events import Finished, Stats, TextPiece

TIMEOUT_S = 60


def config(target: str, **kw: object) -> EngineConfig:
    """One thread: llama.cpp's spinning worker threads collapse when the two cores are shared
    with other processes (64 tokens took 4.7 s with 2 threads under load, 0.04 s with 1)."""
    return EngineConfig(target, n_threads=1, **kw)  # type: ignore[arg-type]


class Inbox:
    """Collects what the worker's reader thread delivers."""

    def __init__(self) -> None:
        self.queue: queue.Queue[object] = queue.Queue()
        self.seen: list[object] = []

    def __call__(self, message: object) -> None:
        self.queue.put(message)

    def wait_for(self, kind: type, timeout_s: float = TIMEOUT_S, predicate=lambda m: True) -> object:  # type: ignore[no-untyped-def]
        while True:
            message = self.queue.get(timeout=timeout_s)
            self.seen.append(message)
            if isinstance(message, kind) and predicate(message):
                return message

    def wait_event(self, kind: type, timeout_s: float = TIMEOUT_S) -> object:
        message = self.wait_for(ReplyEvent, timeout_s, lambda m: isinstance(m.event, kind))
        return message.event  # type: ignore[attr-defined]


@pytest.fixture
def worker() -> Iterator[tuple[WorkerProcess, Inbox]]:
    inbox = Inbox()
    w = WorkerProcess(inbox)
    w.start()
    yield w, inbox
    w.shutdown()


def test_reply_streams_pieces_stats_and_one_finished(worker, tiny_target: Path) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(tiny_target), draft="ngram", n_ctx=1024)))
    loaded = inbox.wait_for(EngineLoaded)
    assert isinstance(loaded, EngineLoaded)
    assert loaded.info.speculation == "ngram" and loaded.info.has_chat_template
    progress = [m for m in inbox.seen if isinstance(m, LoadProgressed)]
    fractions = [m.fraction for m in progress if m.fraction is not None]
    assert fractions and fractions[-1] == 1.0  # llama.cpp's own load progress, to the end
    assert fractions == sorted(fractions)

    w.send(ReplyRequest(7, (ChatTurn("user", "say abc abc abc abc abc"),), max_tokens=64))
    finished = inbox.wait_event(Finished)
    events = [m for m in inbox.seen if isinstance(m, ReplyEvent)]
    assert all(m.request_id == 7 for m in events)
    pieces = [m.event for m in events if isinstance(m.event, TextPiece)]
    assert "".join(p.text for p in pieces) == finished.text
    assert any(isinstance(m.event, Stats) for m in events)
    assert isinstance(events[-1].event, Finished)
    started = next(m for m in inbox.seen if isinstance(m, ReplyStarted))
    assert started.n_dropped_turns == 0 and started.n_prompt_tokens > 0
    # What crosses the pipe must survive pickling unchanged (frozen dataclasses).
    assert pickle.loads(pickle.dumps(finished)) == finished


def test_a_file_that_is_not_a_model_fails_with_a_sentence(worker, tmp_path: Path) -> None:
    w, inbox = worker
    notes = tmp_path / "notes.gguf"
    notes.write_text("shopping list: eggs, milk\n" * 20)
    w.send(LoadRequest(config(str(notes))))
    failed = inbox.wait_for(EngineFailed)
    assert "not a valid GGUF file" in failed.sentence or "GGUF" in failed.sentence
    assert failed.kind is ErrorKind.NOT_GGUF and failed.pair is None
    w.send(ReplyRequest(1, (ChatTurn("user", "hi"),)))
    reply_failed = inbox.wait_for(ReplyFailed)
    assert reply_failed.request_id == 1 and "GGUF" in reply_failed.sentence
    assert reply_failed.kind is ErrorKind.NO_ENGINE
    w.send(SetDraftRequest("ngram"))
    assert inbox.wait_for(DraftFailed).kind is ErrorKind.NO_ENGINE


def test_an_incompatible_draft_leaves_the_target_loaded_and_says_why(
    worker, tiny_target, tiny_incompatible
) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(tiny_target), draft=str(tiny_incompatible), n_ctx=1024)))
    loaded = inbox.wait_for(EngineLoaded)
    assert loaded.info.speculation == "none"
    assert "Draft model not used" in loaded.info.pair_note and "token 40" in loaded.info.pair_note
    # The same refusal as data: the window colours and words it without reading the sentence.
    refusal = loaded.info.draft_refusal
    assert refusal is not None and refusal.kind is ErrorKind.INCOMPATIBLE_PAIR
    assert refusal.pair is not None and refusal.pair.rule == "text of token 40"
    assert refusal.pair.target_value != refusal.pair.draft_value
    assert pickle.loads(pickle.dumps(loaded)) == loaded


def test_set_draft_switches_speculation_and_refuses_an_incompatible_pair(
    worker, tiny_target, tiny_draft, tiny_incompatible
) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(tiny_target), draft=None, n_ctx=1024)))
    assert inbox.wait_for(EngineLoaded).info.speculation == "none"
    w.send(SetDraftRequest(str(tiny_draft)))
    changed = inbox.wait_for(DraftChanged)
    assert changed.info.speculation == "draft" and "compatible" in changed.info.pair_note
    assert changed.info.draft_refusal is None
    w.send(SetDraftRequest(str(tiny_incompatible)))
    refused = inbox.wait_for(DraftFailed)
    assert "token 40" in refused.sentence
    assert refused.kind is ErrorKind.INCOMPATIBLE_PAIR
    assert refused.pair is not None and refused.pair.rule == "text of token 40"
    w.send(ReplyRequest(2, (ChatTurn("user", "hello"),), max_tokens=16))
    assert inbox.wait_event(Finished).stats.speculation == "draft"  # the previous draft stays


def test_cancel_ends_the_reply_as_cancelled(worker, slow_target: Path) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(slow_target), draft="ngram", n_ctx=4096)))
    w.send(ReplyRequest(1, (ChatTurn("user", "tell me a long story"),), max_tokens=3000))
    inbox.wait_event(TextPiece)
    w.cancel()
    finished = inbox.wait_event(Finished)
    assert finished.stop_reason == "cancelled"
    assert finished.stats.n_generated < 3000
    # The next request is not cancelled by the previous Stop.
    w.send(ReplyRequest(2, (ChatTurn("user", "again"),), max_tokens=8))
    assert inbox.wait_event(Finished).stop_reason != "cancelled"


def test_stop_during_a_long_prefill_ends_the_reply_before_its_first_token(worker, slow_target: Path) -> None:
    """A Stop while a long prompt is read is seen between two n_batch chunks, not after them all."""
    w, inbox = worker
    w.send(LoadRequest(config(str(slow_target), draft="ngram", n_ctx=4096, n_batch=8)))
    prompt = " ".join(f"line {i}: the cat sat on the mat." for i in range(75))  # under 2048 tokens
    w.send(ReplyRequest(1, (), prompt=prompt, max_tokens=50))
    started = inbox.wait_for(ReplyStarted)
    assert started.n_prompt_tokens > 1500  # seconds of prefill, 8 tokens a batch
    w.cancel()
    finished = inbox.wait_event(Finished)
    assert not any(isinstance(m, ReplyEvent) and isinstance(m.event, TextPiece) for m in inbox.seen)
    assert finished.stop_reason == "cancelled" and finished.text == ""
    assert 0 <= finished.stats.n_prefilled < started.n_prompt_tokens - 1
    # The next reply reads the rest of the prompt (what was read is cached) and is not cancelled.
    w.send(ReplyRequest(2, (), prompt=prompt, max_tokens=4))
    again = inbox.wait_event(Finished)
    assert again.stop_reason != "cancelled"
    assert again.stats.n_prefilled == started.n_prompt_tokens - finished.stats.n_prefilled


def test_a_killed_worker_is_reported_with_a_sentence(worker, slow_target: Path) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(slow_target), draft="ngram", n_ctx=4096)))
    w.send(ReplyRequest(1, (ChatTurn("user", "tell me a long story"),), max_tokens=3000))
    inbox.wait_event(TextPiece)
    assert w.pid is not None
    os.kill(w.pid, signal.SIGKILL)
    died = inbox.wait_for(WorkerDied)
    assert died.exitcode == -signal.SIGKILL
    assert "killed" in died.sentence and "next message starts a fresh engine" in died.sentence


def test_shutdown_is_not_reported_as_a_death(tiny_target: Path) -> None:
    inbox = Inbox()
    w = WorkerProcess(inbox)
    w.start()
    w.send(LoadRequest(config(str(tiny_target), n_ctx=512)))
    inbox.wait_for(EngineLoaded)
    w.shutdown()
    assert not w.is_alive()
    with pytest.raises(queue.Empty):
        inbox.wait_for(WorkerDied, timeout_s=1.0)


def test_a_prompt_longer_than_the_context_fails_with_a_sentence(worker, tiny_target: Path) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(tiny_target), n_ctx=256)))
    w.send(ReplyRequest(1, (ChatTurn("user", "word " * 400),), max_tokens=16))
    failed = inbox.wait_for(ReplyFailed)
    assert "context holds only 256" in failed.sentence
    assert failed.kind is ErrorKind.PROMPT_TOO_LONG


def test_a_base_model_replies_through_the_worker(worker, tiny_base: Path) -> None:
    w, inbox = worker
    w.send(LoadRequest(config(str(tiny_base), draft="ngram", n_ctx=512)))
    assert not inbox.wait_for(EngineLoaded).info.has_chat_template
    w.send(ReplyRequest(1, (ChatTurn("user", "Once upon a time"),), max_tokens=24))
    finished = inbox.wait_event(Finished)
    assert "\nUser:" not in finished.text
