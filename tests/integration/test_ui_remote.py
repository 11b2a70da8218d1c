"""The window on a server's engine (Settings → Engine → A server): `tandem serve` and llama.cpp's
own `llama-server`, both real processes on 127.0.0.1; chat, Stop, Regenerate, Edit, the tint,
the server's acceptance, and a server that vanishes mid-reply."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.host.remote_worker import NO_DRAFT_MARKS
from app.settings import EngineKind, load_settings
from app.store import Store
from tests.integration.test_remote import llama_server  # noqa: F401 (a fixture)
from tests.looping_server import looping_server as serve_loop
from tests.looping_server import silent_server as hung_server
from tests.serve_process import ServeProcess, free_port
from tests.ui.test_ui_speculation import _tinted_text
from ui.settings.remote_engine import LOCAL_ONLY_TIP


def _rows(window, include_superseded: bool = False):  # type: ignore[no-untyped-def]
    store = Store()
    try:
        return store.messages(window.presenter.conversation_id, include_superseded)
    finally:
        store.close()


@pytest.fixture(scope="module")
def server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    # Drafting always (--fixed-draft): whether drafting pays on this tiny model is the controller's
    # call, and on a busy machine it rightly drafts next to nothing; these tests are about how the
    # server's drafted text travels and is shown.
    s = ServeProcess(
        home,
        "--model",
        str(tiny_target),
        "--draft",
        "ngram",
        "--fixed-draft",
        "--threads",
        "1",
        "--api-key",
        "k1",
    )
    try:
        yield s.started()
    finally:
        s.stop()


def _remote_window(open_window, url: str, key: str = "", **changes):  # type: ignore[no-untyped-def]
    window = open_window(
        Path("unused.gguf"), wait_loaded=False, engine="remote", remote_url=url, remote_api_key=key, **changes
    )
    return window


def test_settings_engine_fetches_models_and_says_what_fails(qtbot, server: ServeProcess) -> None:
    from ui.settings.settings_dialog import SettingsDialog

    dialog = SettingsDialog(load_settings(), gpu_offload_supported=False)
    qtbot.addWidget(dialog)
    fields = dialog.remote
    assert not fields.url.isEnabled()  # "This computer"
    fields.engine.setCurrentIndex(fields.engine.findData("remote"))
    assert fields.url.isEnabled() and fields.fetch_button.isEnabled()

    # Nothing listening: one line naming the address.
    port = free_port()
    fields.url.setText(f"127.0.0.1:{port}")
    fields.fetch_button.click()
    qtbot.waitUntil(lambda: fields.fetch_button.isEnabled(), timeout=20_000)
    assert fields.error.text() == f"Nothing is listening at http://127.0.0.1:{port}/v1 (connection refused)"

    # A key is needed, then a wrong one.
    fields.url.setText(server.url)
    fields.fetch_button.click()
    qtbot.waitUntil(lambda: fields.fetch_button.isEnabled(), timeout=20_000)
    assert fields.error.text().startswith(f"{server.url} needs an API key (HTTP 401")
    assert fields.error.text().endswith("fill in the API key")
    fields.api_key.setText("nope")
    fields.fetch_button.click()
    qtbot.waitUntil(lambda: fields.fetch_button.isEnabled(), timeout=20_000)
    assert fields.error.text().startswith(f"{server.url} refused the API key")

    fields.api_key.setText("k1")
    fields.fetch_button.click()
    qtbot.waitUntil(lambda: fields.fetch_button.isEnabled(), timeout=20_000)
    assert [fields.model.itemText(i) for i in range(fields.model.count())] == ["target"]
    assert fields.model.currentText() == "target" and fields.error.text() == "1 model on the server"
    new = dialog.result_settings()
    assert (new.engine, new.remote_url, new.remote_api_key, new.remote_model) == (
        "remote",
        server.url,
        "k1",
        "target",
    )

    # An address that cannot work keeps the dialog open and says why.
    accepted: list[bool] = []
    dialog.accepted.connect(lambda: accepted.append(True))
    fields.url.setText("ftp://x")
    dialog.accept()
    assert not accepted
    assert fields.error.text() == "The server address must be an http:// or https:// address (got 'ftp://x')"
    fields.url.setText(server.url)
    dialog.accept()
    assert accepted


def test_window_chats_through_tandem_serve(qtbot, open_window, wait_reply, tiny_target, server) -> None:  # type: ignore[no-untyped-def]
    # Start on this computer's engine, then switch in Settings: the local engine ends.
    window = open_window(tiny_target, max_tokens=200, repeat_penalty=1.0)
    assert window.controller.supervisor.pid is not None
    window.apply_settings(
        dataclasses.replace(
            window.presenter.settings,
            engine=EngineKind.REMOTE,
            remote_url=server.url,
            remote_api_key="k1",
            remote_model="target",
        )
    )
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
    info = window.controller.info
    assert info.target_path == server.url and info.speculation == "ngram"
    assert server.url in window.header.model_combo.line.toolTip()  # the picker names the server
    assert window.header.state_label.text().startswith("The server decides its speed-up")
    assert window.controller.supervisor.pid is None  # no engine process here
    assert not window.header.speed_combo.isEnabled() and not window.choose_draft_action.isEnabled()
    assert window.header.speed_combo.toolTip() == window.choose_draft_action.toolTip() == LOCAL_ONLY_TIP
    settings = load_settings()
    assert (settings.engine, settings.remote_url, settings.remote_api_key) == ("remote", server.url, "k1")

    window.presenter.send("abc abc abc abc abc abc abc abc abc abc")
    wait_reply(window)
    rows = _rows(window)
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "complete")]
    reply = rows[-1]
    assert reply.content and reply.spans, "tandem serve marked no drafted text on a repetitive reply"
    widget = window.chat.widget_for(reply.id)
    assert _tinted_text(widget.body.document())
    # The numbers are the server's own: its timings, shown in the indicator.
    stats = reply.stats
    assert stats["speculation"] == "ngram" and 0 < stats["n_accepted"] <= stats["n_drafted"]
    assert not stats["note"]  # tandem serve tells which tokens were drafted
    rate = stats["n_accepted"] / stats["n_drafted"]
    assert ("Guesses confirmed", f"{rate:.0%}") in widget.detail_rows

    # Regenerate: the first reply is superseded; greedy, so the same text comes again.
    window.presenter.regenerate()
    wait_reply(window)
    rows = _rows(window)
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "complete")]
    assert rows[-1].content == reply.content and rows[-1].id != reply.id

    # Edit the question: what followed it is superseded, the new one answered.
    window.on_chat_edit_requested(rows[0].id)
    window.chat.input.setPlainText("hello there")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    rows = _rows(window)
    assert [(m.role, m.content[:11] if m.role == "user" else m.status) for m in rows] == [
        ("user", "hello there"),
        ("assistant", "complete"),
    ]
    assert len(_rows(window, include_superseded=True)) == 5  # superseded rows are kept

    # History: the next message goes with the conversation before it (the server's prompt count).
    first = rows[-1].stats
    window.presenter.send("and more")
    wait_reply(window)
    rows = _rows(window)
    assert [m.role for m in rows] == ["user", "assistant", "user", "assistant"]
    assert rows[-1].stats["n_prompt_tokens"] > first["n_prompt_tokens"] + first["n_generated"] // 2

    # Compare: the plain run asks tandem serve for `"speculation": "off"`, the other drafts.
    window.tabs.setCurrentWidget(window.compare)
    window.compare.prompt.setPlainText("Repeat: the cat sat on the mat, the cat sat on the mat.")
    qtbot.mouseClick(window.compare.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(window.compare.final_stats) == 2, timeout=60_000)
    wait_reply(window)
    plain, speculative = window.compare.final_stats["plain"], window.compare.final_stats["speculative"]
    assert (plain.speculation, plain.n_drafted) == ("none", 0) and speculative.speculation == "ngram"
    assert window.compare.plain.text and window.compare.plain.text == window.compare.speculative.text
    window.tabs.setCurrentIndex(0)

    # Back to this computer: a local engine process again, the speculation switch back on.
    window.apply_settings(dataclasses.replace(window.presenter.settings, engine=EngineKind.LOCAL))
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=60_000)
    assert window.controller.info.target_path == str(tiny_target) and window.controller.supervisor.pid
    assert window.header.speed_combo.isEnabled() and window.choose_draft_action.isEnabled()
    assert window.header.speed_combo.toolTip().endswith("Applies from the next reply.")
    window.presenter.send("and here?")
    wait_reply(window)
    assert _rows(window)[-1].status == "complete"


def test_window_stop_and_a_server_killed_mid_reply(
    qtbot, open_window, wait_reply, slow_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    s = ServeProcess(tmp_path, "--model", str(slow_target), "--threads", "1", "--ctx", "2048").started()
    try:
        window = _remote_window(open_window, s.url, max_tokens=2000)
        qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)

        # Stop: the reply ends where it was, marked stopped.
        window.presenter.send("Tell me a story")
        qtbot.waitUntil(
            lambda: (
                window.presenter.replies.live is not None
                and len(window.presenter.replies.live.reply.text) > 5
            ),
            timeout=30_000,
        )
        window.chat.stop_requested.emit()
        wait_reply(window)
        rows = _rows(window)
        assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "cancelled")]
        assert rows[-1].content
        stopped = window.chat.widget_for(rows[-1].id)
        assert "Highlight" not in dict(stopped.detail_rows)  # tandem serve marks its drafts

        # The server vanishes mid-reply while the user types the next message.
        window.presenter.send("Another one")
        qtbot.waitUntil(
            lambda: (
                window.presenter.replies.live is not None
                and len(window.presenter.replies.live.reply.text) > 5
            ),
            timeout=30_000,
        )
        window.chat.input.setPlainText("my next question, half written")
        s.proc.kill()
        s.proc.wait(10)
        wait_reply(window)
        rows = _rows(window)
        assert [(m.role, m.status) for m in rows][-2:] == [("user", "complete"), ("assistant", "interrupted")]
        assert rows[-1].content  # the partial reply is kept
        assert rows[-2].content == "Another one"
        assert window.chat.input.toPlainText() == "my next question, half written"
        notice = window.chat.notice.text()
        assert notice.startswith(f"The stream from {s.url} was cut after "), notice
        assert "\n" not in notice
    finally:
        s.stop()


def test_window_shows_llama_servers_acceptance(qtbot, open_window, wait_reply, llama_server: str) -> None:  # noqa: F811
    window = _remote_window(open_window, llama_server, max_tokens=48, repeat_penalty=1.0)
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
    assert window.controller.info.target_path == f"{llama_server}/v1"
    window.presenter.send("the cat sat on the mat")
    wait_reply(window)
    reply = _rows(window)[-1]
    assert reply.status == "complete" and reply.content
    stats = reply.stats
    # llama-server's own counts, from its timings: it drafted with its draft model.
    assert stats["speculation"] == "draft" and stats["n_drafted"] > 0
    assert 0 <= stats["n_accepted"] <= stats["n_drafted"]
    rate = stats["n_accepted"] / stats["n_drafted"]
    rows = dict(window.chat.widget_for(reply.id).detail_rows)
    assert rows["Guesses confirmed"] == f"{rate:.0%}"
    assert "Tokens a step" not in rows  # it does not say in how many steps: unknown, not 0
    # llama-server does not say which tokens were drafted: no tint, and the window says so.
    assert not reply.spans
    assert stats["note"] == NO_DRAFT_MARKS
    assert rows["Highlight"] == "the server does not say which words it reused"


def test_on_a_server_a_chip_keeps_its_estimate(qtbot, open_window, tiny_target, server) -> None:  # type: ignore[no-untyped-def]
    """The engine changes to a server's: a chip counted by this computer's model shows its
    estimate again (the server's tokenizer is not asked), and no count is waited for."""
    window = open_window(tiny_target)
    tray = window.chat.attachments
    tray.add_text("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n")
    (chip,) = tray.chips()
    qtbot.waitUntil(lambda: chip.n_tokens is not None, timeout=30_000)
    assert " about " not in chip.label.text()
    window.apply_settings(
        dataclasses.replace(
            window.presenter.settings,
            engine=EngineKind.REMOTE,
            remote_url=server.url,
            remote_api_key="k1",
            remote_model="target",
        )
    )
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
    assert window.controller.info.server
    assert chip.n_tokens is None and " about " in chip.label.text() and not tray._counting


def test_tandem_serve_marks_drafted_text_per_chunk(server: ServeProcess) -> None:
    """The extension the window tints from: `"tandem": {"drafted", "n_tokens"}` on each text chunk,
    and llama-server's `timings_per_token` (timings on every chunk once the engine reported any)."""
    import json

    import httpx

    def chunks(**extra: object) -> list[dict]:
        # Sampled with a seed: greedy, the tiny model loops, and the loop guard ends the reply
        # within its first tenth of a second (one timings chunk); sampled, it runs on.
        body = {"messages": [{"role": "user", "content": "abc abc abc abc abc abc abc abc abc abc"}],
                "max_tokens": 1500, "temperature": 1.0, "seed": 7, "repeat_penalty": 1.0, "stream": True, **extra}  # fmt: skip
        out = []
        with httpx.stream("POST", f"{server.url}/chat/completions", json=body, timeout=60,
                          headers={"Authorization": "Bearer k1"}) as r:  # fmt: skip
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    out.append(json.loads(line[6:]))
        return out

    got = chunks(timings_per_token=True)
    texts = [c for c in got if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert texts and all(set(c["tandem"]) == {"drafted", "n_tokens"} for c in texts)
    final = got[-1]["timings"]
    drafted_tokens = sum(c["tandem"]["n_tokens"] for c in texts if c["tandem"]["drafted"])
    # Accepted tokens whose text joins a token the target wrote are sent as the target's.
    assert 0 < drafted_tokens <= final["draft_n_accepted"], final
    assert sum(c["tandem"]["n_tokens"] for c in texts) == final["predicted_n"]
    with_timings = [c for c in texts if "timings" in c]
    assert len(with_timings) > 1
    assert [c["timings"]["predicted_n"] for c in with_timings] == sorted(
        c["timings"]["predicted_n"] for c in with_timings
    )
    # Not asked: text chunks carry no timings (the last chunk still does).
    plain = chunks()
    assert not any("timings" in c for c in plain[:-1]) and "timings" in plain[-1]
    assert all("tandem" in c for c in plain if c["choices"] and c["choices"][0]["delta"].get("content"))


def test_remote_worker_speaks_the_workers_messages(server: ServeProcess) -> None:
    """RemoteWorker in WorkerProcess's shape: loaded, started, text with its draft marks, the
    server's numbers while it streams (not only at the end), finished; Stop ends it as cancelled."""
    import queue

    from app.host.messages import (
        ChatTurn,
        EngineLoaded,
        LoadRequest,
        ReplyEvents,
        ReplyRequest,
        ReplyStarted,
        TokenCountFailed,
        TokenCountRequest,
    )
    from app.host.remote_worker import RemoteTarget, RemoteWorker
    from engine.config import EngineConfig, SamplingParams
    from engine.events import Finished, Stats, TextPiece

    inbox: queue.Queue[object] = queue.Queue()
    worker = RemoteWorker(inbox.put, RemoteTarget(server.url, "k1"))
    worker.start()

    def until_finished() -> list[object]:
        out = []
        while True:
            message = inbox.get(timeout=60)
            out.append(message)
            if isinstance(message, ReplyEvents) and message.finished is not None:
                return out

    try:
        assert worker.is_alive() and worker.pid is None
        worker.send(LoadRequest(EngineConfig(target_path="")))
        loaded = inbox.get(timeout=30)
        while not isinstance(loaded, EngineLoaded):
            loaded = inbox.get(timeout=30)
        assert loaded.info.target_name == "target" and loaded.info.speculation == "ngram"
        # A count is not the server's to make: said at once, and the window keeps its estimate.
        worker.send(TokenCountRequest(9, ("abc",)))
        answer = inbox.get(timeout=30)
        assert isinstance(answer, TokenCountFailed) and answer.request_id == 9
        turns = (ChatTurn("user", "abc abc abc abc abc abc abc abc abc abc"),)
        # Sampled with a seed: greedy, the tiny model loops and the loop guard ends it at once.
        params = SamplingParams(temperature=1.0, repeat_penalty=1.0, seed=7)
        # Long enough for the engine's stats (every 0.1 s) to come several times.
        worker.send(ReplyRequest(1, turns, params=params, max_tokens=1500))
        messages = until_finished()
        assert isinstance(messages[0], ReplyStarted)
        events = [e for m in messages if isinstance(m, ReplyEvents) for e in m.events]
        pieces = [e for e in events if isinstance(e, TextPiece)]
        finished = events[-1]
        assert isinstance(finished, Finished) and finished.text == "".join(p.text for p in pieces)
        assert any(p.is_draft for p in pieces)
        live = [e for e in events[:-1] if isinstance(e, Stats)]
        assert len(live) > 1 and live[-1].n_generated > live[0].n_generated  # acceptance as it goes
        assert finished.stats.n_drafted >= live[-1].n_drafted > 0

        # Stop: cancelled at once, the text so far kept.
        worker.send(ReplyRequest(2, turns, params=params, max_tokens=2000))
        worker.cancel(2)
        finished = until_finished()[-1].finished
        assert finished.stop_reason == "cancelled"
    finally:
        worker.shutdown()
    assert not worker.is_alive()


def test_window_says_when_nothing_listens_and_uses_the_server_once_it_does(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    window = _remote_window(open_window, f"127.0.0.1:{port}")
    expected = f"Nothing is listening at {url} (connection refused)."
    qtbot.waitUntil(lambda: expected in window.chat.notice.text(), timeout=30_000)
    assert window.controller.info is None
    assert window.header.model_combo.line.text() == f"Server unavailable: 127.0.0.1:{port}"

    window.presenter.send("are you there?")
    wait_reply(window)
    assert window.chat.notice.text() == f"No reply: {expected}"
    assert [(m.role, m.content) for m in _rows(window)] == [("user", "are you there?")]  # kept

    s = ServeProcess(tmp_path, "--model", str(tiny_target), "--threads", "1", port=port).started()
    try:
        window.presenter.regenerate()  # the next try connects again
        wait_reply(window)
        assert [(m.role, m.status) for m in _rows(window)] == [
            ("user", "complete"),
            ("assistant", "complete"),
        ]
        assert window.controller.info is not None and window.controller.info.target_path == url
        assert url in window.header.model_combo.line.toolTip()  # the picker names the server
        assert window.header.state_label.text().startswith("The server decides its speed-up")
        # The picker and the suggested tasks no longer say the server is unavailable.
        assert not window.header.model_combo.line.text().startswith("Server unavailable")
        assert window.chat.empty_state.refusal("Repeat a paragraph exactly") == ""
    finally:
        s.stop()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that lists a model and then never answers a completion."""
    with hung_server() as url:
        yield url


def test_stop_answers_while_the_server_is_silent(qtbot, open_window, wait_reply, silent_server: str) -> None:
    window = _remote_window(open_window, silent_server)
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
    window.presenter.send("a question the server never answers")
    qtbot.waitUntil(
        lambda: window.presenter.replies.live is not None and window.controller.is_busy, timeout=5_000
    )
    window.chat.stop_requested.emit()
    wait_reply(window, timeout_ms=10_000)  # not the 600 s read timeout
    rows = _rows(window)
    assert rows[0].content == "a question the server never answers"
    assert [(m.role, m.status) for m in rows] == [("user", "complete"), ("assistant", "cancelled")]


def test_a_servers_fields_reload_the_engine_only_when_a_server_is_used() -> None:
    from app.settings import Settings
    from ui.settings.settings_dialog import needs_reload

    local = Settings()
    assert not needs_reload(local, dataclasses.replace(local, remote_url="10.0.0.2:8080", remote_model="m"))
    remote = dataclasses.replace(local, engine=EngineKind.REMOTE, remote_url="10.0.0.2:8080")
    assert needs_reload(local, remote) and needs_reload(remote, local)
    assert needs_reload(remote, dataclasses.replace(remote, remote_model="m"))
    assert needs_reload(remote, dataclasses.replace(remote, remote_api_key="k"))
    assert needs_reload(local, dataclasses.replace(local, n_ctx=1024))


def test_local_only_fields_are_greyed_out_while_a_server_is_chosen(qtbot) -> None:
    from app.settings import Settings
    from ui.settings.remote_engine import LOCAL_ONLY_TIP
    from ui.settings.settings_dialog import SettingsDialog

    # A build without GPU offload: GPU layers is disabled for its own reason, and stays so.
    dialog = SettingsDialog(
        Settings(engine=EngineKind.REMOTE, remote_url="10.0.0.2:8080"), gpu_offload_supported=False
    )
    qtbot.addWidget(dialog)
    local_only = [dialog.threads, dialog.context, dialog.gpu_layers, dialog.rpc_servers,
                  dialog.repeat_last_n, dialog.adaptive, dialog.draft_max]  # fmt: skip
    shared = [dialog.temperature, dialog.max_tokens, dialog.repeat_penalty, dialog.theme, dialog.remote.url]

    def label(w):  # type: ignore[no-untyped-def]
        return w.parentWidget().layout().labelForField(w)  # the form of the tab that holds it

    assert LOCAL_ONLY_TIP.startswith('Applies to "This computer" only')
    for w in local_only:
        assert not w.isEnabled() and w.toolTip() == LOCAL_ONLY_TIP
        assert label(w) is None or not label(w).isEnabled()
    assert all(w.isEnabled() for w in shared)

    dialog.remote.engine.setCurrentIndex(dialog.remote.engine.findData("local"))
    for w in local_only:
        assert w.toolTip() != LOCAL_ONLY_TIP
        assert label(w) is None or label(w).isEnabled()
    assert [w.isEnabled() for w in local_only] == [True, True, False, True, True, True, True]
    assert dialog.gpu_layers.toolTip().startswith("This copy of Tandem runs models on the processor only")
    assert "tandem rpc-server" in dialog.rpc_servers.toolTip()
    assert not dialog.remote.url.isEnabled()

    # RPC servers enable GPU layers (their layers go there); back on a server, all are off again,
    # and back here once more, each is as the user left it.
    dialog.rpc_servers.setText("10.0.0.3:50052")
    assert dialog.gpu_layers.isEnabled()
    dialog.remote.engine.setCurrentIndex(dialog.remote.engine.findData("remote"))
    assert not any(w.isEnabled() for w in local_only)
    dialog.remote.engine.setCurrentIndex(dialog.remote.engine.findData("local"))
    assert all(w.isEnabled() for w in local_only)
    assert dialog.result_settings().rpc_servers == "10.0.0.3:50052"


@pytest.fixture
def looping_server() -> Iterator[tuple[str, dict[str, int]]]:
    """A server on 127.0.0.1 whose reply is one sentence again and again (a small model asked to
    edit a note), up to 2,000 times unless the client leaves; its words cut across chunks."""
    sentence = 'I\'ve added a comma after "morning" in the note. '
    pieces = [sentence[i : i + 5] for i in range(0, len(sentence), 5)]  # "I've ", "added", " a co"…
    with serve_loop(pieces * 2000, pause_s=0.001) as served:
        yield served


def test_a_servers_reply_that_loops_is_stopped_as_a_local_one(
    qtbot, open_window, wait_reply, looping_server: tuple[str, dict[str, int]]
) -> None:
    # Issue 37: the loop guard (engine/loop_guard.py) also for a server's replies; the server
    # would have written 2,000 sentences (or to its token cap).
    url, seen = looping_server
    window = _remote_window(open_window, url)
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
    window.presenter.send("Add a comma after morning in my note.")
    wait_reply(window, timeout_ms=30_000)
    reply = _rows(window)[-1]
    assert reply.role == "assistant" and reply.stats.get("stop_reason") == "repetition"
    times = reply.content.count("I've added a comma")
    assert 4 <= times <= 10, reply.content  # told a few times, then stopped
    widget = window.chat.widget_for(reply.id)
    assert widget.note.text().startswith("stopped: the reply was repeating itself")
    qtbot.waitUntil(lambda: seen["left"] == 1, timeout=10_000)  # the connection closed, not read to its end
    assert seen["sent"] < 2000 * 10
