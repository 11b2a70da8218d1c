"""The speed presenter without widgets: the baseline per target model and the stats records,
with real settings saved to this test's TANDEM_HOME and real numbers from a real engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.settings import Settings, load_settings, save_settings
from engine.config import DraftChoice, EngineConfig
from engine.events import Finished
from engine.session import Engine

pytest.importorskip("PySide6")

from ui.presenters.speed_presenter import MIN_TOKENS_FOR_BASELINE, SpeedPresenter  # noqa: E402


class Host:
    """What the window gives the presenter: its settings (saved on change) and the loaded target."""

    def __init__(self) -> None:
        self.settings = load_settings()
        self.target: str | None = None

    def update(self, settings: Settings) -> None:
        self.settings = settings
        save_settings(settings)


def presenter(host: Host) -> SpeedPresenter:
    return SpeedPresenter(lambda: host.settings, host.update, lambda: host.target)


@pytest.fixture(scope="module")
def runs(tiny_target: Path) -> dict[str, Finished]:
    """A plain and an n-gram reply from the real engine, and a short plain one."""
    engine = Engine(EngineConfig(str(tiny_target), draft=DraftChoice.parse("ngram"), n_ctx=512, n_threads=1))
    out: dict[str, Finished] = {}
    try:
        for name, speculate, n in (("plain", False, 24), ("ngram", True, 24), ("short", False, 4)):
            for event in engine.generate("abc abc abc abc", max_tokens=n, speculate=speculate):
                if isinstance(event, Finished):
                    out[name] = event
    finally:
        engine.close()
    assert out["plain"].stats.speculation == "none" and out["ngram"].stats.speculation == "ngram"
    return out


def test_a_plain_reply_becomes_the_baseline_of_its_target(runs: dict[str, Finished]) -> None:
    host = Host()
    speed = presenter(host)
    seen: list[tuple[str, float]] = []
    speed.baseline_changed.connect(lambda path, tps: seen.append((path, tps)))
    assert speed.plain_tokens_per_s() is None  # no model loaded
    assert not speed.record_plain_speed(runs["plain"])  # ... so nothing to keep it for

    host.target = "/models/a.gguf"
    assert speed.record_plain_speed(runs["plain"])
    expected = round(runs["plain"].stats.decode_tokens_per_s, 3)
    assert speed.plain_tokens_per_s() == expected > 0
    assert seen == [("/models/a.gguf", expected)]
    assert load_settings().plain_tokens_per_s == {"/models/a.gguf": expected}  # saved

    host.target = "/models/b.gguf"  # another target has no baseline yet
    assert speed.plain_tokens_per_s() is None


def test_only_a_whole_plain_reply_counts(runs: dict[str, Finished]) -> None:
    host = Host()
    host.target = "/models/a.gguf"
    speed = presenter(host)
    assert runs["short"].stats.n_generated < MIN_TOKENS_FOR_BASELINE
    assert not speed.record_plain_speed(runs["short"])
    assert not speed.record_plain_speed(runs["ngram"])
    cancelled = dataclasses.replace(runs["plain"], stop_reason="cancelled")
    assert not speed.record_plain_speed(cancelled)
    assert speed.plain_tokens_per_s() is None and load_settings().plain_tokens_per_s == {}


def test_records_keep_the_numbers_how_the_reply_ended_and_the_baseline(runs: dict[str, Finished]) -> None:
    host = Host()
    host.target = "/models/a.gguf"
    speed = presenter(host)
    finished = runs["ngram"]
    record = speed.record(finished.stats, finished.stop_reason).as_dict()
    assert record["stop_reason"] == finished.stop_reason
    assert record["n_generated"] == finished.stats.n_generated
    assert record["n_steps_with_draft"] == finished.stats.n_steps_with_draft
    assert "plain_tokens_per_s" not in record  # no baseline measured yet

    speed.record_plain_speed(runs["plain"])
    assert (
        speed.record(finished.stats, finished.stop_reason).as_dict()["plain_tokens_per_s"]
        == speed.plain_tokens_per_s()
    )
    partial_record = speed.partial_record(finished.stats)
    assert partial_record is not None
    partial = partial_record.as_dict()
    assert partial is not None and partial["stop_reason"] == "interrupted"
    assert partial["plain_tokens_per_s"] == speed.plain_tokens_per_s()
    assert speed.partial_record(None) is None


def test_the_presenter_holds_no_widget() -> None:
    from PySide6.QtWidgets import QWidget

    speed = presenter(Host())
    assert not isinstance(speed, QWidget) and not speed.findChildren(QWidget)
    assert isinstance(Host().settings, Settings)
