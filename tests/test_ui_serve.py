"""The window's "Serve API" switch: its own loaded engine on the OpenAI-compatible API."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest
from PySide6.QtCore import Qt

from app.store import Store
from tests.serve_process import free_port


def test_window_serves_its_own_engine(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target)
    pid = window.controller.worker_pid
    toggle = window.serve_toggle
    toggle.port = free_port()
    toggle.action.trigger()
    url = f"http://127.0.0.1:{toggle.port}/v1"
    assert toggle.action.isChecked() and toggle.label.isVisible() and toggle.label.text() == f"API: {url}"

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)
    assert [m.id for m in client.models.list().data] == ["target"]
    r = client.chat.completions.create(
        model="target", messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
    )
    assert r.usage.completion_tokens <= 8
    assert r.model_extra["speculation"] == window.controller.info.speculation == "ngram"
    assert "draft_n" in r.model_extra["timings"]
    chunks = list(client.completions.create(model="target", prompt="the cat", max_tokens=6, stream=True))
    assert chunks[-1].model_extra["timings"]["predicted_n"] <= 6
    # The window's engine answered: no second engine process, and the window knows nothing of it.
    assert window.controller.worker_pid == pid and not window.controller.is_busy

    # The window chats as before, on the same engine.
    window.chat.input.setPlainText("and you?")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    store = Store()
    try:
        rows = store.messages(window.conversation_id)
    finally:
        store.close()
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "complete")]

    toggle.action.trigger()
    assert not toggle.label.isVisible() and toggle.url is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models")


def test_window_serve_says_when_the_port_is_taken(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    toggle = window.serve_toggle
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        toggle.port = busy.getsockname()[1]
        toggle.action.trigger()
        assert not toggle.action.isChecked() and toggle.url is None
        assert toggle.label.text() == (
            f"API not started: cannot listen on 127.0.0.1:{toggle.port}: the port is in use by another program"
        )


def test_api_client_leaving_never_stops_the_windows_reply(
    qtbot, open_window, wait_reply, slow_target
) -> None:
    """The engine has one cancel flag: an API request queued behind the window's reply, whose
    client leaves, is cancelled when it starts, and the window's reply runs to its end."""
    window = open_window(slow_target, max_tokens=400)
    toggle = window.serve_toggle
    toggle.port = free_port()
    toggle.action.trigger()
    window.chat.input.setPlainText("Tell me a story")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.live is not None and window.controller.is_busy, timeout=30_000)
    body = {"prompt": "the", "max_tokens": 50, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):  # still queued behind the window's reply; the client leaves
        httpx.post(f"{toggle.url}/completions", json=body, timeout=httpx.Timeout(10, read=0.3))
    assert toggle.host is not None and toggle.host.load()["generating"] == 1
    wait_reply(window)
    store = Store()
    try:
        rows = store.messages(window.conversation_id)
    finally:
        store.close()
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "complete")]
    qtbot.waitUntil(lambda: toggle.host.load()["generating"] == 0, timeout=30_000)
    r = httpx.post(
        f"{toggle.url}/completions", json={"prompt": "a", "max_tokens": 3, "temperature": 0}, timeout=30
    )
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3
    toggle.action.trigger()
