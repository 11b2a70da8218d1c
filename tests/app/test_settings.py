"""The speed-up choice in the settings file: one typed value (Settings.speed_up), read back from
files written before it, when Automatic was a flag ("speed_up_auto") beside the draft."""

from __future__ import annotations

import json

from app import paths
from app.settings import EngineKind, Settings, SpeedUp, Theme, load_settings, save_settings
from engine.config import NGRAM_LOOKUP, PLAIN_DECODING, DraftChoice


def _load(raw: dict[str, object]) -> Settings:
    paths.settings_path().write_text(json.dumps(raw), encoding="utf-8")
    return load_settings()


def test_an_older_settings_file_loads_into_the_same_speed_up_choice() -> None:
    # Written by the version with speed_up_auto: Automatic had chosen the text (no draft model paid).
    old = {"format": 2, "draft": "ngram", "speed_up_auto": True, "draft_model_path": "/m/d.gguf"}
    settings = _load(old)
    assert settings.speed_up is SpeedUp.AUTO and settings.draft == NGRAM_LOOKUP
    assert settings.draft_model_path == "/m/d.gguf"
    # Automatic had chosen the draft model.
    settings = _load({**old, "draft": "/m/d.gguf"})
    assert settings.speed_up is SpeedUp.AUTO and settings.draft == DraftChoice.of_model("/m/d.gguf")
    # Not Automatic: the draft's own kind, whatever it is.
    assert _load({**old, "speed_up_auto": False}).speed_up is SpeedUp.NGRAM
    assert _load({**old, "speed_up_auto": False, "draft": "/m/d.gguf"}).speed_up is SpeedUp.DRAFT
    assert _load({"draft": "none"}).speed_up is SpeedUp.NONE
    assert _load({}).speed_up is SpeedUp.NGRAM == Settings().speed_up


def test_the_speed_up_choice_is_saved_as_one_value_and_read_back() -> None:
    settings = Settings().with_draft(DraftChoice.of_model("/m/d.gguf"), SpeedUp.AUTO)
    save_settings(settings)
    saved = json.loads(paths.settings_path().read_text(encoding="utf-8"))
    assert saved["speed_up"] == "auto" and saved["draft"] == "/m/d.gguf" and "speed_up_auto" not in saved
    assert load_settings() == settings
    # A choice this build does not know: the draft's kind.
    assert _load({**saved, "speed_up": "warp"}).speed_up is SpeedUp.DRAFT


def test_a_draft_changes_with_the_choice_that_made_it() -> None:
    auto = Settings().with_draft(NGRAM_LOOKUP, SpeedUp.AUTO)
    assert auto.speed_up is SpeedUp.AUTO and auto.draft == NGRAM_LOOKUP
    # A pair chosen on the Models page (no choice given): Automatic stays chosen.
    paired = auto.with_draft(DraftChoice.of_model("/m/d.gguf"))
    assert paired.speed_up is SpeedUp.AUTO and paired.draft_model_path == "/m/d.gguf"
    # Any other choice is the draft's kind; the draft model chosen last is kept.
    off = paired.with_draft(PLAIN_DECODING, SpeedUp.NONE)
    assert off.speed_up is SpeedUp.NONE and off.draft_model_path == "/m/d.gguf"
    assert Settings().with_draft(DraftChoice.of_model("/m/e.gguf")).speed_up is SpeedUp.DRAFT


def test_the_theme_and_the_engine_are_read_back_as_their_kinds() -> None:
    settings = _load({"theme": "dark", "engine": "remote", "remote_url": "10.0.0.2:8080"})
    assert settings.theme is Theme.DARK and settings.engine is EngineKind.REMOTE and settings.is_remote
    # Hand-edited to values this build does not know: the defaults.
    settings = _load({"theme": "neon", "engine": 3})
    assert settings.theme is Theme.SYSTEM and settings.engine is EngineKind.LOCAL
    save_settings(Settings(theme=Theme.LIGHT))
    assert json.loads(paths.settings_path().read_text(encoding="utf-8"))["theme"] == "light"
