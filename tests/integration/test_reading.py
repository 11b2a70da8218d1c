"""A prompt's reading shown live, Stop during it, and a follow-up that reads only what is new
(issue 51): the engine's reports (engine.reading), the conversation's reasons (app.host.reread),
the real window on the slow tiny model, and `tandem serve`'s `prompt_progress` chunks."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
from PySide6.QtCore import Qt

from app.host.messages import ChatTurn
from app.host.reread import ReadConversation, reread_reason
from app.store import Store
from engine.backend import read_chunk_size
from engine.config import EngineConfig, SamplingParams
from engine.events import Finished, Reading, Reread
from engine.reading import watch_reading
from tests.tiny import write_tiny_model

# About 2,400 tokens of the tiny models' byte-level vocabulary.
LONG = " ".join(f"line {i}: the cat sat on the mat." for i in range(100))
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def long_target(models_dir: Path) -> Path:
    """The slow tiny model (a few thousand tokens read a second on one core) trained, so to
    speak, for 8k tokens: a 2,400-token prompt fits its 4k context."""
    return write_tiny_model(
        models_dir / "long-target.gguf", seed=1, n_layers=8, n_embd=256, n_ff=1024, n_ctx=8192
    )


def _reply(engine, prompt, report=None, cancel=None, on_change=Reread.CHANGED) -> Finished:  # type: ignore[no-untyped-def]
    events = engine.generate(prompt, GREEDY, max_tokens=4, cancel=cancel)
    finished = list(watch_reading(engine.target, prompt, events, report, on_change))[-1]
    assert isinstance(finished, Finished)
    return finished


def test_the_engine_reports_its_reading_chunk_by_chunk_and_a_follow_up_reads_only_what_is_new(
    long_target: Path,
) -> None:
    from engine.session import Engine

    engine = Engine(EngineConfig(str(long_target), n_threads=1, n_ctx=4096))
    try:
        prompt = engine.tokenize(LONG)
        seen: list[Reading] = []
        first = _reply(engine, prompt, seen.append)
        # At once, before anything is read; then after each chunk (read_chunk rows: this model's
        # is 256, not the 512 of n_batch), the last ending before the prompt's last token.
        chunk = engine.target.read_chunk
        assert chunk == 256 and engine.target.n_batch == 512
        assert (seen[0].n_prompt_tokens, seen[0].n_cached, seen[0].n_processed) == (len(prompt), 0, 0)
        assert seen[0].seconds_left is None and seen[1].seconds_left is not None
        processed = [r.n_processed for r in seen]
        assert processed == [*range(0, len(prompt) - 1, chunk), len(prompt) - 1]
        assert all(r.reread is Reread.FIRST for r in seen)
        assert first.stats.n_prefilled == len(prompt) and first.stats.reread is Reread.FIRST
        assert first.stats.first_token_s > 0
        assert engine.target.on_read is None  # watched while the prompt was read, not after

        # A follow-up: the conversation so far comes from the cache; only the new text is read.
        follow = [*prompt, *first.token_ids, *engine.tokenize(" and then?", add_special=False)]
        seen.clear()
        second = _reply(engine, follow, seen.append)
        n_cached = second.stats.n_prompt_tokens - second.stats.n_prefilled
        assert second.stats.reread is Reread.NONE and n_cached == len(prompt) + len(first.token_ids) - 1
        assert second.stats.n_prefilled <= len(follow) - len(prompt)
        assert seen[0].n_cached == n_cached

        # Another start: read again, for the reason the caller knows (an edited earlier message).
        other = engine.tokenize("A different start. " + LONG[:300])
        third = _reply(engine, other, on_change=Reread.EARLIER_MESSAGE)
        assert third.stats.reread is Reread.EARLIER_MESSAGE and third.stats.n_prefilled > 100
    finally:
        engine.close()


def test_stop_while_the_prompt_is_read_ends_before_any_text_and_keeps_what_was_read(
    long_target: Path,
) -> None:
    from engine.session import Engine

    engine = Engine(EngineConfig(str(long_target), n_threads=1, n_ctx=4096))
    try:
        prompt = engine.tokenize(LONG)
        cancel = threading.Event()
        seen: list[Reading] = []

        def report(reading: Reading) -> None:
            seen.append(reading)
            if reading.n_processed > 0:
                cancel.set()  # a Stop after the first chunk: seen before the next

        finished = _reply(engine, prompt, report, cancel)
        assert finished.stop_reason == "cancelled" and finished.text == "" and not finished.token_ids
        chunk = engine.target.read_chunk
        assert seen[-1].n_processed == chunk == len(engine.target.tokens)
        assert finished.stats.n_prefilled == chunk and engine.target.on_read is None
        # The next try reads only the rest.
        again = _reply(engine, prompt)
        assert again.stats.n_prompt_tokens - again.stats.n_prefilled == chunk
    finally:
        engine.close()


def test_a_prompt_is_read_in_chunks_fixed_per_model_never_timed() -> None:
    """A seeded reply must not depend on the machine's load: its chunks come from the model's size."""
    assert read_chunk_size(270_000_000, 512, is_offloaded=False) == 256
    assert read_chunk_size(1_500_000_000, 512, is_offloaded=False) == 128
    assert read_chunk_size(70_000_000_000, 512, is_offloaded=False) == 128
    assert read_chunk_size(270_000_000, 16, is_offloaded=False) == 16
    assert read_chunk_size(7_000_000_000, 512, is_offloaded=True) == 512


def test_why_a_reply_reads_again_comes_from_what_the_conversation_changed() -> None:
    u1, a1, u2 = ChatTurn("user", "hi"), ChatTurn("assistant", "hello"), ChatTurn("user", "more")
    before = ReadConversation("conversation-1", "Be brief.", (u1,), 0)
    follow_up = ReadConversation("conversation-1", "Be brief.", (u1, a1, u2), 0)
    assert reread_reason(before, follow_up) is Reread.NONE
    assert (
        reread_reason(before, ReadConversation("conversation-1", "Be brief.", (u2,), 0)) is Reread.NONE
    )  # edit
    edited = ReadConversation("conversation-1", "Be brief.", (ChatTurn("user", "hey"), a1, u2), 0)
    assert reread_reason(before, edited) is Reread.EARLIER_MESSAGE
    assert (
        reread_reason(before, ReadConversation("conversation-1", "Be long.", (u1, a1, u2), 0))
        is Reread.SYSTEM_PROMPT
    )
    assert (
        reread_reason(before, ReadConversation("conversation-2", "Be brief.", (u2,), 0))
        is Reread.OTHER_CONVERSATION
    )
    assert (
        reread_reason(before, ReadConversation("conversation-1", "Be brief.", (u2,), 2))
        is Reread.OLDEST_LEFT_OUT
    )
    assert reread_reason(None, follow_up) is Reread.CHANGED


def _rows(window):  # type: ignore[no-untyped-def]
    store = Store()
    try:
        return store.messages(window.presenter.conversation_id)
    finally:
        store.close()


def _details(qtbot, window, message_id: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    widget = window.chat.widget_for(message_id)
    qtbot.mouseClick(widget.details_button, Qt.MouseButton.LeftButton)
    return dict(widget.detail_rows)


def test_the_window_shows_a_long_prompt_being_read_then_a_follow_up_reads_only_what_is_new(
    qtbot, open_window, wait_reply, long_target
) -> None:  # type: ignore[no-untyped-def]
    window = open_window(long_target, max_tokens=8)
    lines: list[str] = []
    window.presenter.replies.reading_shown.connect(lines.append)
    shown: list[str] = []

    def on_line(line: str) -> None:  # what the reply itself shows, as it is shown
        widget = (
            window.chat.widget_for(window.presenter.replies.live.message_id)
            if window.presenter.replies.live
            else None
        )
        if widget is not None and widget.reading.isVisibleTo(widget):
            shown.append(widget.reading.text())

    window.presenter.replies.reading_shown.connect(on_line)
    window.presenter.send(LONG)
    wait_reply(window)
    assert lines and lines[0].startswith("Reading ") and " tokens – 0%" in lines[0]
    assert shown and shown[0] == lines[0]
    if len(lines) > 1:  # later lines say how long is left (the last may be read but for its last token)
        assert any(line.endswith(" left") for line in lines[1:]), lines
    user, reply = _rows(window)
    n_prompt = reply.stats["n_prompt_tokens"]
    assert n_prompt > 2000 and lines[0].startswith(f"Reading {n_prompt:,} tokens")
    widget = window.chat.widget_for(reply.id)
    assert not widget.reading.isVisibleTo(widget)  # gone once the reply is written
    rows = _details(qtbot, window, reply.id)
    assert rows["Prompt"].startswith(f"read all {n_prompt:,} tokens in ")
    assert rows["Read again because"] == "the model had just been loaded, so nothing was read before"
    assert "Time to first token" in rows

    window.presenter.send("And the dog?")
    wait_reply(window)
    follow = _rows(window)[-1]
    n_new = follow.stats["n_prefilled"]
    n_cached = follow.stats["n_prompt_tokens"] - n_new
    # All the first request read comes from the cache; read: the new message, the template's turn
    # tokens and the last reply as stored (the random tiny model writes bytes that are not UTF-8,
    # which read back as other tokens).
    assert n_cached >= n_prompt and n_new < 80
    rows = _details(qtbot, window, follow.id)
    assert rows["Prompt"].startswith(f"read {n_new:,} new tokens ({n_cached:,} from the cache)")
    assert "Read again because" not in rows

    # A new system prompt: everything after it is read again, and Details say why.
    window.presenter.set_system_prompt("Answer in one word.")
    window.presenter.send("And the cat?")
    wait_reply(window)
    again = _rows(window)[-1]
    assert again.stats["n_prefilled"] > n_prompt and again.stats["reread"] == "system_prompt"
    assert _details(qtbot, window, again.id)["Read again because"] == "the system prompt (or preset) changed"


def test_stop_while_the_window_reads_a_long_prompt(qtbot, open_window, wait_reply, long_target) -> None:  # type: ignore[no-untyped-def]
    window = open_window(long_target, max_tokens=8)
    readings: list[object] = []
    window.controller.reply_reading.connect(readings.append)
    window.presenter.send(LONG)
    qtbot.waitUntil(lambda: bool(readings), timeout=30_000)
    qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
    wait_reply(window, timeout_ms=10_000)
    user, reply = _rows(window)
    assert (user.role, user.content, user.status) == ("user", LONG, "complete")
    assert reply.status == "cancelled" and reply.content == "" and reply.stats["n_generated"] == 0
    assert reply.stats["n_prefilled"] < reply.stats["n_prompt_tokens"]  # stopped while reading
    assert window.chat.send_button.isEnabled()


def test_serve_streams_prompt_progress_before_the_first_text(long_target: Path, tmp_path: Path) -> None:
    from tests.serve_process import ServeProcess

    s = ServeProcess(tmp_path, "--model", str(long_target), "--threads", "1", "--ctx", "4096").started()
    try:
        body = {"messages": [{"role": "user", "content": LONG}], "max_tokens": 4, "stream": True,
                "return_progress": True}  # fmt: skip
        with httpx.stream("POST", f"{s.url}/chat/completions", json=body, timeout=120) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
        first_text = next(
            i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["delta"].get("content")
        )
        assert progress and all("prompt_progress" in c for c in chunks[: len(progress)])
        assert len(progress) < first_text + 1
        total = progress[0]["total"]
        assert total > 2000 and progress[0]["cache"] == 0 and progress[0]["processed"] == 0
        assert set(progress[0]) == {"total", "cache", "processed", "time_ms"}
        assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
        timings = chunks[-1]["timings"]
        assert timings["prompt_n"] == total and timings["cache_n"] == 0

        # Without return_progress: no such chunk. A follow-up comes from the cache (timings).
        follow = {**body, "return_progress": False,
                  "messages": [*body["messages"], {"role": "assistant", "content": "x"},
                               {"role": "user", "content": "more"}]}  # fmt: skip
        with httpx.stream("POST", f"{s.url}/chat/completions", json=follow, timeout=120) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
        assert not any("prompt_progress" in c for c in chunks)
        assert chunks[-1]["timings"]["cache_n"] > 2000
    finally:
        s.stop()


def test_a_window_on_a_server_shows_the_servers_reading(
    qtbot, open_window, wait_reply, long_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """The window asks a server for its prompt_progress (llama-server's, tandem serve's) and shows
    it as its own engine's."""
    from tests.serve_process import ServeProcess

    s = ServeProcess(tmp_path, "--model", str(long_target), "--threads", "1", "--ctx", "4096").started()
    try:
        window = open_window(
            Path("unused.gguf"), wait_loaded=False, engine="remote", remote_url=s.url, max_tokens=4
        )
        qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
        lines: list[str] = []
        window.presenter.replies.reading_shown.connect(lines.append)
        window.presenter.send(LONG)
        wait_reply(window)
        assert lines and lines[0].startswith("Reading ") and lines[0].split()[1].replace(",", "").isdigit()
        assert int(lines[0].split()[1].replace(",", "")) > 2000
    finally:
        s.stop()


@pytest.fixture(scope="module")
def wide_target(models_dir: Path) -> Path:
    """Wider than long_target: a 256-row chunk takes a good part of a second on one core, as a 7B
    model's 128 rows take seconds on two (between two reports the window has time to tick)."""
    return write_tiny_model(
        models_dir / "wide-reading-target.gguf", seed=1, n_layers=8, n_embd=512, n_head=8, n_ff=2048,
        n_ctx=8192,
    )  # fmt: skip


def test_the_window_moves_the_reading_on_between_the_engines_reports(
    qtbot, open_window, wait_reply, wide_target
) -> None:  # type: ignore[no-untyped-def]
    """Progress shown at once and said again every READING_TICK_MS (ui.presenters.reply_presenter):
    between two chunk reports the line moves on at the measured speed (reading_words.reading_after)."""
    import time

    from ui.presenters.reading_words import reading_line

    window = open_window(wide_target, max_tokens=4)
    reports: list[Reading] = []
    window.controller.reply_reading.connect(lambda message: reports.append(message.reading))
    lines: list[tuple[float, str]] = []
    window.presenter.replies.reading_shown.connect(lambda line: lines.append((time.monotonic(), line)))
    sent = time.monotonic()
    window.presenter.send(LONG)
    wait_reply(window)
    assert lines and lines[0][0] - sent < 0.5, f"first line after {lines[0][0] - sent:.2f} s"
    said = {reading_line(r) for r in reports}
    between = [line for _, line in lines if line not in said]
    assert between, f"only the engine's {len(reports)} reports were shown"
    times = [t for t, _ in lines]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < 1.0, f"a gap of {max(gaps):.2f} s between two lines"


def test_stop_in_the_window_ends_a_chunk_being_read_at_once(
    qtbot, open_window, wait_reply, wide_target
) -> None:  # type: ignore[no-untyped-def]
    """Stop clicked while the worker reads a chunk (one that takes a good part of a second here,
    seconds for a 7B model): the reply ends within 0.5 s (issue 51), through the worker's cancel
    board and llama.cpp's abort callback, not at the chunk's end."""
    import time

    window = open_window(wide_target, max_tokens=4)
    reports: list[Reading] = []
    window.controller.reply_reading.connect(lambda message: reports.append(message.reading))
    window.presenter.send(LONG)
    # The first chunk's report: the second chunk is being read.
    qtbot.waitUntil(lambda: any(r.n_processed > 0 for r in reports), timeout=60_000)
    chunk_s = next(r for r in reports if r.n_processed > 0).elapsed_s
    clicked = time.monotonic()
    qtbot.mouseClick(window.chat.stop_button, Qt.MouseButton.LeftButton)
    wait_reply(window, timeout_ms=30_000)
    took = time.monotonic() - clicked
    user, reply = _rows(window)
    assert reply.status == "cancelled" and reply.content == "" and reply.stats["n_generated"] == 0
    n_chunk = next(r for r in reports if r.n_processed > 0).n_processed
    assert reply.stats["n_prefilled"] == n_chunk  # the chunk stopped left nothing in the cache
    assert took < 0.5, f"the reply ended {took:.2f} s after Stop (a chunk: {chunk_s:.2f} s)"
