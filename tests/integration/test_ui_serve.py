"""The window's "Serve API" switch: its own loaded engine on the OpenAI-compatible API."""

from __future__ import annotations

import dataclasses
import socket

import httpx
import openai
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLineEdit

from app.store import Store
from tests.serve_process import free_port


def test_window_serves_its_own_engine(qtbot, open_window, wait_reply, tiny_target) -> None:
    port = free_port()
    window = open_window(tiny_target, serve_port=port)
    pid = window.controller.supervisor.pid
    toggle = window.serve_toggle
    toggle.action.trigger()
    url = f"http://127.0.0.1:{port}/v1"
    assert toggle.action.isChecked() and toggle.label.isVisible() and toggle.label.text() == f"API: {url}"
    assert toggle.url == toggle.address == url

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
    assert window.controller.supervisor.pid == pid and not window.controller.is_busy

    # The window chats as before, on the same engine.
    window.chat.input.setPlainText("and you?")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    store = Store()
    try:
        rows = store.messages(window.presenter.conversation_id)
    finally:
        store.close()
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "complete")]

    toggle.action.trigger()
    assert not toggle.label.isVisible() and toggle.url is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models")


def test_window_serve_says_when_the_port_is_taken(qtbot, open_window, tiny_target) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        window = open_window(tiny_target, serve_port=port)
        toggle = window.serve_toggle
        toggle.action.trigger()
        assert not toggle.action.isChecked() and toggle.url is None
        assert toggle.label.text() == (
            f"API not started: cannot listen on 127.0.0.1:{port}: the port is in use by another program"
        )


def test_api_client_leaving_never_stops_the_windows_reply(
    qtbot, open_window, wait_reply, slow_target
) -> None:
    """The engine has one cancel flag: an API request queued behind the window's reply, whose
    client leaves, is cancelled when it starts, and the window's reply runs to its end."""
    window = open_window(slow_target, max_tokens=400, serve_port=free_port())
    toggle = window.serve_toggle
    toggle.action.trigger()
    window.chat.input.setPlainText("Tell me a story")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    qtbot.waitUntil(
        lambda: window.presenter.replies.live is not None and window.controller.is_busy, timeout=30_000
    )
    body = {"prompt": "the", "max_tokens": 50, "temperature": 0}
    with pytest.raises(httpx.ReadTimeout):  # still queued behind the window's reply; the client leaves
        httpx.post(f"{toggle.url}/completions", json=body, timeout=httpx.Timeout(10, read=0.3))
    assert toggle.host is not None and toggle.host.load()["generating"] == 1
    wait_reply(window)
    store = Store()
    try:
        rows = store.messages(window.presenter.conversation_id)
    finally:
        store.close()
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "complete")]
    qtbot.waitUntil(lambda: toggle.host.load()["generating"] == 0, timeout=30_000)
    r = httpx.post(
        f"{toggle.url}/completions", json={"prompt": "a", "max_tokens": 3, "temperature": 0}, timeout=30
    )
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3
    toggle.action.trigger()


def test_window_serve_follows_its_settings(qtbot, open_window, tiny_target) -> None:
    """Settings → API port and key are honoured; changing them while serving moves the server."""
    port, key = free_port(), "s3cret-key"
    window = open_window(tiny_target, serve_port=port, serve_api_key=key)
    toggle = window.serve_toggle
    toggle.action.trigger()
    url = f"http://127.0.0.1:{port}/v1"
    assert toggle.url == url and toggle.label.text() == f"API: {url} · key required"

    def ask(base_url: str, api_key: str) -> str:
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)
        r = client.chat.completions.create(
            model="target", messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0
        )
        return str(r.choices[0].finish_reason)

    with pytest.raises(openai.AuthenticationError) as refused:
        ask(url, "wrong")
    assert refused.value.status_code == 401 and "API key is not valid" in str(refused.value)
    assert httpx.get(f"{url}/models").status_code == 401  # no key at all
    assert ask(url, key) in ("stop", "length")

    # A new port and key while serving: the server moves; the old address answers nothing.
    new_port, new_key = free_port(), "other-key"
    window.apply_settings(
        dataclasses.replace(window.presenter.settings, serve_port=new_port, serve_api_key=new_key)
    )
    new_url = f"http://127.0.0.1:{new_port}/v1"
    assert toggle.action.isChecked() and toggle.url == new_url
    assert toggle.label.text() == f"API: {new_url} · key required"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models")
    with pytest.raises(openai.AuthenticationError):
        ask(new_url, key)
    assert ask(new_url, new_key) in ("stop", "length")

    # Only the key changes: the same server takes it from the next request.
    server = toggle.server
    window.apply_settings(dataclasses.replace(window.presenter.settings, serve_api_key=""))
    assert toggle.server is server and toggle.label.text() == f"API: {new_url}"
    assert httpx.get(f"{new_url}/models").status_code == 200

    # A port taken by another program: the reason shows and the switch turns off.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        window.apply_settings(dataclasses.replace(window.presenter.settings, serve_port=taken))
        assert not toggle.action.isChecked() and toggle.url is None
        assert toggle.label.isVisible() and toggle.label.text() == (
            f"API not started: cannot listen on 127.0.0.1:{taken}: the port is in use by another program"
        )
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{new_url}/models")


def test_window_serve_to_other_computers_warns_without_a_key(qtbot, open_window, tiny_target) -> None:
    port = free_port()
    window = open_window(tiny_target, serve_port=port, serve_public=True)
    toggle = window.serve_toggle
    toggle.action.trigger()
    assert toggle.server is not None and toggle.server.sock.getsockname()[:2] == ("0.0.0.0", port)
    assert toggle.address is not None and toggle.address.endswith(f":{port}/v1")
    assert toggle.label.text() == (
        f"API: {toggle.address} · warning: no API key: anyone who can reach this computer on the "
        "network can use the model"
    )
    assert f"On this computer: http://127.0.0.1:{port}/v1" in toggle.label.toolTip()
    assert httpx.get(f"{toggle.url}/models").json()["data"][0]["id"] == "target"
    # With a key the warning goes; back to this computer only, the server moves to 127.0.0.1.
    window.apply_settings(dataclasses.replace(window.presenter.settings, serve_api_key="k"))
    assert "warning" not in toggle.label.text() and toggle.label.text().endswith("· key required")
    window.apply_settings(dataclasses.replace(window.presenter.settings, serve_public=False))
    assert toggle.server.sock.getsockname()[:2] == ("127.0.0.1", port)
    assert toggle.label.text() == f"API: http://127.0.0.1:{port}/v1 · key required"
    toggle.action.trigger()


def test_serve_settings_fields(qtbot) -> None:
    from app.settings import Settings
    from ui.settings.settings_dialog import SettingsDialog

    dialog = SettingsDialog(Settings(), gpu_offload_supported=False)
    qtbot.addWidget(dialog)
    serve = dialog.serve
    assert serve.port.value() == 8080 and (serve.port.minimum(), serve.port.maximum()) == (1, 65535)
    assert not serve.public.isChecked() and serve.warning.isHidden()
    serve.api_key.setText("abc")
    assert serve.api_key.echoMode() == QLineEdit.EchoMode.Password
    serve.show_key.click()
    assert serve.api_key.echoMode() == QLineEdit.EchoMode.Normal and serve.show_key.text() == "Hide"
    serve.show_key.click()
    assert serve.api_key.echoMode() == QLineEdit.EchoMode.Password and serve.show_key.text() == "Show"
    serve.public.setChecked(True)
    assert serve.warning.isHidden()  # a key is set
    serve.api_key.clear()
    assert not serve.warning.isHidden() and "anyone who can reach this computer" in serve.warning.text()
    serve.port.setValue(9191)
    s = dialog.result_settings()
    assert (s.serve_port, s.serve_api_key, s.serve_public, s.serve_host) == (9191, "", True, "0.0.0.0")
    serve.api_key.setText("  k  ")
    assert dialog.result_settings().serve_api_key == "k"


def test_a_hand_edited_serve_port_out_of_range_is_the_default(tmp_path) -> None:
    import json

    from app.settings import load_settings

    path = tmp_path / "settings.json"
    for bad in (0, 70000, -1, "8080", True):
        path.write_text(json.dumps({"serve_port": bad, "serve_public": True}))
        s = load_settings(path)
        assert (s.serve_port, s.serve_public) == (8080, True)
    path.write_text(json.dumps({"serve_port": 1234}))
    assert load_settings(path).serve_port == 1234
