"""A stop belongs to one request (issue 28, item 2): Stop in the window and an API client leaving
end their own reply only, never one queued behind or before it. Real worker processes, a real
window under pytest-qt, a real local server and real HTTP clients."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from serve_process import free_port

from app.host.messages import ChatTurn, LoadRequest, ReplyEvents, ReplyRequest, ReplyStarted
from app.host.worker import WorkerProcess
from engine.config import NGRAM_LOOKUP, EngineConfig
from engine.events import Finished, TextPiece
from tests.waiting import wait_until


class Inbox:
    def __init__(self) -> None:
        self.seen: list[object] = []
        self.lock = threading.Lock()

    def __call__(self, message: object) -> None:
        with self.lock:
            self.seen.append(message)

    def finished(self, request_id: int) -> Finished | None:
        with self.lock:
            for m in self.seen:
                if isinstance(m, ReplyEvents) and m.request_id == request_id and m.finished is not None:
                    return m.finished
        return None

    def has_text(self, request_id: int) -> bool:
        with self.lock:
            return any(
                isinstance(m, ReplyEvents)
                and m.request_id == request_id
                and any(isinstance(e, TextPiece) for e in m.events)
                for m in self.seen
            )


@pytest.fixture
def worker(tmp_path: Path):  # type: ignore[no-untyped-def]
    inbox = Inbox()
    w = WorkerProcess(inbox, log_path=tmp_path / "worker.log")
    w.start()
    yield w, inbox
    w.shutdown()


def test_stopping_one_request_leaves_the_one_queued_behind_it(worker, slow_target: Path) -> None:  # type: ignore[no-untyped-def]
    w, inbox = worker
    w.send(LoadRequest(EngineConfig(str(slow_target), draft=NGRAM_LOOKUP, n_ctx=2048, n_threads=1)))
    w.send(ReplyRequest(1, (ChatTurn("user", "tell me a long story"),), max_tokens=1500))
    w.send(ReplyRequest(2, (), prompt="the cat", max_tokens=12))
    wait_until(lambda: inbox.has_text(1), 60, "the first reply's text")
    w.cancel(1)
    wait_until(lambda: inbox.finished(2) is not None, 60, "the second reply")
    first, second = inbox.finished(1), inbox.finished(2)
    assert first is not None and first.stop_reason == "cancelled"
    assert second is not None and second.stop_reason != "cancelled" and second.stats.n_generated > 0


def test_a_request_stopped_while_queued_ends_at_its_start_and_spares_the_running_one(
    worker, slow_target: Path
) -> None:  # type: ignore[no-untyped-def]
    w, inbox = worker
    w.send(LoadRequest(EngineConfig(str(slow_target), draft=NGRAM_LOOKUP, n_ctx=2048, n_threads=1)))
    # The first reply is long (1500 tokens, seconds on the slow target; greedy, it does not end on
    # its own), so the stop for request 2 lands while 2 is surely still queued. "once upon a time"
    # ends after 2 tokens here, which let request 2 start before its stop on a quiet machine.
    w.send(ReplyRequest(1, (), prompt="the cat", max_tokens=1500))
    w.send(ReplyRequest(2, (), prompt="once upon a time", max_tokens=200))
    w.send(ReplyRequest(3, (), prompt="a dog", max_tokens=5))
    wait_until(lambda: inbox.has_text(1), 60, "the first reply's text")
    w.cancel(2)  # queued: the client of request 2 left before its turn
    assert not any(isinstance(m, ReplyStarted) and m.request_id == 2 for m in list(inbox.seen)), (
        "request 2 started before its stop was posted: the first reply is too short for this test"
    )
    wait_until(lambda: inbox.finished(3) is not None, 60, "the third reply")
    first, second, third = inbox.finished(1), inbox.finished(2), inbox.finished(3)
    assert first is not None and first.stop_reason != "cancelled" and first.stats.n_generated > 0
    assert second is not None and second.stop_reason == "cancelled" and second.stats.n_generated == 0
    assert third is not None and third.stop_reason != "cancelled"
    assert any(isinstance(m, ReplyStarted) and m.request_id == 2 for m in inbox.seen)


# ---- the window and the API on one engine


pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from app.store import Store  # noqa: E402


def _reply_rows(window):  # type: ignore[no-untyped-def]
    store = Store()
    try:
        return [(m.role, m.status, m.content) for m in store.messages(window.presenter.conversation_id)]
    finally:
        store.close()


def test_stop_in_the_window_spares_an_api_request_queued_behind_its_reply(
    qtbot, open_window, wait_reply, slow_target
) -> None:  # type: ignore[no-untyped-def]
    """Today's drill #1(a): the API client used to get 200, empty text, finish_reason "stop"."""
    window = open_window(slow_target, max_tokens=400, serve_port=free_port())
    toggle = window.serve_toggle
    toggle.action.trigger()
    window.chat.input.setPlainText("Tell me a story")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: window.presenter.replies.live is not None and window.controller.is_busy, timeout=30_000
    )
    out: dict[str, httpx.Response] = {}
    body = {"prompt": "the", "max_tokens": 20, "temperature": 0}
    client = threading.Thread(
        target=lambda: out.update(r=httpx.post(f"{toggle.url}/completions", json=body, timeout=120))
    )
    client.start()
    assert toggle.host is not None
    # Both in the engine: the API request queued behind the window's reply, still generating.
    qtbot.waitUntil(
        lambda: toggle.host.load()["generating"] == 1 and window.controller.is_busy, timeout=10_000
    )
    window.chat.stop_requested.emit()
    wait_reply(window)
    client.join(120)
    r = out["r"]
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] > 0, r.text
    assert r.json()["choices"][0]["text"]
    assert _reply_rows(window)[-1][:2] == ("assistant", "cancelled")
    toggle.action.trigger()


def test_an_api_client_leaving_mid_stream_spares_the_windows_reply_queued_behind(
    qtbot, open_window, wait_reply, slow_target
) -> None:  # type: ignore[no-untyped-def]
    """Today's drill #1(b): the window's reply used to end "cancelled" though nobody pressed Stop."""
    window = open_window(slow_target, max_tokens=30, serve_port=free_port())
    toggle = window.serve_toggle
    toggle.action.trigger()
    body = {"prompt": "the", "max_tokens": 2000, "temperature": 0, "stream": True, "speculation": "off"}
    with httpx.Client(timeout=60) as http, http.stream("POST", f"{toggle.url}/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(line for line in lines if line.startswith("data: ") and '"text"' in line)
        window.chat.input.setPlainText("Tell me a story")
        qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
        # Both in the engine: the window's reply queued behind the client's, still streaming.
        qtbot.waitUntil(
            lambda: window.controller.is_busy and toggle.host.load()["generating"] == 1, timeout=10_000
        )
    # The client has left mid-stream: its reply stops, the window's runs to its end.
    wait_reply(window, timeout_ms=120_000)
    role, status, content = _reply_rows(window)[-1]
    assert (role, status) == ("assistant", "complete") and content
    toggle.action.trigger()
