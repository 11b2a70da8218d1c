"""The Models page's catalog: "Pairs to download" as cards (ui/models/pair_card.py), what they say
about this machine (fit, the pair recommended) and the files here (downloaded, in use), and the
pairs that do not work, folded away behind a disclosure.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.library.catalog import Catalog, CatalogPair, MachineInfo, format_bytes, gpu_memory_bytes
from app.library.downloads import local_path_for, pair_requests
from engine.config import NGRAM_LOOKUP, DraftChoice
from ui.chat.welcome import figures_of, recommend_pair
from ui.models.pair_card import CardGrid, PairCard, describe_fit, machine_note
from ui.presenters.words import card_here_words
from ui.qt.widgets import flush, label, named, tool_button


class CatalogSection(QWidget):
    """The catalog's pairs as cards. Emits pair_chosen(target_path, DraftChoice) from a downloaded
    card's "Chat with this pair": its draft model, or the text where it has none."""

    pair_chosen = Signal(str, object)  # target path, DraftChoice

    def __init__(
        self,
        catalog: Catalog,
        machine: MachineInfo,
        models_dir: Path,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("catalogSection")
        self.catalog = catalog
        self.machine = machine
        self.models_dir = models_dir
        self.gpu_backend = False  # known once the engine has loaded (set_gpu_backend)
        self._vram_bytes = machine.vram_bytes or None  # None: not asked yet (nvidia-smi takes a moment)
        self.model_in_use: Path | None = None  # the engine's target, wherever it lives
        self.cards: dict[str, PairCard] = {}
        v = flush(QVBoxLayout(self))
        heading = named(QLabel("Pairs to download"), "catalogHeading")
        font = heading.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        heading.setFont(font)
        v.addWidget(heading)
        self.machine_label = label(name="machineLabel")
        v.addWidget(self.machine_label)
        self.card_grid = named(CardGrid(), "catalogCards")
        for pair in catalog.pairs:
            card = PairCard(pair)
            card.use_button.clicked.connect(lambda _=False, p=pair: self.use_pair(p))
            self.cards[pair.name] = card
            self.card_grid.add_card(card)
        v.addWidget(self.card_grid)

    # --- this machine ------------------------------------------------------------------------------

    @property
    def vram_bytes(self) -> int:
        if self._vram_bytes is None:
            self._vram_bytes = (
                gpu_memory_bytes(self.machine.gpu_label, self.machine.total_ram_bytes)
                if self.machine.has_gpu
                else 0
            )
        return self._vram_bytes

    def set_gpu_backend(self, supported: bool) -> None:
        """Known once the engine has loaded (the worker process owns llama.cpp)."""
        if supported != self.gpu_backend:
            self.gpu_backend = supported
            self.show_fit_and_recommendation()

    def show_fit_and_recommendation(self) -> None:
        m = self.machine
        memory = format_bytes(m.total_ram_bytes) if m.total_ram_bytes else "unknown"
        if m.has_gpu and self.gpu_backend and self.vram_bytes:
            gpu = f"{m.gpu_label} with {format_bytes(self.vram_bytes)}, used by llama.cpp"
        elif m.has_gpu:
            gpu = f"{m.gpu_label or 'a GPU'} (this build of llama.cpp runs on the CPU)"
        else:
            gpu = "no GPU found"
        self.machine_label.setText(
            f"This machine: {memory} of memory, {gpu}. {machine_note(m, self.gpu_backend)}"
        )
        vram = self.vram_bytes if self.gpu_backend else 0
        rec = recommend_pair(self.catalog, m, self.gpu_backend, vram)
        for name, card in self.cards.items():
            card.set_fit(*describe_fit(card.pair, m, self.gpu_backend, vram))
            card.set_recommended(rec.reason if rec.pair is not None and rec.pair.name == name else None)
        self.show_measured_here()

    def show_measured_here(self) -> None:
        """Each card's figures measured on this computer (stand-ins timed by the pair doctor)."""
        for card in self.cards.values():
            fig = figures_of(card.pair)
            card.set_here(card_here_words(fig, card.pair.draft is not None) if fig is not None else None)

    # --- the files here ----------------------------------------------------------------------------

    def pair_paths(self, pair: CatalogPair) -> list[Path]:
        """Where the pair's files are (or will be) in the models folder, target first."""
        if pair.is_embedded:
            in_use = self.model_in_use
            if in_use is not None and in_use.name == pair.target.filename and in_use.is_file():
                return [in_use]  # set up already, wherever it was unpacked
            return [self.models_dir / pair.target.filename]
        return [local_path_for(r.repo_id, r.filename, self.models_dir) for r in pair_requests(pair)]

    def show_card_states(self, in_use: Path | None) -> None:
        """Which pairs are here (Chat with this pair) and which one's target is in use."""
        self.model_in_use = in_use
        for card in self.cards.values():
            files = self.pair_paths(card.pair)
            card.set_downloaded(all(f.is_file() for f in files))
            card.set_in_use(in_use is not None and files[0].resolve() == in_use)

    def use_pair(self, pair: CatalogPair) -> None:
        """A downloaded card's "Chat with this pair": the same signal as the picker's button."""
        files = self.pair_paths(pair)
        if not all(f.is_file() for f in files):
            self.show_card_states(self.model_in_use)
            return
        draft = DraftChoice.of_model(str(files[1])) if len(files) > 1 else NGRAM_LOOKUP
        self.pair_chosen.emit(str(files[0]), draft)

    def restyle(self) -> None:
        """The palette changed: a card's stylesheet does not follow it by itself."""
        for card in self.cards.values():
            card.restyle()


class IncompatiblePairs(QWidget):
    """Known-bad pairs, folded away behind a disclosure (closed until asked for)."""

    def __init__(self, catalog: Catalog, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("incompatibleSection")
        v = flush(QVBoxLayout(self))
        bad = catalog.incompatible
        title = f"Pairs that do not work ({len(bad)})"
        tip = "Pairs people try that llama.cpp's vocabulary rules refuse, and why"
        toggle = tool_button(title, "incompatibleToggle", tip=tip, accessible=title)
        toggle.setCheckable(True)
        toggle.setChecked(False)
        toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        toggle.setArrowType(Qt.ArrowType.RightArrow)
        toggle.setAutoRaise(True)
        v.addWidget(toggle)
        lines = "".join(
            f"<li><b>{html.escape(b.target)} + {html.escape(b.draft)}</b>: the {html.escape(b.rule)} "
            f"differs; {html.escape(b.reason)}.</li>"
            for b in bad
        )
        refused = label(
            "<p>A draft model must share its target's vocabulary: llama.cpp refuses these pairs.</p>"
            f"<ul>{lines}</ul>",
            "incompatibleLabel",
            rich=True,
            hidden=True,
        )
        refused.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        v.addWidget(refused)
        toggle.toggled.connect(self.on_toggle_toggled)
        self.toggle = toggle
        self.label = refused
        self.setVisible(bool(bad))

    def on_toggle_toggled(self, is_open: bool) -> None:
        self.label.setVisible(is_open)
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if is_open else Qt.ArrowType.RightArrow)
