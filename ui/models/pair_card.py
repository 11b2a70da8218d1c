"""One catalog pair as a card on the Models page: what it is good for, its facts as chips, whether
it fits this machine and why, the speedup reported (by whom), and its download; what holds for
the whole machine is said once, above the cards (`machine_note`). The catalog section and the
downloads (ui/models/catalog_section.py, model_downloads.py) tell a card what to show; its colours
are worked out again from the palette when the theme changes (restyle()).
"""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.library.catalog import CatalogPair, MachineInfo, fit_for, format_bytes
from ui.chat.welcome import VRAM_HEADROOM
from ui.qt import theme
from ui.qt.flow_layout import FlowLayout
from ui.qt.widgets import button, flush, label, named

PROGRESS_STEPS = 1000
_URL_RE = re.compile(r"https?://[^\s)>\"']+")


def _badge(text: str, name: str) -> QLabel:
    return named(QLabel(text), name, text)


def _rgba(color: QColor, alpha: int) -> str:
    return f"rgba({color.red()}, {color.green()}, {color.blue()}, {alpha})"


def describe_fit(
    pair: CatalogPair, machine: MachineInfo, gpu_backend: bool = False, vram_bytes: int = 0
) -> tuple[bool, str]:
    """(fits, one sentence why): RAM always; the GPU's memory where a GPU backend is built in."""
    fit = fit_for(pair, machine)
    if not fit.is_fitting:
        return False, f"Does not fit: {fit.reason}."
    if gpu_backend and vram_bytes:  # the weights on disk (the built-in target's too) and room
        need = int(sum(m.size_bytes for m in pair.models) * VRAM_HEADROOM)
        gpu = machine.gpu_label or "the GPU"
        if need <= vram_bytes:
            return True, f"Fits in memory and in {gpu}'s {format_bytes(vram_bytes)}."
        return True, (
            f"Fits in memory, but not in {gpu}'s {format_bytes(vram_bytes)} "
            f"(needs ≈ {format_bytes(need)}): part of it runs on the CPU."
        )
    if machine.has_gpu and not gpu_backend:
        return True, (
            "Fits in memory. This build of llama.cpp runs on the CPU only, so "
            f"{machine.gpu_label or 'the GPU'} is not used."
        )
    return True, "Fits in this computer's memory."


def machine_note(machine: MachineInfo, gpu_backend: bool = False) -> str:
    """The one note for the whole machine, neutral: where a draft model pays and where it does not."""
    if machine.has_gpu and gpu_backend:
        return "A GPU is in use: draft models pay most there."
    where = "Without a GPU" if not machine.has_gpu else "With this CPU-only build"
    return (
        f"{where}, a draft model gains little on this computer; drafting from the text still pays "
        "when a reply reuses or edits text."
    )


def describe_speedup(pair: CatalogPair, link_colour: str = "") -> tuple[str, str]:
    """(rich text for the card, plain text for a tooltip and screen readers). Links in
    link_colour where given: a label's rich text keeps the link colour it was first laid out
    with, and after a switch to the dark theme drew the light theme's dark blue on a dark card."""
    style = f' style="color: {link_colour}"' if link_colour else ""
    s = pair.reported_speedup
    if s is not None:
        # A link where there is one; a source that is not a link is for the tooltip only.
        is_link = _URL_RE.fullmatch(s.source.strip()) is not None
        where = f' (<a href="{html.escape(s.source.strip())}"{style}>source</a>)' if is_link else ""
        rich = f"Reported speedup: <b>{s.factor:.1f}×</b>, by {html.escape(s.by)}{where}"
        plain = f"Reported speedup {s.factor:.1f}x, by {s.by}. {s.setup}. Source: {s.source}"
        return rich, plain
    note = pair.speedup_note or ""
    url = _URL_RE.search(note)
    link = f' (<a href="{html.escape(url.group(0).rstrip(".,;"))}"{style}>what is known</a>)' if url else ""
    return f"Reported speedup: no published figure{link}", f"No published speedup figure. {note}".strip()


class PairCard(QFrame):
    """A catalog pair. The page connects download_button, pause_button, cancel_button and
    use_button; the card only shows what the page tells it."""

    def __init__(self, pair: CatalogPair, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.pair = pair
        named(self, "pairCard", pair.title)
        self.setProperty("pairName", pair.name)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)  # a row: one height
        self.is_recommended = False
        self.is_fitting = True

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 14, 12)
        layout.setSpacing(6)

        badges = QHBoxLayout()
        badges.setSpacing(6)
        self.recommended_badge = _badge("Recommended for this machine", "recommendedBadge")
        self.in_use_badge = _badge("In use", "inUseBadge")
        self.builtin_badge = _badge("Built in", "builtinBadge")
        for badge in (self.recommended_badge, self.in_use_badge, self.builtin_badge):
            badges.addWidget(badge)
            badge.setVisible(False)
        self.builtin_badge.setVisible(pair.is_embedded)
        badges.addStretch(1)
        layout.addLayout(badges)

        self.title_label = label(pair.title, "pairTitle")
        font = self.title_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        font.setBold(True)
        self.title_label.setFont(font)
        layout.addWidget(self.title_label)

        self.good_for_label = self._text_label(layout, "pairGoodFor", pair.good_for, bool(pair.good_for))

        # The chips wrap onto more lines where the card is narrow: a row of them (a gated pair has
        # five) would set the card's least width, and the grid's, past a 1280-pixel window.
        chips = FlowLayout(spacing=6)
        self.chips = [_badge(text, name) for name, text in self._chip_texts()]
        for chip in self.chips:
            chip.setProperty("chip", True)
            chips.addWidget(chip)
        layout.addLayout(chips)
        self.size_label = self.chips[0]
        self.size_label.setToolTip(
            "\n".join(
                f"{m.name}: {m.repo_id or 'built in'} / {m.filename}, {m.quantization}, "
                f"{format_bytes(m.size_bytes)}, context {m.context_length:,}, licence {m.license}"
                + (", gated: needs a Hugging Face token" if m.is_gated else "")
                for m in pair.models
            )
        )

        self.fit_label = self._text_label(layout, "pairFit", "")
        self.fit_label.setToolTip(f"What it needs: {pair.hardware}" if pair.hardware else "")
        rich, plain = describe_speedup(pair)
        self.speedup_label = self._text_label(layout, "pairSpeedup", rich)
        self.speedup_label.setTextFormat(Qt.TextFormat.RichText)
        self.speedup_label.setOpenExternalLinks(True)
        self.speedup_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        named(self.speedup_label, "pairSpeedup", plain, plain)
        # What this computer will do, once stand-ins were timed here (beside the reported figure).
        self.here_label = self._text_label(layout, "pairHere", "", False)
        self.recommendation_label = self._text_label(layout, "pairRecommendation", "", False)
        theme.set_tone(self.recommendation_label, "muted")

        layout.addStretch(1)
        self.progress_bar = QProgressBar(maximum=PROGRESS_STEPS, textVisible=False)
        named(self.progress_bar, "pairProgress", f"Download progress of {pair.title}")
        self.progress_bar.setMaximumHeight(8)
        self.progress_bar.setVisible(False)
        layout.addWidget(self.progress_bar)
        self.status_label = self._text_label(layout, "pairStatus", "", False)

        buttons = QHBoxLayout()
        buttons.setSpacing(6)
        buttons.addStretch(1)
        self.pause_button = button("Pause", "pairPause", accessible=f"Pause the download of {pair.title}")
        self.cancel_button = button("Cancel", "pairCancel", accessible=f"Cancel the download of {pair.title}")
        self.use_button = button("Chat with this pair", "pairUse", accessible=f"Chat with {pair.title}")
        setup = "Set up" if pair.is_embedded else "Download"
        tip = (
            "Unpacks the built-in model into the models folder (no download)"
            if pair.is_embedded
            else f"Downloads {format_bytes(pair.download_bytes)} from the Hugging Face hub; "
            "pause keeps what came, Download again resumes"
        )
        self.download_button = button(setup, "pairDownload", tip=tip, accessible=f"{setup} {pair.title}")
        for b in (self.pause_button, self.cancel_button, self.use_button):
            b.setEnabled(b is self.use_button)
            b.setVisible(False)
        for b in (self.pause_button, self.cancel_button, self.use_button, self.download_button):
            buttons.addWidget(b)
        layout.addLayout(buttons)
        self.restyle()

    # --- pieces ----------------------------------------------------------------------------------

    def _text_label(self, layout: QVBoxLayout, name: str, text: str, is_shown: bool = True) -> QLabel:
        made = label(text, name, hidden=not is_shown)
        made.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        layout.addWidget(made)
        return made

    def _chip_texts(self) -> list[tuple[str, str]]:
        """(object name, text) of the pair's facts, shortest words first."""
        pair = self.pair
        if pair.is_embedded:
            size = f"No download ({format_bytes(pair.target.size_bytes)})"
        else:
            size = f"{format_bytes(pair.download_bytes)} download"
        chips = [("pairSize", size), ("pairMemory", f"needs {format_bytes(pair.min_ram_bytes)} memory")]
        quantisations = sorted({m.quantization for m in pair.models if m.quantization})
        if quantisations:
            chips.append(("pairQuantisation", " / ".join(quantisations)))
        # One chip a licence: two long names joined ("Llama 3.1 Community License / Llama 3.2
        # Community License") made one chip wider than a card in a 1280-pixel window.
        licences = sorted({m.license for m in pair.models if m.license})
        chips += [("pairLicence", licence) for licence in licences]
        if any(m.is_gated for m in pair.models):
            chips.append(("pairGated", "needs a Hugging Face token"))
        return chips

    # --- what the page tells the card ----------------------------------------------------------------

    def set_fit(self, is_fitting: bool, text: str) -> None:
        self.is_fitting = is_fitting
        self.fit_label.setText(("✓ " if is_fitting else "✗ ") + text)
        self.restyle()
        self._describe()

    def set_here(self, text: str | None) -> None:
        """What this computer will do with the pair, measured (None: not measured here yet)."""
        self.here_label.setText(text or "")
        self.here_label.setVisible(bool(text))

    def set_recommended(self, reason: str | None) -> None:
        self.is_recommended = reason is not None
        self.recommended_badge.setVisible(self.is_recommended)
        self.recommended_badge.setToolTip(reason or "")
        self.recommendation_label.setText(reason or "")
        self.recommendation_label.setVisible(self.is_recommended)
        self.restyle()
        self._describe()

    def set_in_use(self, is_in_use: bool) -> None:
        self.in_use_badge.setVisible(is_in_use)
        self.in_use_badge.setToolTip("The model in use now is this pair's target" if is_in_use else "")
        self._describe()

    def set_downloaded(self, is_downloaded: bool) -> None:
        """Both files here: offer to chat with the pair instead of downloading it."""
        self.use_button.setVisible(is_downloaded)
        self.download_button.setVisible(not is_downloaded)

    def set_running(self, is_running: bool) -> None:
        self.download_button.setEnabled(not is_running)
        self.use_button.setEnabled(not is_running)
        for b in (self.pause_button, self.cancel_button):
            b.setEnabled(is_running and not self.pair.is_embedded)
            b.setVisible(is_running and not self.pair.is_embedded)
        if is_running:
            self.progress_bar.setVisible(True)
            self.status_label.setVisible(True)

    def set_status(self, text: str, is_error: bool = False) -> None:
        self.status_label.setText(text)
        self.status_label.setVisible(bool(text))
        theme.set_tone(self.status_label, "error" if is_error else "")

    def set_fraction(self, fraction: float) -> None:
        self.progress_bar.setValue(int(PROGRESS_STEPS * max(0.0, min(1.0, fraction))))
        self.progress_bar.setVisible(True)

    def _describe(self) -> None:
        bits = [b.text() for b in (self.recommended_badge, self.in_use_badge) if not b.isHidden()]
        bits += [self.good_for_label.text(), *(c.text() for c in self.chips), self.fit_label.text()]
        self.setAccessibleDescription(". ".join(t.rstrip(".") for t in bits if t) + ".")

    # --- look --------------------------------------------------------------------------------------

    def restyle(self) -> None:
        """Stylesheet colours from the palette now in force (called again when it changes): the
        application's, which the theme sets (a card's own holds the colours its stylesheet set).
        The page calls this on a theme switch, because a widget with a stylesheet of its own is not
        told when the application's palette changes."""
        p = QGuiApplication.palette()
        base = p.color(QPalette.ColorRole.Base)
        mid = p.color(QPalette.ColorRole.Mid)
        accent = p.color(QPalette.ColorRole.Highlight)
        accent_text = p.color(QPalette.ColorRole.HighlightedText)
        text = p.color(QPalette.ColorRole.Text)
        self.speedup_label.setText(describe_speedup(self.pair, p.color(QPalette.ColorRole.Link).name())[0])
        border = accent.name() if self.is_recommended else _rgba(mid, 200)
        width = 2 if self.is_recommended else 1
        self.setStyleSheet(
            f"QFrame#pairCard {{ background: {base.name()}; border: {width}px solid {border}; "
            "border-radius: 8px; }"
        )
        pill = "border-radius: 9px; padding: 2px 8px; font-weight: bold;"
        self.recommended_badge.setStyleSheet(
            f"background: {accent.name()}; color: {accent_text.name()}; {pill}"
        )
        good = theme.colors().ok_text
        self.in_use_badge.setStyleSheet(
            f"background: {_rgba(QColor(good), 50)}; color: {text.name()}; border: 1px solid {good}; {pill}"
        )
        self.builtin_badge.setStyleSheet(f"background: {_rgba(mid, 70)}; color: {text.name()}; {pill}")
        for chip in self.chips:
            chip.setStyleSheet(
                f"background: {_rgba(mid, 45)}; color: {text.name()}; border-radius: 9px; padding: 2px 8px;"
            )
        self.fit_label.setStyleSheet(f"color: {good if self.is_fitting else theme.colors().error_text};")


class CardGrid(QWidget):
    """Cards in as many columns as fit (each at least MIN_CARD_WIDTH wide, and no narrower than
    its content allows), laid out again when the width changes the count. Its least width is one
    column's: the columns follow the width given, never the other way round."""

    MIN_CARD_WIDTH = 330
    MAX_COLUMNS = 3

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.cards: list[PairCard] = []
        self._grid = flush(QGridLayout(self))
        self._grid.setSpacing(12)
        self.columns = 0
        self._relayout(2)

    def add_card(self, card: PairCard) -> None:
        """A pair for chat joins the grid; one that is not (code completion) is kept off the chat
        app's list (it stays in the catalog, for `tandem models` and the hub search)."""
        if not card.pair.is_for_chat:
            card.setParent(self)
            card.hide()
            return
        self.cards.append(card)
        self._relayout(self.columns, force=True)

    def _card_width(self) -> int:
        """The least width a column needs: MIN_CARD_WIDTH, or the widest card's least width."""
        return max([self.MIN_CARD_WIDTH, *(c.minimumSizeHint().width() for c in self.cards)])

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        # One column's width: the grid's own layout would ask for the columns it has now, and
        # a page laid out that wide overflows its window (then resizeEvent never sees less).
        return QSize(self._card_width(), super().minimumSizeHint().height())

    def _relayout(self, columns: int, force: bool = False) -> None:
        if columns == self.columns and not force:
            return
        self.columns = columns
        for card in self.cards:
            self._grid.removeWidget(card)
        for i, card in enumerate(self.cards):
            self._grid.addWidget(card, i // columns, i % columns)
        for c in range(self.MAX_COLUMNS):
            self._grid.setColumnStretch(c, 1 if c < columns else 0)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        spacing = self._grid.spacing()
        fit = (event.size().width() + spacing) // (self._card_width() + spacing)
        self._relayout(max(1, min(self.MAX_COLUMNS, fit)))
