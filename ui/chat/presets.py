"""The chat header's presets: Tandem's own (ui.presenters.words.built_in_presets), then the
user's for the model in use; choosing one applies its sampling, speed-up and instructions; the
settings now can be saved as one, under a name."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QInputDialog, QWidget

from app.settings import Preset
from ui.chat.chat_header import ChatHeader
from ui.chat.chat_view import ChatView
from ui.presenters.presenter import ChatPresenter


class PresetChoices(QObject):
    def __init__(self, presenter: ChatPresenter, header: ChatHeader, chat: ChatView, parent: QWidget) -> None:
        """presenter: the settings, the model in use, a preset applied; header: where they are
        offered; chat: the instructions; parent: what the name's dialog opens over."""
        super().__init__(parent)
        self.presenter, self.header, self.chat, self.parent_widget = presenter, header, chat, parent

    def presets(self) -> list[Preset]:
        """Tandem's presets, then the user's for the model in use (or for any model)."""
        from app.settings import load_presets
        from ui.presenters.words import built_in_presets

        model = self.presenter.engine.model_key()
        return [*built_in_presets(), *(p for p in load_presets() if p.is_for(model))]

    def refresh(self) -> None:
        self.header.set_presets(self.presets(), self.presenter.settings.preset_name)

    def choose(self, preset: Preset) -> None:
        """The header's choice: its sampling and speed-up (from the next reply), its instructions."""
        self.presenter.apply_preset(preset)
        self.chat.set_system_prompt(preset.system_prompt)

    def apply(self, preset: Preset) -> None:
        """A preset chosen for the user (a suggested task, or putting theirs back): as the header
        chooses one, and shown there."""
        self.choose(preset)
        self.refresh()

    def ask_and_save(self) -> None:
        name, ok = QInputDialog.getText(
            self.parent_widget,
            "Save a preset",
            "Name (for this model: instructions, sampling and speed-up):",
        )
        if ok and name.strip():
            self.save(name.strip())

    def save(self, name: str) -> None:
        """The settings now (and the instructions shown) as a preset for the model in use."""
        from app.settings import load_presets, save_presets

        preset = self.presenter.current_preset(name, self.chat.system_prompt.text().strip())
        kept = [p for p in load_presets() if (p.name, p.model) != (preset.name, preset.model)]
        try:
            save_presets([*kept, preset])
        except OSError as e:
            self.chat.set_notice(f"The preset could not be saved: {e.strerror or e}.", True)
            return
        self.presenter.update_settings(replace(self.presenter.settings, preset_name=name))
        self.refresh()
