"""The welcome panel: shown above the chat on the first start, again from Help ▸ Welcome.

Two lines: what Tandem does and how the highlight reads, then the caveats that matter here (a
tiny built-in model; no GPU), said once. Then one click to a demo where the speed shows (a note
edited, in Compare, side by side with the usual way) and one to the pair recommended for this
machine (downloaded through the Models page's downloads, switched to when done). It never
blocks: the chat works while it is shown, and it closes with one click.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app.library.catalog import Catalog, CatalogPair, MachineInfo, format_bytes
from app.library.measure import DraftVerdict, PairFigures
from engine.events import DraftSource
from ui.qt import theme
from ui.qt.page_scroll import vertical_scroll
from ui.qt.widgets import button, flush, label, named

# Chat pairs from the catalog, most capable first. The Coder pair is left out: its base models
# complete code rather than chat.
CHAT_PAIRS = ("gemma-3-12b-1b", "qwen3-8b-0.6b", "llama-3.1-8b-3.2-1b", "qwen2.5-7b-0.5b")
# Room for the KV cache and the compute buffers on top of the weights, on a GPU.
VRAM_HEADROOM = 1.2


@dataclass(frozen=True)
class Recommendation:
    pair: CatalogPair | None  # None: no real pair fits; stay on the built-in model
    reason: str


def recommend_pair(
    catalog: Catalog, machine: MachineInfo, gpu_backend: bool = False, vram_bytes: int = 0
) -> Recommendation:
    """The catalog pair for this machine.

    With a GPU backend built into llama.cpp and the GPU's memory known: the most capable pair
    whose files fit in that memory (with room for the cache). Otherwise, on the CPU: the smallest
    chat pair that fits in RAM, because there a bigger model is slower and a draft model gains
    little. Nothing when no pair fits in RAM.
    """
    known = {p.name: p for p in catalog.pairs}
    pairs = [known[name] for name in CHAT_PAIRS if name in known]
    ram = machine.total_ram_bytes
    fitting = [p for p in pairs if not ram or ram >= p.min_ram_bytes]
    if not fitting:
        least = min((p.min_ram_bytes for p in pairs), default=0)
        return Recommendation(
            None,
            f"The chat pairs in the catalog need at least {format_bytes(least)} of memory and this "
            f"machine has {format_bytes(ram)}: stay with the built-in model, or import a smaller GGUF "
            "model on the Models page.",
        )
    if gpu_backend and vram_bytes:
        on_gpu = [p for p in fitting if p.download_bytes * VRAM_HEADROOM <= vram_bytes]
        if on_gpu:
            gpu = machine.gpu_label or "the GPU"
            return Recommendation(
                on_gpu[0],
                f"The most capable pair that fits in {gpu}'s {format_bytes(vram_bytes)}: a GPU is "
                "where a draft model pays most.",
            )
    memory = f"this machine's {format_bytes(ram)} of memory" if ram else "this machine's memory"
    # What stand-ins timed here said (the pair doctor's measurements): a pair whose draft model
    # pays on this computer is worth its download; one whose draft does not is said so.
    measured = _measured_verdicts(fitting)
    paying = [p for p in fitting if p.name in measured and measured[p.name].pays]
    if paying:
        v = measured[paying[0].name]
        return Recommendation(
            paying[0],
            f"Measured on this computer: its draft model makes replies about {v.speedup:.1f}× faster, "
            f"and it fits in {memory}.",
        )
    after = (
        " Measured on this computer: a draft model does not pay here; drafting from the text does."
        if measured
        else ""
    )
    if machine.has_gpu and not gpu_backend:
        where = (
            f"This machine has {machine.gpu_label or 'a GPU'}, but this build of llama.cpp runs on the CPU "
            "only"
        )
    elif gpu_backend and vram_bytes:
        where = f"No pair fits in the GPU's {format_bytes(vram_bytes)}; it runs on the CPU"
    else:
        where = "It runs on the CPU here"
    return Recommendation(
        fitting[-1],
        f"{where}: the smallest chat pair is the fastest there.{after}",
    )


def _measured_verdicts(pairs: list[CatalogPair]) -> dict[str, DraftVerdict]:
    """Each pair's draft verdict from costs measured on this computer, where both were measured."""
    figures = {p.name: figures_of(p) for p in pairs if p.draft is not None}
    return {name: f.verdict for name, f in figures.items() if f is not None and f.verdict is not None}


def figures_of(pair: CatalogPair) -> PairFigures | None:
    """What stand-ins of a catalog pair timed on this computer (the pair doctor's Measure), if anything."""
    from app.library.measure import figures_here, model_id

    draft = pair.draft
    return figures_here(
        model_id(pair.target.repo_id, pair.target.filename),
        model_id(draft.repo_id, draft.filename) if draft is not None else None,
    )


class WelcomePanel(QFrame):
    """Emits download_requested(pair) for the button, dismissed() for Close."""

    download_requested = Signal(object)
    demo_requested = Signal()
    dismissed = Signal()
    # Whether the smaller instruct model's download is on screen here (shown, hidden, compacted):
    # the chat's greyed-tasks line leaves out its own button for the same download meanwhile.
    small_offer_shown = Signal(bool)

    def __init__(self, catalog: Catalog, machine: MachineInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcomePanel")
        self.setStyleSheet(
            "QFrame#welcomePanel { background: rgba(90, 140, 230, 22); border: 1px solid "
            "rgba(90, 140, 230, 90); border-radius: 6px; } "
            "#welcomeScroll, #welcomeContent { background: transparent; }"  # its scroll: the tint under
        )
        self.catalog = catalog
        self.machine = machine
        self.gpu_backend = False  # known once the engine has loaded (set_gpu_backend)
        self.is_downloading = False

        # In a short window its text scrolls, never cut mid-line; as tall as its text elsewhere.
        outer = flush(QVBoxLayout(self))
        scroll = vertical_scroll("welcomeScroll", fitting=True)
        outer.addWidget(scroll)
        scroll.setWidget(content := named(QWidget(), "welcomeContent"))
        layout = QVBoxLayout(content)
        self.title_label = QLabel("<b>Welcome to Tandem</b>")
        layout.addWidget(self.title_label)
        self.close_button = button(
            "Close", "welcomeClose", self.on_close_button_clicked, "Open it again from Help ▸ Welcome"
        )
        self.about_label = label(self._about_text(), "welcomeAbout", rich=True)
        layout.addWidget(self.about_label)

        row = QHBoxLayout()
        tip = "Opens Compare with a paragraph to repeat word for word and runs it the usual way, then with the speed-up"
        self.demo_button = button(
            "See it: a paragraph repeated, side by side", "welcomeDemo", self.demo_requested, tip
        )
        row.addWidget(self.demo_button, 0, Qt.AlignmentFlag.AlignTop)
        self.recommendation_label = label("", "welcomeRecommendation", rich=True)
        row.addWidget(self.recommendation_label, 1)
        self.download_button = button("", "welcomeDownload", lambda: self._download(self.recommendation.pair))
        row.addWidget(self.download_button, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(row)
        # Beside the pair: the smallest instruct model that does edit work, about 1 GB.
        small_row = QHBoxLayout()
        self.small_label = label("", "welcomeSmallInstruct", rich=True)
        small_row.addWidget(self.small_label, 1)
        self.small_download_button = button(
            "", "welcomeDownloadSmall", lambda: self._download(self.small_instruct)
        )
        small_row.addWidget(self.small_download_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(small_row)
        self._show_small_instruct()
        self.status_label = label("", "welcomeStatus", hidden=True)
        layout.addWidget(self.status_label)
        self._show_recommendation()

    def _about_text(self) -> str:
        colors = theme.colors()
        look = colors.draft_look(DraftSource.TEXT)
        mark = (
            f'<span style="background-color: {look.tint.name()}; color: {colors.text.name()}; '
            'text-decoration: underline;">Highlighted</span>'
        )
        gpu = "no GPU is in use" if not (self.machine.has_gpu and self.gpu_backend) else "a GPU is in use"
        return (
            "<p>Tandem writes what the model alone would write, only sooner: it guesses ahead "
            f"from text already there, and the model confirms every word. {mark} text is what was "
            "guessed and confirmed. The text is the same word for word on F16 and BF16 models; on "
            "quantized ones (like the built-in models) two nearly equal words can tip either way, "
            "as between two builds of llama.cpp.<br>"
            f"The built-in models are tiny and {gpu} here, so Tandem is fastest when a reply reuses or "
            "edits text: corrections, rewrites, code changes.</p>"
        )

    @property
    def recommendation(self) -> Recommendation:
        return recommend_pair(self.catalog, self.machine, self.gpu_backend, self.machine.vram_bytes)

    def restyle(self) -> None:
        """The theme changed: the highlight's sample in its colours."""
        self.about_label.setText(self._about_text())

    def set_gpu_backend(self, supported: bool) -> None:
        """Known once the engine has loaded (the worker process owns llama.cpp)."""
        if supported != self.gpu_backend:
            self.gpu_backend = supported
            self.about_label.setText(self._about_text())
            self._show_recommendation()

    def _show_recommendation(self) -> None:
        rec = self.recommendation
        pair = rec.pair
        if pair is None:
            self.recommendation_label.setText(f"<p>{rec.reason}</p>")
            self.download_button.setVisible(False)
            return
        size = format_bytes(pair.download_bytes)
        self.recommendation_label.setText(f"<p>For real work on this machine: <b>{pair.title}</b>.</p>")
        self.recommendation_label.setToolTip(
            rec.reason + " More pairs, and your own files, are on the Models page."
        )
        self.download_button.setText(f"Download and switch ({size})")
        self.download_button.setToolTip(
            "Downloads both files (pause and resume on the Models page) and switches to the pair when "
            "done. " + rec.reason
        )
        self.download_button.setVisible(True)
        self.download_button.setEnabled(not self.is_downloading)

    @property
    def small_instruct(self) -> CatalogPair | None:
        from ui.presenters.words import SMALL_INSTRUCT_PAIR

        return next((p for p in self.catalog.pairs if p.name == SMALL_INSTRUCT_PAIR), None)

    def _show_small_instruct(self) -> None:
        pair = self.small_instruct
        ram = self.machine.total_ram_bytes
        fits = pair is not None and not self.is_compact and (not ram or ram >= pair.min_ram_bytes)
        self.small_label.setVisible(fits)
        self.small_download_button.setVisible(fits)
        if pair is None or not fits:
            return
        self.small_label.setText(
            f"<p>For edits and fixes now, smaller: <b>{pair.target.name}</b> with n-gram drafting.</p>"
        )
        self.small_label.setToolTip(pair.good_for)
        self.small_download_button.setText(f"Download and switch ({format_bytes(pair.download_bytes)})")
        self.small_download_button.setToolTip(pair.good_for)

    def _download(self, pair: CatalogPair | None) -> None:
        if pair is not None and not self.is_downloading:
            self.download_requested.emit(pair)

    @property
    def is_compact(self) -> bool:
        return self.about_label.isHidden()

    def set_compact(self, is_compact: bool) -> None:
        """After first use (a reply, or the demo): one line, the demo and the download beside
        Close, the explanation and the smaller model left out (Help ▸ Welcome shows it whole)."""
        self.title_label.setVisible(not is_compact)
        self.about_label.setVisible(not is_compact)
        self._show_small_instruct()  # left out while compact
        self.small_offer_shown.emit(self.offers_small)

    def show_whole(self) -> None:
        """Help ▸ Welcome (and the chat's download, for its progress): shown, whole again."""
        self.set_compact(False)
        self.show()

    def shrink(self, *_args: object) -> None:
        """After first use (a reply, or the demo) the welcome keeps one line: room for the chat."""
        if self.isVisible():
            self.set_compact(True)

    @property
    def offers_small(self) -> bool:
        """The smaller instruct model's "Download and switch" is on screen."""
        return self.isVisible() and self.small_download_button.isVisibleTo(self)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.small_offer_shown.emit(self.offers_small)

    def hideEvent(self, event: QHideEvent) -> None:
        super().hideEvent(event)
        self.small_offer_shown.emit(False)

    def set_status(self, text: str, is_error: bool = False) -> None:
        self.status_label.setText(text)
        theme.set_tone(self.status_label, "error" if is_error else "")
        self.status_label.setVisible(bool(text))

    def set_downloading(self, is_downloading: bool) -> None:
        self.is_downloading = is_downloading
        self.download_button.setEnabled(not is_downloading)
        self.small_download_button.setEnabled(not is_downloading)

    def on_close_button_clicked(self) -> None:
        self.hide()
        self.dismissed.emit()
