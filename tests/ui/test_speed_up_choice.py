"""The header's speed-up choice from the settings' one value (Settings.speed_up), without an engine
(nothing is loaded: the controller only keeps the choice) and without widgets: a settings file
written before it (Automatic as "speed_up_auto") shows the same choice, and a choice made now is
saved as that one value."""

from __future__ import annotations

import json

import pytest

from app import paths
from app.settings import Settings, SpeedUp, load_settings, save_settings

pytest.importorskip("pytestqt")

from app.host.controller import EngineController  # noqa: E402
from engine.config import NGRAM_LOOKUP, DraftChoice  # noqa: E402
from ui.presenters.engine_presenter import EnginePresenter  # noqa: E402


class Host:
    """What the window gives the presenter: its settings, saved on change."""

    def __init__(self) -> None:
        self.settings = load_settings()

    def update(self, settings: Settings) -> None:
        self.settings = settings
        save_settings(settings)


def test_an_older_files_automatic_is_shown_and_a_new_choice_saved_as_one_value(qtbot) -> None:  # type: ignore[no-untyped-def]
    draft = paths.models_dir() / "draft.gguf"
    draft.parent.mkdir(parents=True, exist_ok=True)
    draft.write_bytes(b"GGUF")
    paths.settings_path().write_text(
        json.dumps({"format": 2, "draft": "ngram", "speed_up_auto": True, "draft_model_path": str(draft)}),
        encoding="utf-8",
    )
    host = Host()
    engine = EnginePresenter(EngineController(), lambda: host.settings, host.update)
    engine.reshow_speculation()
    assert engine.speculation.choice is SpeedUp.AUTO and engine.draft == NGRAM_LOOKUP
    # The draft model chosen: saved as the one value, the old flag gone from the file.
    assert engine.choose_speculation(SpeedUp.DRAFT)
    assert engine.speculation.choice is SpeedUp.DRAFT
    saved = json.loads(paths.settings_path().read_text(encoding="utf-8"))
    assert saved["speed_up"] == "draft" and saved["draft"] == str(draft) and "speed_up_auto" not in saved
    assert load_settings().draft == DraftChoice.of_model(str(draft))
    engine.set_speculation(NGRAM_LOOKUP, SpeedUp.AUTO)
    assert engine.speculation.choice is SpeedUp.AUTO and load_settings().speed_up is SpeedUp.AUTO
