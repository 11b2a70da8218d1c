"""Presets: instructions, sampling and speed-up, named, per model; chosen from the chat's header."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from app.settings import Preset, SpeedUp, load_presets, load_settings, presets_path, save_presets


def test_a_preset_applies_and_the_current_settings_save_as_one(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target, draft="ngram", temperature=0.7)
    combo = window.header.preset_combo
    names = [combo.itemText(i) for i in range(combo.count())]
    assert names[:4] == ["None", "Edit or copy text", "Everyday chat", "Creative writing"]
    assert names[-1] == window.header.SAVE_ITEM

    index = combo.findText("Edit or copy text")
    combo.setCurrentIndex(index)
    combo.activated.emit(index)
    settings = load_settings()
    assert settings.temperature == 0.0 and settings.preset_name == "Edit or copy text"
    # A copy repeats the document: a repetition penalty would lower exactly its tokens.
    assert settings.repeat_penalty == 1.0
    assert settings.speed_up is SpeedUp.AUTO and window.header.speed_combo.currentData() == "auto"
    assert window.chat.system_prompt.text() == ""  # exact and sped up; the request says what to do

    window.apply_settings(dataclasses.replace(window.presenter.settings, temperature=0.3))
    window.chat.system_prompt.setText("Answer in French.")
    window.preset_choices.save("French")
    (saved,) = load_presets()
    assert saved == Preset(
        "French", str(tiny_target), "Answer in French.", 0.3, saved.top_p, saved.repeat_penalty, "auto"
    )
    assert combo.currentText() == "French (this model)"
    assert not saved.is_for("some-other-model.gguf") and saved.is_for(str(tiny_target))


def test_presets_file_tolerates_what_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "presets.json"
    path.write_text("{broken", encoding="utf-8")
    assert load_presets(path) == []
    save_presets([Preset("A"), Preset("B", model="m.gguf", temperature=0.0)], path)
    text = path.read_text(encoding="utf-8").replace('"temperature": 0.0', '"temperature": "hot"')
    path.write_text(text, encoding="utf-8")
    a, b = load_presets(path)
    assert (a.name, b.name, b.model) == ("A", "B", "m.gguf")
    assert b.temperature == Preset("x").temperature  # a value of the wrong type: the default
    assert presets_path().name == "presets.json"
