"""The live speed panel: a tokens/s sparkline with the plain rate, an acceptance gauge, the mean
accepted length and the speedup, drawn from the stats the window already receives."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtGui import QColor

from app.store import Store
from engine.events import Stats, StatsRecord
from ui.chat.speed_panel import POINTS_KEY, RATE_WINDOW_S, SpeedPanel, windowed_rates
from ui.presenters import verdict
from ui.qt import theme


def _stats(
    decode_s: float, n: int, drafted: int = 0, accepted: int = 0, steps_with_draft: int = 0, **kw
) -> Stats:  # type: ignore[no-untyped-def]
    values = dict(
        speculation="ngram",
        n_prompt_tokens=10,
        n_prefilled=10,
        n_generated=n,
        n_drafted=drafted,
        n_accepted=accepted,
        n_steps=n,
        n_steps_with_draft=steps_with_draft,
        prefill_s=0.01,
        decode_s=decode_s,
        llama_s=decode_s,
        draft_max=8,
    )
    values.update(kw)
    return Stats(**values)  # type: ignore[arg-type]


def test_windowed_rates() -> None:
    points = [(0.1, 10), (0.2, 20), (0.5, 50), (1.0, 150), (1.5, 200)]
    assert RATE_WINDOW_S == 0.5
    rates = windowed_rates(points)
    assert [t for t, _ in rates] == [0.1, 0.2, 0.5, 1.0, 1.5]
    assert rates[0][1] == 100.0 and rates[1][1] == 100.0  # cumulative until half a second
    assert rates[3][1] == (150 - 50) / 0.5  # over the last half second
    assert rates[4][1] == (200 - 150) / 0.5


def _has_colour(image, colour: QColor, tolerance: int = 90) -> bool:  # type: ignore[no-untyped-def]
    for y in range(0, image.height(), 1):
        for x in range(0, min(image.width(), 185), 1):  # the sparkline only
            c = image.pixelColor(x, y)
            if (
                abs(c.red() - colour.red()) + abs(c.green() - colour.green()) + abs(c.blue() - colour.blue())
                < tolerance
            ):
                return True
    return False


def test_panel_numbers_and_drawing(qtbot) -> None:
    panel = SpeedPanel()
    qtbot.addWidget(panel)
    panel.resize(600, panel.height())
    panel.show()
    # 12 tokens in 5 steps (7 accepted): a verdict is never more "× faster" than tokens a step.
    snapshots = [
        _stats(0.1 * i, 12 * i, drafted=10 * i, accepted=7 * i, steps_with_draft=3 * i, n_steps=5 * i)
        for i in range(1, 21)
    ]
    panel.add_stats(snapshots[:10], plain_tokens_per_s=60.0)
    panel.add_stats(snapshots[10:], plain_tokens_per_s=60.0)
    assert len(panel.points) == 20
    assert panel.stats is not None and panel.stats.decode_tokens_per_s == 120.0
    headline = panel.headline()  # the whole request against the measured plain speed
    assert headline.text.startswith("2.0× faster") and not headline.is_estimate
    image = panel.grab().toImage()
    assert _has_colour(image, theme.colors().speculative_line)  # the sparkline
    assert _has_colour(image, theme.colors().plain_line)  # the plain reference line
    # Without a measured plain run, the engine's own estimate, marked as one.
    panel.plain_tokens_per_s = None
    assert panel.stats is not None
    panel.stats = replace(panel.stats, plain_tokens_per_s_est=80.0)
    headline = panel.headline()
    assert headline.text.startswith("About 1.5× faster") and headline.is_estimate
    # ...but not for a reply too short to compare (the details line shows none either).
    panel.stats = replace(panel.stats, n_generated=6)
    assert panel.headline().speedup is None
    panel.stats = replace(panel.stats, n_generated=240)
    # Finished: the small version, with the numbers said in words.
    height = panel.height()
    record = snapshots[-1].as_dict() | {"plain_tokens_per_s": 60.0}
    panel.set_final(StatsRecord.from_dict(record))
    assert panel.is_compact and panel.height() < height
    said = panel.accessibleDescription()
    assert "Writing speed: 120.0 tokens/s" in said and said.startswith("2.0× faster")
    kept = panel.kept_points()
    assert 2 <= len(kept) <= 21 and kept[-1] == [2.0, 240]
    # A stored reply's panel draws its kept sparkline.
    stored = SpeedPanel()
    qtbot.addWidget(stored)
    stored.set_final(StatsRecord.from_dict(record | {POINTS_KEY: kept}))
    assert stored.points == [(t, n) for t, n in kept]


def test_live_panel_in_the_window_and_kept_with_the_reply(
    qtbot, open_window, wait_reply, slow_target
) -> None:
    window = open_window(slow_target, draft="ngram", max_tokens=400, temperature=0.0)
    window.presenter.send("abcabcabcabc abcabcabcabc abcabcabcabc")
    qtbot.waitUntil(lambda: window.presenter.replies.live is not None, timeout=10_000)
    message_id = window.presenter.replies.live.message_id
    widget = window.chat.widget_for(message_id)
    assert widget is not None
    qtbot.waitUntil(lambda: widget.speed.isVisible() and len(widget.speed.points) >= 3, timeout=60_000)
    assert not widget.speed.is_compact  # large while it streams
    wait_reply(window)
    assert widget.speed.is_compact and widget.speed.isVisible()
    store = Store()
    try:
        reply = store.messages(window.presenter.conversation_id)[-1]
    finally:
        store.close()
    assert reply.id == message_id and len(reply.stats[POINTS_KEY]) >= 3
    # Shown again (another conversation, then back): the stored reply keeps its panel.
    conversation_id = window.presenter.conversation_id
    window.presenter.show_conversation(None)
    window.presenter.show_conversation(conversation_id)
    again = window.chat.widget_for(message_id)
    assert again is not None and again is not widget
    assert not again.speed.isHidden() and again.speed.points and again.speed.is_compact
    user = next(w for w in window.chat.message_widgets() if w.role == "user")
    assert user.speed.isHidden()


def _reason_shown(panel: SpeedPanel) -> tuple[str, bool]:
    """The reason as drawn, its lines joined by a newline, and whether it is under the headline."""
    lines, below = panel.reason_lines()
    return "\n".join(lines), below


def test_a_reason_that_does_not_fit_beside_the_headline_goes_under_it_whole(qtbot) -> None:
    # Bug: the reason was cut to fit beside the headline, under a reply of the usual width:
    # "The guesses cost about as much time as they…", its point lost.
    slow = _stats(9.0, 300, drafted=260, accepted=40, steps_with_draft=60, n_steps=280, prefill_s=2.0)
    panel = SpeedPanel()
    qtbot.addWidget(panel)
    panel.set_final(StatsRecord.from_dict(slow.as_dict() | {"plain_tokens_per_s": 30.0}))
    reason = panel.headline().reason
    assert panel.headline().text == "About as fast as usual" and reason
    panel.resize(1400, panel.height())
    assert _reason_shown(panel) == (reason, False)  # room beside it
    panel.resize(560, panel.height())
    assert _reason_shown(panel) == (reason, True)  # whole, on a line of its own
    panel.resize(300, panel.height())
    two, below = _reason_shown(panel)
    assert below and "\n" in two and two.replace("\n", " ") == reason  # whole, on two lines
    panel.resize(200, panel.height())
    shown, below = _reason_shown(panel)
    shown = shown.replace("\n", " ")  # wrapped to two lines, then cut
    assert below and shown.endswith("…") and reason.startswith(shown[:-1])  # cut only where it must be
    assert panel.toolTip() == reason  # and whole on hover


def test_a_reason_too_long_for_its_line_wraps_under_the_headline_in_the_window(
    qtbot, open_window, wait_reply, tiny_target
) -> None:
    # Found walking the real window: under nearly every plain reply, at the window's first size,
    # the reason read "Nothing to reuse: this reply did not repeat text from the conversation or …".
    window = open_window(tiny_target, max_tokens=24, window_width=1280, window_height=860)
    window.presenter.send("hello")
    wait_reply(window)
    widget = next(w for w in reversed(window.chat.message_widgets()) if w.role == "assistant")
    panel = widget.speed
    panel.busy_seen, panel.usual_steps, panel.plain_tokens_per_s = False, None, None  # the walk's numbers
    none_drafted = _stats(1.0, 60, prefill_s=0.2)  # as the walk's first reply: nothing drafted
    panel.set_final(StatsRecord.from_dict(none_drafted.as_dict() | {"plain_tokens_per_s_est": 46.7}))
    qtbot.wait(100)  # laid out at the reply's width
    reason = panel.headline().reason
    assert reason.startswith("Nothing to reuse") and panel.width() < 700
    shown, below = _reason_shown(panel)
    assert below and shown.replace("\n", " ") == reason and "\n" in shown  # whole, on two lines
    assert panel.height() >= 3 * panel.fontMetrics().height()  # the panel grew to hold them
    image = panel.grab().toImage()  # and both are drawn: grey text low in the panel
    muted = QColor(theme.colors().muted_text)
    low = range(panel.height() - panel.fontMetrics().height() - 2, panel.height())
    assert any(
        _close(image.pixelColor(x, y), muted) for y in low for x in range(130, min(panel.width(), 400))
    )


def _close(c: QColor, colour: QColor, tolerance: int = 60) -> bool:
    return (
        abs(c.red() - colour.red()) + abs(c.green() - colour.green()) + abs(c.blue() - colour.blue())
        < tolerance
    )


def test_a_finished_reply_reads_its_usual_speed_from_its_record_as_its_details_do(qtbot) -> None:
    # No plain speed measured here: the usual speed is the quiet one-token steps', 150 tok/s while
    # the reply streamed and 100 kept in its record at its end. The Details (and the reply shown
    # again) read the record's; the headline above them read the streamed one.
    panel = SpeedPanel()
    qtbot.addWidget(panel)
    snapshot = _stats(2.0, 200, drafted=150, accepted=120, steps_with_draft=60)
    panel.add_stats([snapshot], None, 150.0)
    streamed = panel.headline()
    record = StatsRecord.of(snapshot, "eos", **{verdict.STEPS_KEY: 100.0})
    panel.set_final(record)
    shown_again = SpeedPanel()
    qtbot.addWidget(shown_again)
    shown_again.set_final(record)
    assert panel.headline() == shown_again.headline() != streamed
    usual = dict(verdict.details(record, None))["Usual speed"]
    assert (
        usual in panel.accessibleDescription()
        and usual == dict(verdict.details(record, None, 100.0))["Usual speed"]
    )


def test_a_short_reply_with_guesses_kept_says_at_its_end_that_it_was_too_short_to_tell(qtbot) -> None:
    # "A cat has long ears and short tail." (10 tokens, some of them guessed and kept): while it
    # streams nothing is said (its first step weighs too much); it ended with no words beside its
    # sparkline, where a reply with nothing kept said "About as fast as usual".
    panel = SpeedPanel()
    qtbot.addWidget(panel)
    snapshot = _stats(0.1, 10, drafted=4, accepted=3, steps_with_draft=2, plain_tokens_per_s_est=80.0)
    panel.add_stats([snapshot], None, 80.0)
    assert panel.headline().verdict is verdict.Verdict.PENDING
    panel.set_final(StatsRecord.of(snapshot, "eos"))
    assert (panel.headline().text, panel.headline().reason) == (verdict.TOO_SHORT, verdict.TOO_SHORT_REASON)
    assert verdict.TOO_SHORT in panel.accessibleDescription()
    longer = _stats(0.25, 20, drafted=8, accepted=6, steps_with_draft=4, plain_tokens_per_s_est=80.0)
    panel.set_final(StatsRecord.of(longer, "eos"))
    assert panel.headline().text != verdict.TOO_SHORT  # 16 tokens or more: the usual verdict
