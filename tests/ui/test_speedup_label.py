"""The speedup the window shows: estimated (and marked so) from the engine's own plain-speed
measurement until a plain run of the model exists, measured after that."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.chat import CHAT_SAMPLING
from engine.config import NGRAM_LOOKUP, PLAIN_DECODING
from engine.events import StatsRecord
from ui.presenters.stats_format import draft_sources

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


def test_a_reply_says_where_its_accepted_drafts_came_from() -> None:
    local = {**STATS, "n_accepted": 20, "n_steps_with_draft": 10}
    assert draft_sources(_record(local)) == ""  # n-gram drafts from the text alone: nothing to tell
    regenerated = {**local, "n_accepted_memory": 15}
    assert draft_sources(_record(regenerated)) == "accepted from the text 25%, earlier replies 75%"
    assert draft_sources(_record({**local, "n_accepted_memory": 20})) == "accepted from earlier replies 100%"
    model = {**local, "speculation": "draft", "n_accepted_text": 5}
    assert draft_sources(_record(model)) == "accepted from the draft model 75%, the text 25%"
    assert draft_sources(_record({**model, "n_accepted_text": 20})) == "accepted from the text 100%"
    # A server says what it accepted, not from where (nor in how many steps).
    assert draft_sources(_record({**model, "n_steps_with_draft": 0})) == ""


@pytest.mark.parametrize("draft", ["ngram"])
def test_the_window_shows_an_estimate_then_the_measured_speedup(
    qtbot, open_window, wait_reply, tiny_target: Path, draft: str
) -> None:
    # The window's chat sampling defaults (the fixture would make it greedy).
    window = open_window(tiny_target, draft=draft, max_tokens=48, temperature=CHAT_SAMPLING.temperature)
    window.presenter.send("the cat sat on the mat. the cat sat on the mat. the cat")
    wait_reply(window)
    headline = window.chat.message_widgets()[-1].speed.headline()
    assert headline.speedup is not None and headline.is_estimate, headline

    window.presenter.engine.set_speculation(PLAIN_DECODING)
    qtbot.waitUntil(lambda: window.controller.info.speculation == "none", timeout=30_000)
    window.presenter.send("again, plainly")
    wait_reply(window)
    window.presenter.engine.set_speculation(NGRAM_LOOKUP)
    qtbot.waitUntil(lambda: window.controller.info.speculation == "ngram", timeout=30_000)
    window.presenter.send("the cat sat on the mat. the cat sat on the mat. the cat")
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
