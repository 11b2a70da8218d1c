"""The speedup the window shows: estimated (and marked so) from the engine's own plain-speed
measurement until a plain run of the model exists, measured after that."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.chat import CHAT_SAMPLING
from engine.events import StatsRecord
from ui.stats_format import DASH, details_line, details_tooltip, draft_sources, live_line, speedup_text

STATS = {
    "speculation": "ngram",
    "decode_tokens_per_s": 90.0,
    "n_drafted": 40,
    "acceptance_rate": 0.5,
    "mean_accepted_length": 2.0,
    "n_generated": 100,
}


def _record(stats: dict[str, object]) -> StatsRecord:
    return StatsRecord.from_dict(stats)


def test_speedup_text_measured_estimated_or_unknown() -> None:
    assert speedup_text(90.0, 50.0, "ngram") == "1.80×"
    assert speedup_text(90.0, None, "ngram", 50.0) == "≈1.8× est."
    assert speedup_text(90.0, 45.0, "ngram", 50.0) == "2.00×"  # measured wins over the estimate
    assert speedup_text(90.0, None, "ngram") == DASH
    assert speedup_text(0.0, None, "ngram", 50.0) == DASH
    assert speedup_text(40.0, None, "none", 50.0) == "1.00× (plain)"


def test_live_line_and_details_use_the_engines_estimate_until_a_plain_run() -> None:
    estimated = {**STATS, "plain_tokens_per_s_est": 50.0}
    assert live_line(_record(estimated), None).endswith("speedup ≈1.8× est.")
    assert live_line(_record(estimated), 60.0).endswith("speedup 1.50×")
    assert "speedup ≈1.8× est." in details_line(_record(estimated))
    assert "speedup 1.50×" in details_line(_record({**estimated, "plain_tokens_per_s": 60.0}))
    assert "estimated" in details_tooltip(_record(estimated)) and "measured" in details_tooltip(
        _record({**estimated, "plain_tokens_per_s": 60.0})
    )
    # Too short a reply for a fair estimate (its first step weighs too much).
    assert live_line(_record({**estimated, "n_generated": 6}), None).endswith(f"speedup {DASH}")
    # Records saved before there was an estimate read as before.
    assert live_line(_record(STATS), None).endswith(f"speedup {DASH}")


def test_a_reply_says_where_its_accepted_drafts_came_from() -> None:
    local = {**STATS, "n_accepted": 20, "n_steps_with_draft": 10}
    assert draft_sources(_record(local)) == ""  # n-gram drafts from the text alone: nothing to tell
    regenerated = {**local, "n_accepted_memory": 15}
    assert draft_sources(_record(regenerated)) == "accepted from the text 25%, earlier replies 75%"
    assert "accepted from the text 25%, earlier replies 75%" in details_line(_record(regenerated))
    assert draft_sources(_record({**local, "n_accepted_memory": 20})) == "accepted from earlier replies 100%"
    assert "from the text 25%, earlier replies 75%" in details_tooltip(_record(regenerated))
    model = {**local, "speculation": "draft", "n_accepted_text": 5}
    assert draft_sources(_record(model)) == "accepted from the draft model 75%, the text 25%"
    assert draft_sources(_record({**model, "n_accepted_text": 20})) == "accepted from the text 100%"
    # A server says what it accepted, not from where (nor in how many steps).
    assert draft_sources(_record({**model, "n_steps_with_draft": 0})) == ""
    assert f"Accepted drafts</td><td>&nbsp;&nbsp;{DASH}" in details_tooltip(_record(local))


@pytest.mark.parametrize("draft", ["ngram"])
def test_the_window_shows_an_estimate_then_the_measured_speedup(
    qtbot, open_window, wait_reply, tiny_target: Path, draft: str
) -> None:
    # The window's chat sampling defaults (the fixture would make it greedy).
    window = open_window(tiny_target, draft=draft, max_tokens=48, temperature=CHAT_SAMPLING.temperature)
    window.send("the cat sat on the mat. the cat sat on the mat. the cat")
    wait_reply(window)
    headline = window.chat.message_widgets()[-1].speed.headline()
    assert headline.speedup is not None and headline.is_estimate, headline

    window.set_speculation("none")
    qtbot.waitUntil(lambda: window.controller.info.speculation == "none", timeout=30_000)
    window.send("again, plainly")
    wait_reply(window)
    window.set_speculation("ngram")
    qtbot.waitUntil(lambda: window.controller.info.speculation == "ngram", timeout=30_000)
    window.send("the cat sat on the mat. the cat sat on the mat. the cat")
    wait_reply(window)
    headline = window.chat.message_widgets()[-1].speed.headline()
    assert headline.speedup is not None and not headline.is_estimate, headline
    assert not headline.text.startswith("About ") or headline.verdict == "neutral"


def test_drafts_from_attached_documents_are_named_and_kept_in_the_record() -> None:
    local = {**STATS, "n_accepted": 20, "n_steps_with_draft": 10, "n_accepted_document": 15}
    assert draft_sources(_record(local)) == "accepted from the attached documents 75%, the conversation 25%"
    assert _record(local).as_dict()["n_accepted_document"] == 15  # saved with the reply, read back
    model = {**local, "speculation": "draft", "n_accepted_text": 16}
    assert draft_sources(_record(model)) == (
        "accepted from the draft model 20%, the attached documents 75%, the conversation 5%"
    )
