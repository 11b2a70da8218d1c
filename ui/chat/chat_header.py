"""The chat's header, where people look for it (LM Studio, Jan and ChatGPT put the model at the top
of the chat): the model picker (ui/chat/model_picker.py), the speed-up picker with plain names and
a one-line why for each, the presets, the loaded pair's state in words, and the highlight's legend
with its switch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QPainter, QPaintEvent, QStandardItemModel, QTextCursor, QTextDocument
from PySide6.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.library.model_spec import parse_model
from app.settings import Preset, SpeedUp
from engine.events import DraftSource
from ui.chat.markdown_view import tint_format
from ui.chat.model_picker import OPEN_FILE_KEY, ModelPicker, chat_models
from ui.presenters.words import (
    LEGEND,
    LEGEND_ORDER,
    LEGEND_SHORT,
    SOURCE_NAMES,
    SPEED_UP_CHOICES,
    built_in_key,
    choice_name,
    legend_said,
    source_tip,
)
from ui.qt import theme
from ui.qt.widgets import flush, named, tool_button


def _preset_tip(preset: Preset) -> str:
    how = "exact (temperature 0)" if preset.temperature <= 0 else f"temperature {preset.temperature:g}"
    parts = [how, f"speed-up: {choice_name(preset.speed_up)}"]
    if preset.system_prompt:
        parts.append(f"instructions: {preset.system_prompt}")
    return "; ".join(parts)


class LegendSwatch(QWidget):
    """A source's name drawn as its tinted text is: the same char format (ui.chat.markdown_view's
    tint_format), so the swatch shows the tint, the underline style and the mark colour exactly
    (Qt's rich text in a QLabel draws every underline solid)."""

    def __init__(self, source: DraftSource, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source, self.name = source, name
        named(self, "tintSwatch", name, source_tip(source))
        self._doc = QTextDocument(self)
        self._doc.setDocumentMargin(1)
        self.restyle()

    def restyle(self) -> None:
        self._doc.clear()
        self._doc.setDefaultFont(self.font())
        fmt = tint_format(self.source)
        fmt.setForeground(theme.colors().text)
        QTextCursor(self._doc).insertText(f"\u00a0{self.name}\u00a0", fmt)
        self.setFixedSize(self._doc.size().toSize())
        self.update()

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        self._doc.drawContents(painter)


class ChatHeader(QWidget):
    model_chosen = Signal(object)  # ModelSpec: a built-in model (its name) or a GGUF file
    open_file_requested = Signal()  # "Open a GGUF file…": the window asks for one
    speed_up_chosen = Signal(object)  # app.settings.SpeedUp
    tint_toggled = Signal(bool)
    preset_chosen = Signal(object)  # app.settings.Preset
    save_preset_requested = Signal()

    def __init__(self, show_tint: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatHeader")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.ends = QHBoxLayout(self)  # the rows, then the switches at the end (add_switch)
        self.ends.setContentsMargins(8, 6, 0, 4)
        self.ends.setSpacing(14)
        rows = QVBoxLayout()
        self.ends.addLayout(rows, 1)
        rows.setSpacing(4)
        row = flush(QHBoxLayout())
        rows.addLayout(row)
        row.setSpacing(8)

        tip = "The model that writes the replies (more on the Models page)"
        self.model_combo = named(ModelPicker(), "modelPicker", "Model", tip)  # searchable, with size and fit
        self.model_combo.about_to_open.connect(self.refresh_models)
        self.speed_combo = named(QComboBox(), "speedUpPicker", "Speed-up")
        for choice in SPEED_UP_CHOICES:
            self.speed_combo.addItem(choice.name, str(choice.key))
            self.speed_combo.setItemData(
                self.speed_combo.count() - 1, choice.why, Qt.ItemDataRole.ToolTipRole
            )
        self.speed_combo.currentIndexChanged.connect(self._show_why)
        tip = "Instructions, sampling and speed-up, saved under a name"
        self.preset_combo = named(QComboBox(), "presetPicker", "Preset", tip)
        fits = QComboBox.SizeAdjustPolicy
        # (the speed-up as narrow as 8 characters, eliding, in a narrow window)
        for caption, combo, fit, least, chosen in (
            ("Model", self.model_combo, fits.AdjustToContents, 16, self.on_model_combo_activated),
            ("Speed-up", self.speed_combo, fits.AdjustToContents, 8, self.on_speed_combo_activated),
            ("Preset", self.preset_combo, fits.AdjustToMinimumContentsLengthWithIcon, 16, self.on_preset_combo_activated),
        ):  # fmt: skip
            buddy = QLabel(caption)
            buddy.setBuddy(combo)
            combo.setSizeAdjustPolicy(fit)
            combo.setMinimumContentsLength(least)
            combo.activated.connect(chosen)
            row.addWidget(buddy)
            row.addWidget(combo)
        self._presets: list[Preset] = []

        selectable = Qt.TextInteractionFlag.TextSelectableByMouse
        self.state_label = named(QLabel("Loading…", textInteractionFlags=selectable), "pairLabel")
        self.state_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        # No least width: it takes the row's room left (its whole text is its tooltip), and the
        # window's least width stays the pickers' (a 1366x768 screen).
        self.state_label.setMinimumWidth(0)
        row.addWidget(self.state_label, 1)
        row.addStretch(0)  # the row's end while the state line is hidden (it says the choice again)
        self._restates: SpeedUp | None = None  # the choice the state line says again, if any

        self.tint_check = named(QCheckBox(), "tintCheck", "Highlight the model's confirmed text", LEGEND)
        self.tint_check.setChecked(show_tint)
        self.tint_check.toggled.connect(self.tint_toggled)
        self.legend = named(QLabel(LEGEND_SHORT), "tintLegend", "Highlight legend", LEGEND)
        self.legend.setAccessibleDescription(LEGEND)
        self.legend.setBuddy(self.tint_check)
        self._sources: frozenset[DraftSource] = frozenset()  # the sources the legend names
        self._legend_shown = True  # the chat is the page shown (set_legend_shown)
        self.swatches: list[LegendSwatch] = []
        # The legend's own line, under the pickers: the switch, a swatch per source shown, and
        # what the tint means.
        self.legend_row = flush(QHBoxLayout())
        self.legend_row.setSpacing(6)
        self.legend_row.addWidget(self.tint_check)
        self.legend_row.addWidget(self.legend)
        self.legend_row.addStretch(1)
        rows.addLayout(self.legend_row)
        self._in_use: str | None = None
        self._in_use_name = ""  # its header's name
        self._stand_in = ("", "")  # words and tip said in the picker for a model of no entry (set_stand_in)
        self.restyle()
        self._show_why()

    def add_switch(self, action: QAction) -> None:
        """A switch at the header's end (the window's API): in the header, not the toolbar, so a
        narrow window never hides it in the toolbar's overflow (the pickers give way first)."""
        switch = tool_button()
        switch.setDefaultAction(action)
        self.ends.addWidget(switch, 0, Qt.AlignmentFlag.AlignVCenter)

    # ---- the highlight's legend

    def set_sources(self, sources: Iterable[DraftSource]) -> None:
        """Name these sources in the legend (those of the conversation shown), each with its swatch."""
        known = frozenset(sources)
        if known != self._sources:
            self._sources = known
            self.restyle()

    def set_legend_shown(self, shown: bool) -> None:
        """The legend names the chat's sources: shown with the chat, not over Compare or Models."""
        self._legend_shown = shown
        for widget in (self.tint_check, self.legend, *self.swatches):
            widget.setVisible(shown)

    def restyle(self) -> None:
        """The swatches of the sources shown (or one that says "Highlighted" while none is), in
        the theme's colours."""
        shown = [(s, SOURCE_NAMES[s]) for s in LEGEND_ORDER if s in self._sources] or [
            (DraftSource.TEXT, "Highlighted")
        ]
        if [(w.source, w.name) for w in self.swatches] != shown:
            for swatch in self.swatches:
                self.legend_row.removeWidget(swatch)
                swatch.deleteLater()
            self.swatches = [LegendSwatch(source, name, self) for source, name in shown]
            for i, swatch in enumerate(self.swatches):
                self.legend_row.insertWidget(1 + i, swatch)
                # (a layout shows a new child only on the next turn of the event loop)
                swatch.setVisible(self._legend_shown)
        else:
            for swatch in self.swatches:
                swatch.restyle()
        self.legend.setAccessibleDescription(legend_said(self._sources))

    # ---- models

    def refresh_models(self) -> None:
        """The models to chat with (ui/chat/model_picker.py's chat_models: the Models page lists
        the same), each by its name with its size and fit, then "Open a GGUF file…"."""
        self.model_combo.set_entries(chat_models(self._in_use, self._in_use_name))
        self._select_in_use()

    def set_model_in_use(self, key: str | None, name: str = "", server: str = "") -> None:
        """The loaded model (a path, or a built-in model's name). A built-in model's own file is
        that model's entry (chosen again, it is not loaded again). `server`: the API root of a
        server whose model `name` answers: the picker names it and its host, not the local model."""
        from urllib.parse import urlsplit

        key = (built_in_key(key) or key) if key else key
        self._in_use = key
        self._in_use_name = "" if server else name  # (the server's model is not the local file)
        if key and self.model_combo.index_of(key) < 0:
            self.refresh_models()  # a model opened from elsewhere: listed
        if server:
            self.set_stand_in(f"{name} · on {urlsplit(server).netloc}", f"{name} on the server at {server}")
        else:
            self.set_stand_in("")

    def set_stand_in(self, words: str, tip: str = "") -> None:
        """No local model in use (a server's, or none: a server or a file that failed): `words`
        in the picker, `tip` on hover, until a model loads (set_model_in_use)."""
        self._stand_in = (words, tip)
        self._select_in_use()

    def _select_in_use(self) -> None:
        """The model in use chosen in the picker; known by its entry's key from here on (a copy
        of a listed file, opened by another path, is that entry: chosen again, not reloaded)."""
        self.model_combo.show_stand_in(*self._stand_in)
        if self._stand_in[0]:
            return
        index = self.model_combo.index_of(self._in_use)
        if index >= 0:
            self.model_combo.setCurrentIndex(index)
            self.model_combo.line.setCursorPosition(0)  # its name from its start in a narrow box
            self._in_use = str(self.model_combo.itemData(index))

    def on_model_combo_activated(self, index: int) -> None:
        key = self.model_combo.itemData(index)
        if key == OPEN_FILE_KEY:
            self._select_in_use()  # until a file is chosen
            self.open_file_requested.emit()
        elif key and key != self._in_use:
            self.model_chosen.emit(parse_model(str(key)))
        else:
            self._select_in_use()  # the model in use (a server's, said as before)

    # ---- presets

    SAVE_ITEM = "Save the current settings as a preset…"

    def set_presets(self, presets: list[Preset], current: str = "") -> None:
        """The presets for the model in use (built-in first), then the item that saves one."""
        self._presets = list(presets)
        self.preset_combo.blockSignals(True)
        self.preset_combo.clear()
        self.preset_combo.addItem("None", None)
        for i, preset in enumerate(self._presets):
            for_model = " (this model)" if preset.model else ""
            self.preset_combo.addItem(preset.name + for_model, i)
            self.preset_combo.setItemData(i + 1, _preset_tip(preset), Qt.ItemDataRole.ToolTipRole)
        self.preset_combo.insertSeparator(self.preset_combo.count())
        self.preset_combo.addItem(self.SAVE_ITEM, -1)
        names = [p.name for p in self._presets]
        self.preset_combo.setCurrentIndex(names.index(current) + 1 if current in names else 0)
        self.preset_combo.blockSignals(False)

    def on_preset_combo_activated(self, index: int) -> None:
        data = self.preset_combo.itemData(index)
        if data == -1:
            self.preset_combo.setCurrentIndex(0)
            self.save_preset_requested.emit()
        elif isinstance(data, int) and 0 <= data < len(self._presets):
            self.preset_chosen.emit(self._presets[data])

    # ---- speed-up

    def set_state(self, text: str, restates: SpeedUp | None = None) -> None:
        """The loaded pair's state in words, beside the pickers; hidden while it only says the
        speed-up chosen again ("Guessing from the text (n-gram)" beside "From the text (n-gram)":
        each thing said once), shown beside another choice (Automatic: what it does now)."""
        self.state_label.setText(text)
        self.state_label.setToolTip(text)  # (the window adds the files where a pair is loaded)
        self.speed_combo.setAccessibleDescription(text)  # said to a screen reader either way
        self._restates = restates
        self._show_state()

    def _show_state(self) -> None:
        says_again = self._restates is not None and self.speed_combo.currentData() == str(self._restates)
        self.state_label.setHidden(says_again)

    def set_speed_up(self, key: SpeedUp, can_switch: bool, why_not: str = "") -> None:
        index = self.speed_combo.findData(str(key))
        if index >= 0:
            self.speed_combo.setCurrentIndex(index)
        self.speed_combo.setEnabled(can_switch)
        self._show_why(why_not=why_not if not can_switch else "")
        self._show_state()

    def set_draft_available(self, is_available: bool, why_not: str = "") -> None:
        """ "Draft model" greyed, with why, where no local model pairs with the one in use."""
        index = self.speed_combo.findData(str(SpeedUp.DRAFT))  # (always offered: SPEED_UP_CHOICES)
        cast(QStandardItemModel, self.speed_combo.model()).item(index).setEnabled(is_available)
        why = next(c.why for c in SPEED_UP_CHOICES if c.key is SpeedUp.DRAFT)
        self.speed_combo.setItemData(index, why if is_available else why_not, Qt.ItemDataRole.ToolTipRole)

    def _show_why(self, _index: int = 0, why_not: str = "") -> None:
        why = self.speed_combo.currentData(Qt.ItemDataRole.ToolTipRole)
        self.speed_combo.setToolTip(why_not or f"{why or ''} Applies from the next reply.".strip())

    def on_speed_combo_activated(self, index: int) -> None:
        self.speed_up_chosen.emit(SpeedUp(self.speed_combo.itemData(index)))
