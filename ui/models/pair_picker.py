"""The Models page's "Chat with" box: a target, in the chat header's model picker
(ui/chat/model_picker.py), and a draft for it: those llama.cpp's vocabulary rules accept, n-gram
drafting and none; the others stay in the list, disabled, with the broken rule as their tooltip
("why can't I pick this one?" is the question users ask most).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QGridLayout, QGroupBox, QLabel, QWidget

from app.library.catalog import LocalModel, local_model
from app.settings import SpeedUp
from engine.config import NGRAM_LOOKUP, PLAIN_DECODING, DraftChoice
from ui.chat.draft_menu import draft_options
from ui.chat.model_picker import ModelPicker, chat_models, recent_files
from ui.presenters.task_ability import model_file
from ui.presenters.words import choice_name
from ui.qt.widgets import button, label, named


class PairPicker(QGroupBox):
    """Emits pair_chosen(target_path, DraftChoice): from the text, off, or a draft model."""

    pair_chosen = Signal(str, object)  # target path, DraftChoice

    def __init__(self, models_dir: Path, parent: QWidget | None = None) -> None:
        """models_dir: the models folder, whose files the target list names as the header does."""
        super().__init__("Chat with", parent)
        self.local_models: list[LocalModel] = []
        grid = QGridLayout(self)
        # The header's picker, the same list.
        self.target_combo = named(ModelPicker(with_open_file=False), "targetCombo", "Target model")
        self.target_combo.about_to_open.connect(self._relist)
        self.models_dir = models_dir
        self.in_use: Path | None = None
        self.draft_combo = named(QComboBox(), "draftCombo", "Draft")
        self.use_pair_button = button(
            "Use this pair", clicked=self.on_use_pair_button_clicked, accessible="Use this pair"
        )
        self.pair_explanation = label(name="pairExplanation")
        target_label, draft_label = QLabel("&Target"), QLabel("&Draft")
        target_label.setBuddy(self.target_combo)
        draft_label.setBuddy(self.draft_combo)
        grid.addWidget(target_label, 0, 0)
        grid.addWidget(self.target_combo, 0, 1)
        grid.addWidget(draft_label, 0, 2)
        grid.addWidget(self.draft_combo, 0, 3)
        grid.addWidget(self.use_pair_button, 0, 4)
        grid.addWidget(self.pair_explanation, 1, 0, 1, 5)
        grid.setColumnStretch(1, 2)
        grid.setColumnStretch(3, 2)
        self.target_combo.currentIndexChanged.connect(self.on_target_combo_current_index_changed)

    def set_models(self, models: Sequence[LocalModel], in_use: Path | None, select: Path | None) -> None:
        """The models to chat with, as the header lists them (the one in use says so); keeps the
        target chosen, or chooses `select` where it is among them. `models` (the local models)
        are the drafts."""
        self.local_models = list(models)
        self.in_use = in_use
        self._relist(select)

    def _relist(self, select: Path | None = None) -> None:
        combo = self.target_combo
        previous = combo.currentData()
        combo.blockSignals(True)
        combo.set_entries(chat_models(str(self.in_use) if self.in_use else None, "", self.models_dir))
        in_use_index = -1

        def paths(i: int) -> list[Path | None]:  # an entry's file by each road to it
            return [self._path_of(k) for k in (combo.entries[i].key, *combo.entries[i].aliases)]

        for i, e in enumerate(combo.entries):
            if self.in_use is not None and self.in_use.resolve() in paths(i):
                combo.setItemText(i, f"{e.label} (in use)")
                in_use_index = i
        if select is not None:
            found = [i for i in range(len(combo.entries)) if select.resolve() in paths(i)]
            previous = combo.itemData(found[0]) if found else previous
        index = combo.findData(previous) if previous else in_use_index
        combo.setCurrentIndex(max(index, 0) if combo.count() else -1)
        combo.blockSignals(False)
        self.on_target_combo_current_index_changed()

    @staticmethod
    def _path_of(key: str) -> Path | None:
        """A target's file (a built-in model's may not be there yet)."""
        path = model_file(key)
        return path.resolve() if path is not None else None

    def _target(self, key: str) -> LocalModel | None:
        path = self._path_of(key)
        if path is None or not path.is_file():
            return None
        found = next((m for m in self.local_models if m.path.resolve() == path), None)
        return found or local_model(path)

    def on_target_combo_current_index_changed(self, _index: int = 0) -> None:
        self.draft_combo.clear()
        target_path = self.target_combo.currentData()
        self.use_pair_button.setEnabled(target_path is not None)
        if target_path is None:
            self.pair_explanation.setText("No local model yet: download a pair or import a GGUF file.")
            return
        # The speed-up's names as the header says them (ui.presenters.words), not the engine's.
        self.draft_combo.addItem(choice_name(SpeedUp.NGRAM), NGRAM_LOOKUP.text)
        self.draft_combo.addItem(f"{choice_name(SpeedUp.NONE)} (the usual speed)", PLAIN_DECODING.text)
        target = self._target(str(target_path))
        if target is None or target.info is None:  # a built-in model made on first use
            self.pair_explanation.setText("Drafting from the text works with this model.")
            self.pair_explanation.setToolTip("")
            self.draft_combo.setCurrentIndex(0)
            return
        # The header's draft list (ui/chat/draft_menu.py) over this page's models and the opened files.
        opened = [str(path) for path in recent_files()]
        model = cast(QStandardItemModel, self.draft_combo.model())
        refused: list[str] = []
        for option in draft_options(str(target.path), opened, self.local_models):
            self.draft_combo.addItem(option.name, str(option.path))
            index = self.draft_combo.count() - 1
            tip = (
                f"cannot draft for this target: {option.why_not}"
                if option.why_not
                else "can draft for this target"
            )
            self.draft_combo.setItemData(index, tip, Qt.ItemDataRole.ToolTipRole)
            if option.why_not:
                model.item(index).setEnabled(False)  # disabled but visible, with the rule it breaks
                refused.append(f"{option.name} ({option.path.name}): {option.why_not}")
        self._explain(refused)
        self.draft_combo.setCurrentIndex(0)

    def _explain(self, refused: list[str]) -> None:
        """The line under the pair, read from the Draft list as it is (so it cannot disagree
        with it): the models in it that can draft for the target, by name; how many cannot
        (greyed there; their rules behind a "why", the line's tooltip); or no model at all."""
        models = range(2, self.draft_combo.count())  # after "From the text" and "Off"
        pairing = [self.draft_combo.itemText(i) for i in models if self.is_draft_enabled(i)]
        names = " and ".join([", ".join(pairing[:-1]), pairing[-1]] if len(pairing) > 1 else pairing)
        n_refused = len(models) - len(pairing)
        greyed = "cannot draft for this target (greyed in the list; hover this line for why)"
        if pairing and n_refused:
            text = f"{n_refused} of the models here {greyed}; {names} can."
        elif pairing:
            text = f"{names} can draft for this target (choose it under Draft)."
        elif n_refused:
            which = "The one model" if n_refused == 1 else f"The {n_refused} models"
            text = f"{which} here {greyed}; drafting from the text works with any model."
        else:
            text = "No other model here to draft with: drafting from the text works with any model."
        self.pair_explanation.setText(text)
        self.pair_explanation.setToolTip("Why:\n" + "\n".join(refused) if refused else "")

    def is_draft_enabled(self, index: int) -> bool:
        return cast(QStandardItemModel, self.draft_combo.model()).item(index).isEnabled()

    def on_use_pair_button_clicked(self) -> None:
        target = self.target_combo.currentData()
        draft = self.draft_combo.currentData()
        if target is None or draft is None or not self.is_draft_enabled(self.draft_combo.currentIndex()):
            return
        self.pair_chosen.emit(str(target), DraftChoice.parse(str(draft)))
