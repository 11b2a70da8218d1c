"""The chat header's presets: Tandem's own (ui.presenters.words.built_in_presets), then the
user's for the model in use; choosing one applies its sampling, speed-up and instructions; the
settings now can be saved as one, under a name."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QInputDialog

from app.settings import Preset


class PresetChoices(QObject):
    def __init__(self, window: Any) -> None:
        """window: the main window (its presenter, header, chat and settings)."""
        super().__init__(window)
        self.window = window

    def presets(self) -> list[Preset]:
        """Tandem's presets, then the user's for the model in use (or for any model)."""
        from app.settings import load_presets
        from ui.presenters.words import built_in_presets

        model = self.window.presenter.engine.model_key()
        return [*built_in_presets(), *(p for p in load_presets() if p.is_for(model))]

    def refresh(self) -> None:
        self.window.header.set_presets(self.presets(), self.window.settings.preset_name)

    def choose(self, preset: Preset) -> None:
        """The header's choice: its sampling and speed-up (from the next reply), its instructions."""
        self.window.presenter.apply_preset(preset)
        self.window.chat.set_system_prompt(preset.system_prompt)

    def apply(self, preset: Preset) -> None:
        """A preset chosen for the user (a suggested task, or putting theirs back): as the header
        chooses one, and shown there."""
        self.choose(preset)
        self.refresh()

    def ask_and_save(self) -> None:
        name, ok = QInputDialog.getText(
            self.window, "Save a preset", "Name (for this model: instructions, sampling and speed-up):"
        )
        if ok and name.strip():
            self.save(name.strip())

    def save(self, name: str) -> None:
        """The settings now (and the instructions shown) as a preset for the model in use."""
        from app.settings import load_presets, save_presets

        window = self.window
        preset = window.presenter.current_preset(name, window.chat.system_prompt.text().strip())
        kept = [p for p in load_presets() if (p.name, p.model) != (preset.name, preset.model)]
        try:
            save_presets([*kept, preset])
        except OSError as e:
            window.chat.set_notice(f"The preset could not be saved: {e.strerror or e}.", True)
            return
        window.presenter.update_settings(preset_name=name)
        self.refresh()
