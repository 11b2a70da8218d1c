"""Issue 47, read off the real window: the verdict under a reply from its own evidence (nothing
accepted is never "faster"; a busy computer is said, never "saved"; the reason does not flip while
it streams), See it with a sped-up run that drafted nothing, and every reply saying how it ended
(a numbered list looping on one item stopped, the reply-length cap with Continue)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.store import MessageStatus, Store
from engine.events import Finished, ReplyText, Speculation, Stats, StatsRecord
from tests.looping_server import looping_server
from ui.presenters import verdict, words
from ui.presenters.verdict import Verdict


def _stats(**changes: object) -> Stats:
    values: dict[str, object] = dict(
        speculation="ngram",
        n_prompt_tokens=30,
        n_prefilled=30,
        n_generated=86,
        n_steps=86,
        prefill_s=1.0,
        decode_s=11.0,
        llama_s=11.5,
        draft_max=8,
        plain_tokens_per_s_est=3.6,
    )
    values.update(changes)
    return Stats(**values)  # type: ignore[arg-type]


def _stored(record: StatsRecord, text: str = "The capital of France is Paris.") -> int:
    store = Store()
    try:
        conversation = store.create_conversation("A reply")
        store.add_message(conversation.id, "user", "What is the capital of France?")
        reply = store.add_message(conversation.id, "assistant", "")
        store.save_reply(reply.id, ReplyText(text), MessageStatus.COMPLETE, record.as_dict())
        return conversation.id
    finally:
        store.close()


def _reply_widget(window):  # type: ignore[no-untyped-def]
    return [w for w in window.chat.message_widgets() if w.role == "assistant"][-1]


def test_a_first_reply_with_no_accepted_draft_says_as_fast_as_usual(qtbot, open_window, tiny_target) -> None:
    # The review's first reply ever: "About 2.2× faster, 13 s saved" in bold green, with "Guesses
    # confirmed 0%" and "Tokens a step 1.0" in its Details.
    shown = _stored(StatsRecord.of(_stats(n_drafted=20, n_steps_with_draft=10), "eos"))
    window = open_window(tiny_target)
    window.presenter.show_conversation(shown)
    widget = _reply_widget(window)
    headline = widget.speed.headline()
    assert headline.verdict is Verdict.NEUTRAL and headline.text == "About as fast as usual"
    assert headline.reason.startswith("None of its guesses was right")
    said = widget.speed.accessibleDescription()
    assert said.startswith("About as fast as usual") and "saved" not in said and "faster" not in said
    rows = dict(widget.detail_rows)
    assert rows["Reply"] == "86 tokens in 12 s" and rows["Writing speed"] == "7.8 tokens/s"
    assert rows["Accepted drafts"] == "0 of 20 drafted tokens" and rows["Guesses confirmed"] == "0%"
    assert rows["Time to first token"] and rows["Ended"] == "finished"


def test_a_reply_while_the_computer_was_busy_says_so_and_saves_nothing(
    qtbot, open_window, tiny_target
) -> None:
    # The review's scene 4 with two busy loops: 80 tokens in 162 s, the reply's own one-token
    # steps at 0.2 tokens/s, where the same model's ran at 122.7 a few replies before. It read
    # "About 3.4× faster, 389 s saved". Recorded as the chat records a reply, shown in the window.
    window = open_window(tiny_target)
    speed = window.presenter.speed
    quiet = _stats(n_generated=80, plain_tokens_per_s_est=122.7)  # an earlier reply's steps, quiet
    speed.note_steps(Finished("eos", "", (), quiet))
    assert speed.steps_tokens_per_s(quiet) == 122.7
    busy = _stats(n_generated=80, n_drafted=70, n_accepted=60, n_steps=20, n_steps_with_draft=20,
                  prefill_s=2.0, decode_s=160.0, plain_tokens_per_s_est=0.2)  # fmt: skip
    record = speed.record(busy, "eos")
    window.presenter.show_conversation(_stored(record))
    widget = _reply_widget(window)
    headline = widget.speed.headline()
    assert headline.verdict is Verdict.SLOWER and headline.reason == verdict.BUSY_REASON
    said = widget.speed.accessibleDescription()
    assert "busy" in said and "saved" not in said and "faster" not in said
    assert dict(widget.detail_rows)["Usual speed"].startswith("122.7 tokens/s")


def test_the_live_reason_does_not_flip_and_the_end_agrees(qtbot, open_window, tiny_target) -> None:
    # One long reply whose own plain steps slow down and recover as another program comes and
    # goes: the live reason flipped "busy", "the guesses cost more", "busy" (review 5, 13-loop.png).
    window = open_window(tiny_target)
    window.presenter.speed.note_steps(Finished("eos", "", (), _stats(plain_tokens_per_s_est=100.0)))
    shown = _stored(StatsRecord.of(_stats(n_generated=4, decode_s=0.1), "eos"), "Once")
    window.presenter.show_conversation(shown)
    panel = _reply_widget(window).speed
    panel.points.clear()
    reasons = []
    for i, est in enumerate([100.0, 95.0, 30.0, 98.0, 97.0, 40.0, 99.0], start=1):
        n = 40 * i
        snapshot = _stats(n_generated=n, n_drafted=n, n_accepted=n // 4, n_steps=n, n_steps_with_draft=n // 2,
                          decode_s=n / 40.0, plain_tokens_per_s_est=est)  # fmt: skip
        panel.add_stats([snapshot], None, window.presenter.speed.steps_tokens_per_s(snapshot))
        reasons.append(panel.headline().reason)
    first_busy = reasons.index(verdict.BUSY_REASON)
    assert set(reasons[first_busy:]) == {verdict.BUSY_REASON}, reasons
    live = panel.headline()
    record = StatsRecord.of(snapshot, "eos", **{verdict.BUSY_KEY: True, verdict.STEPS_KEY: 100.0})
    panel.set_final(record)
    assert panel.headline() == live  # the end says what the live line said


def test_see_it_with_a_sped_up_run_that_drafted_nothing_says_so_and_offers_run_again(
    qtbot, open_window, tiny_target
) -> None:
    # The welcome's See it said "24 s instead of 6.8 s: 3.6× slower": no highlights, no "%
    # confirmed", no note. The tiny model's reply to the demo drafts nothing (greedy: the same
    # every run), as SmolLM2's did while the computer was busy.
    window = open_window(tiny_target, max_tokens=12)
    window.welcome.demo_button.click()  # the welcome's See it button
    qtbot.waitUntil(lambda: len(window.compare.final_stats) == 2, timeout=120_000)
    qtbot.waitUntil(lambda: not window.controller.is_busy, timeout=60_000)
    compare = window.compare
    assert compare.final_stats["speculative"].n_drafted == 0  # the case this test is about
    summary = compare.summary.text()
    assert " instead of " in summary and "× slower" not in summary and "× faster" not in summary
    assert not compare.unfair.isHidden() and compare.unfair_label.text() == words.NOTHING_DRAFTED
    assert compare.again_button.text() == "Run again" and compare.again_button.isEnabled()


def test_a_compare_called_unfair_is_not_kept_as_the_usual_speed(qtbot, open_window, tiny_target) -> None:
    from app.host.reply import Reply, ReplyProgress

    window = open_window(tiny_target)
    comparison = window.presenter.comparison
    plain = _stats(speculation=Speculation.NONE, n_generated=86, decode_s=7.0, plain_tokens_per_s_est=None)
    for sped_est, kept in ((4.0, None), (12.0, round(86 / 7.0, 3))):  # 3x slower steps: unfair
        comparison.runs = {1: "plain", 2: "speculative"}
        comparison.on_controller_reply_finished(Reply(1, finished=Finished("length", "", (), plain)))
        assert window.presenter.speed.plain_tokens_per_s() is None  # not before Compare judged the runs
        sped = _stats(n_drafted=40, n_accepted=30, decode_s=5.0, plain_tokens_per_s_est=sped_est)
        comparison.on_controller_reply_finished(Reply(2, finished=Finished("length", "", (), sped)))
        assert window.presenter.speed.plain_tokens_per_s() == kept
    # A plain run that stalled (5 s without a token, among steps of 50 ms): not kept either.
    before = window.presenter.speed.plain_tokens_per_s()
    comparison.runs = {3: "plain", 4: "speculative"}
    stalled = tuple(
        _stats(speculation=Speculation.NONE, n_generated=i, decode_s=0.05 * i + (5.0 if i > 40 else 0.0),
               plain_tokens_per_s_est=None)
        for i in range(1, 87)
    )  # fmt: skip
    comparison.on_controller_reply_progressed(ReplyProgress(Reply(3), 0, stalled))
    comparison.on_controller_reply_finished(Reply(3, finished=Finished("length", "", (), stalled[-1])))
    sped = _stats(n_drafted=40, n_accepted=30, decode_s=5.0, plain_tokens_per_s_est=86 / stalled[-1].decode_s)
    comparison.on_controller_reply_finished(Reply(4, finished=Finished("length", "", (), sped)))
    assert window.presenter.speed.plain_tokens_per_s() == before


# --- how a reply ended -------------------------------------------------------------------------------

STUDY_APP = "Use a study app: it helps you keep track of your progress and your goals."


@pytest.fixture
def numbered_looper() -> Iterator[tuple[str, dict[str, int]]]:
    """A server whose reply is a numbered list stuck on one item ("10. Use a study app: ...",
    "11. Use a study app: ...") up to item 2,000 unless the client leaves."""
    text = "Here are some tips:\n\n" + "".join(f"{i}. {STUDY_APP}\n" for i in range(1, 2000))
    with looping_server((text[at : at + 6] for at in range(0, len(text), 6)), pause_s=0.0005) as served:
        yield served


def test_a_looping_numbered_list_is_stopped_with_its_note(
    qtbot, open_window, wait_reply, numbered_looper: tuple[str, dict[str, int]]
) -> None:
    # The review: items 10-23 one line with a new number, to the 512-token cap, with no end note.
    url, _seen = numbered_looper
    window = open_window(Path("unused.gguf"), wait_loaded=False, engine="remote", remote_url=url)
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=30_000)
    window.presenter.send("Write a long list of tips for studying for exams")
    wait_reply(window, timeout_ms=30_000)
    store = Store()
    try:
        reply = store.messages(window.presenter.conversation_id)[-1]
    finally:
        store.close()
    assert reply.stats.get("stop_reason") == "repetition"
    assert 4 <= reply.content.count(STUDY_APP) <= 5, reply.content  # the line and 3 repeats
    widget = window.chat.widget_for(reply.id)
    assert widget.note.text().startswith("stopped: the reply was repeating itself")
    assert "Regenerate" in widget.note.text() and not widget.note.isHidden()
    assert dict(widget.detail_rows)["Ended"] == "stopped: it was repeating itself"


def test_a_reply_at_the_length_cap_says_so_and_continues(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("Tell me a long story")
    wait_reply(window)
    widget = _reply_widget(window)
    assert widget.speed.stats is not None and widget.speed.stats.stop_reason == "length"
    note = widget.note.text()
    assert "stopped at the reply-length cap (8 tokens)" in note and "Continue" in note
    assert dict(widget.detail_rows)["Ended"] == "stopped at the reply-length cap"
    with qtbot.waitSignal(window.chat.continue_requested, timeout=5_000):
        widget.note.linkActivated.emit("continue")
    qtbot.waitUntil(
        lambda: any(
            w.role == "user" and w.text() == verdict.CONTINUE_REQUEST for w in window.chat.message_widgets()
        ),
        timeout=10_000,
    )
    wait_reply(window)
    # A reply that finished says so in its Details, and has no note.
    stored = _stored(StatsRecord.of(_stats(), "eos"))
    window.presenter.show_conversation(stored)
    done = _reply_widget(window)
    assert done.note.isHidden() and dict(done.detail_rows)["Ended"] == "finished"


def test_a_live_reply_on_a_busy_computer_says_busy_while_it_streams_and_at_its_end(
    qtbot, open_window, wait_reply, slow_target
) -> None:
    # A real reply, its live line read while it streams: this computer's one-token steps were
    # timed far quicker before (a quiet moment, fed here as an earlier reply's) than the reply's
    # own steps run now, as under the review's two busy loops.
    window = open_window(slow_target, max_tokens=120)
    speed = window.presenter.speed
    speed.note_steps(Finished("eos", "", (), _stats(n_generated=80, plain_tokens_per_s_est=1e6)))
    window.presenter.send("abcabcabcabc abcabcabcabc abcabcabcabc")
    qtbot.waitUntil(lambda: window.presenter.replies.live is not None, timeout=10_000)
    widget = window.chat.widget_for(window.presenter.replies.live.message_id)
    live = []

    def streamed() -> bool:
        if widget.speed.stats is not None and window.presenter.replies.live is not None:
            live.append(widget.speed.headline())
        return bool(live) and live[-1].verdict is not Verdict.PENDING

    qtbot.waitUntil(streamed, timeout=60_000)
    wait_reply(window)
    final = widget.speed.headline()
    for said in (live[-1], final):
        assert said.reason == verdict.BUSY_REASON and said.is_busy, said
        assert "saved" not in said.text and "faster" not in said.text
    # Shown again from the store: the same words.
    conversation = window.presenter.conversation_id
    window.presenter.show_conversation(None)
    window.presenter.show_conversation(conversation)
    assert _reply_widget(window).speed.headline() == final


def test_a_failed_reply_says_why_under_it_and_again_when_shown_again(qtbot, open_window, slow_target) -> None:
    import os
    import signal

    window = open_window(slow_target, max_tokens=3000)
    window.presenter.send("a long answer please")
    # (Its numbers too: a reply killed before its first figures keeps none, nor an "Ended" row.)
    qtbot.waitUntil(
        lambda: (
            window.presenter.replies.live is not None
            and len(window.presenter.replies.live.reply.text) > 20
            and window.presenter.replies.live.reply.stats is not None
        ),
        timeout=60_000,
    )
    message_id = window.presenter.replies.live.message_id
    os.kill(window.controller.supervisor.pid, signal.SIGKILL)  # what the OOM killer or a native crash does
    qtbot.waitUntil(lambda: window.presenter.replies.live is None, timeout=30_000)
    note = window.chat.widget_for(message_id).note.text()
    assert "Interrupted" in note and "killed" in note, note
    assert dict(window.chat.widget_for(message_id).detail_rows)["Ended"] == "interrupted before it finished"
    conversation = window.presenter.conversation_id
    window.presenter.show_conversation(None)
    window.presenter.show_conversation(conversation)
    assert "killed" in window.chat.widget_for(message_id).note.text()
