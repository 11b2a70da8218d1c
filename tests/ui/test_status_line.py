"""What a reply leaves behind when it ends early, found walking the real window: an engine that died
mid-reply left "Writing…" or "Reading the conversation…" in the status bar for good; a reply stopped
while its prompt was read kept an empty speed panel (a bare baseline, no headline) beside Details;
a server that could not be reached was said in the header cut mid-word ("Model not loaded: N");
a server that failed left the model picker naming a local model and the empty chat offering tasks;
the picker named a local model while a server's answered, and another than a file that failed."""

from __future__ import annotations

import os
import signal
from contextlib import nullcontext

import pytest

from app.settings import EngineKind
from app.store import MessageStatus
from engine.events import Stats, StatsRecord
from tests.looping_server import looping_server, refusing_server
from tests.serve_process import free_port


def test_an_engine_dying_mid_reply_leaves_no_writing_line(qtbot, open_window, slow_target) -> None:
    window = open_window(slow_target, max_tokens=3000)
    window.presenter.send("a long answer please")
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None and len(window.presenter.replies.live.reply.text) > 20
        ),
        timeout=60_000,
    )
    qtbot.waitUntil(lambda: window.stats_label.text() == "Writing…", timeout=10_000)
    os.kill(window.controller.supervisor.pid, signal.SIGKILL)  # what the OOM killer or a native crash does
    qtbot.waitUntil(lambda: window.presenter.replies.live is None, timeout=30_000)
    qtbot.wait(200)  # the controller's last drain

    assert "killed" in window.chat.notice.text()
    assert window.stats_label.text() == "Ready", window.stats_label.text()


def test_a_reply_stopped_while_its_prompt_was_read_shows_no_empty_speed_panel(
    qtbot, open_window, wait_reply, tiny_target
) -> None:
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("hello")
    wait_reply(window)
    widget = next(w for w in reversed(window.chat.message_widgets()) if w.role == "assistant")
    assert widget.speed.isVisible()  # a reply that wrote something: its speed
    # What a Stop during the reading leaves: nothing written, 250 of 3,781 tokens read.
    stopped = Stats(
        speculation="ngram",
        n_prompt_tokens=3781,
        n_prefilled=250,
        n_generated=0,
        prefill_s=1.6,
        decode_s=0.0,
    )
    widget.set_status(MessageStatus.CANCELLED, StatsRecord.of(stopped, stop_reason="cancelled"))
    qtbot.wait(50)
    assert not widget.speed.isVisible() and widget.speed.headline().text == ""
    assert widget.details_button.isVisible() and widget.detail_rows  # how far the reading went
    button = widget.details_button.geometry()
    assert button.right() > widget.width() * 0.8, (button, widget.width())  # where it always is
    assert "stopped by you" in widget.note.text()


def test_a_model_that_did_not_load_is_said_whole_in_the_header(qtbot, open_window, tiny_target) -> None:
    window = open_window(
        tiny_target, wait_loaded=False, engine=EngineKind.REMOTE, remote_url="http://127.0.0.1:9"
    )
    window.resize(1000, 800)
    qtbot.waitUntil(lambda: window.chat.notice.isVisible(), timeout=30_000)
    qtbot.wait(100)
    label = window.header.state_label
    assert label.isVisible() and label.text() == "Model not loaded"
    assert label.fontMetrics().horizontalAdvance(label.text()) <= label.width()  # not cut
    why = window.chat.notice.text()
    assert why.startswith("The model could not be loaded: Nothing is listening at http://127.0.0.1:9")
    assert why.removeprefix("The model could not be loaded: ") in label.toolTip()  # why, on hover


@pytest.mark.parametrize("server", ["nothing listening", "refusing"])
def test_a_server_that_failed_is_named_in_the_picker_and_no_task_is_offered(
    qtbot, open_window, tiny_target, server: str
) -> None:  # type: ignore[no-untyped-def]
    """Found walking the real window: the picker named the local model (not in use) and the
    empty chat offered every task as if a model were ready."""
    with refusing_server() if server == "refusing" else nullcontext(f"http://127.0.0.1:{free_port()}") as url:
        window = open_window(tiny_target, wait_loaded=False, engine=EngineKind.REMOTE, remote_url=url)
        window.resize(1000, 800)
        qtbot.waitUntil(lambda: window.chat.notice.isVisible(), timeout=30_000)
    qtbot.wait(100)
    picker = window.header.model_combo
    assert picker.line.text() == f"Server unavailable: {url.removeprefix('http://')}"
    assert picker.fontMetrics().horizontalAdvance(picker.line.text()) <= picker.line.width()  # not cut
    assert not any(e.name in picker.line.text() for e in picker.entries)
    tasks = window.chat.empty_state
    waits = "No model can answer yet: the server is unavailable (Settings → Engine)."
    assert tasks.larger_label.text() == waits and tasks.larger_label.isVisible()
    assert not any(b.isEnabled() for b in tasks.suggestion_buttons)
    assert {b.toolTip() for b in tasks.suggestion_buttons} == {waits}
    window.header.refresh_models()  # the list opened again: still the server, no local model
    assert picker.line.text() == f"Server unavailable: {url.removeprefix('http://')}"


def test_a_local_model_that_did_not_load_offers_no_task(qtbot, open_window, tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a model" * 100)
    window = open_window(broken, wait_loaded=False)
    qtbot.waitUntil(lambda: window.chat.notice.isVisible(), timeout=30_000)
    tasks = window.chat.empty_state
    assert tasks.larger_label.text() == "No model can answer yet: the model did not load."
    assert not any(b.isEnabled() for b in tasks.suggestion_buttons)
    picker = window.header.model_combo  # the file that failed, not another model
    assert picker.line.text() == "Did not load: broken.gguf" and picker.line.toolTip() == str(broken)


def test_the_picker_names_the_servers_model_in_use(qtbot, open_window, tiny_target) -> None:  # type: ignore[no-untyped-def]
    with looping_server(["hi"], 0.0) as (url, _seen):
        window = open_window(tiny_target, engine=EngineKind.REMOTE, remote_url=url)
        window.resize(1000, 800)
        picker = window.header.model_combo
        said = f"looper · on {url.removeprefix('http://')}"  # the model the server lists
        assert picker.line.text() == said and f"{url}/v1" in picker.line.toolTip()
        assert picker.fontMetrics().horizontalAdvance(said) <= picker.line.width()  # not cut
        # Said once: the line beside the pickers does not name the server's model again.
        qtbot.waitUntil(lambda: "decides its speed-up" in window.header.state_label.text())
        assert "looper" not in window.header.state_label.text()
        window.header.refresh_models()  # the list opened: the local models still there to choose
        local = picker.index_of(str(tiny_target))
        assert local >= 0 and picker.line.text() == said
        assert not picker.itemText(local).startswith("looper")  # named by its own file
        picker.setCurrentIndex(local)  # the local model in use chosen: nothing to load, the server said
        picker.activated.emit(local)
        assert picker.line.text() == said
