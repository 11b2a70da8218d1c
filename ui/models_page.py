"""The models page: catalog pairs to download, local models, import, a pair picker, and the pair
doctor (search the hub, check a pair before downloading it: ui/pair_doctor_panel.py).

Downloads and imports run on threads owned by ui/download_jobs.py; this page only shows them.

The pair picker offers only the drafts llama.cpp's vocabulary rules accept for the chosen target,
plus n-gram drafting and none; the others stay in the list, disabled, with the broken rule as
their tooltip, because "why can't I pick this one?" is the question users ask most.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.library.catalog import (
    NGRAM,
    NO_DRAFT,
    Catalog,
    CatalogPair,
    LocalModel,
    MachineInfo,
    detect_machine,
    draft_choices,
    format_bytes,
    format_eta,
    format_params,
    gpu_memory_bytes,
    load_catalog,
    local_model,
    scan_local_models,
)
from app.library.downloads import (
    DownloadControl,
    DownloadProgress,
    FileRequest,
    local_path_for,
    pair_requests,
    partial_download,
)
from engine.errors import TandemError
from ui.download_jobs import DownloadEnd, DownloadJob, DownloadJobs, ImportJobs
from ui.pair_card import (
    PROGRESS_STEPS,
    CardGrid,
    PairCard,
    app_palette,
    bad_colour,
    describe_fit,
    machine_note,
)
from ui.pair_doctor_panel import PairDoctorPanel
from ui.welcome import Recommendation, recommend_pair

CUSTOM_KEY = "custom"  # the job key of the "any hub file" row


def describe_progress(p: DownloadProgress) -> str:
    files = f"{p.file_index + 1}/{p.n_files} · " if p.n_files > 1 else ""
    text = f"{files}{format_bytes(p.total_done_bytes)} of {format_bytes(p.total_bytes)}"
    if p.state == "downloading" and p.bytes_per_s > 0:
        text += f" · {format_bytes(p.bytes_per_s)}/s · {format_eta(p.eta_s)} left"
    elif p.state != "downloading":
        text += f" · {p.state}"
    if p.message:
        text += f" ({p.message})"
    return text


class ModelsPage(QWidget):
    """The "Models" tab. Emits pair_chosen(target_path, draft) with draft "ngram", "none" or a path."""

    pair_chosen = Signal(str, str)
    models_changed = Signal()
    # For others following a download (the welcome panel): key (a pair name), then the text shown,
    # the final paths in the pair's order (target, draft), or the message and whether it is paused.
    download_progressed = Signal(str, str)
    download_finished = Signal(str, list)
    download_failed = Signal(str, str, bool)

    PROGRESS_STEPS = PROGRESS_STEPS

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        catalog: Catalog | None = None,
        models_dir: Path | None = None,
        machine: MachineInfo | None = None,
        download_options: dict[str, Any] | None = None,
        gpu_backend: bool = False,
        vram_bytes: int | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("modelsPage")
        self.setAcceptDrops(True)
        self.catalog = catalog or load_catalog()
        self.models_dir = models_dir or paths.models_dir()
        self.machine = machine or detect_machine()
        self.download_options = dict(download_options or {})
        self.gpu_backend = gpu_backend  # known once the engine has loaded (set_gpu_backend)
        self._vram_bytes = vram_bytes  # None: not asked yet (nvidia-smi takes a moment)
        self.local_models: list[LocalModel] = []
        self.model_in_use: Path | None = None  # the engine's target, listed wherever it lives
        self.downloads = DownloadJobs(self.models_dir, self.download_options)
        self.downloads.progressed.connect(self.on_downloads_progressed)
        self.downloads.finished.connect(self.on_downloads_finished)
        self.downloads.failed.connect(self.on_downloads_failed)
        self.imports = ImportJobs(self.models_dir)
        self.imports.finished.connect(self.on_imports_finished)
        self.imports.failed.connect(self.on_imports_failed)
        self.cards: dict[str, PairCard] = {}
        self.download_buttons: dict[str, QPushButton] = {}
        self.pause_buttons: dict[str, QPushButton] = {}
        self.cancel_buttons: dict[str, QPushButton] = {}
        self.progress_bars: dict[str, QProgressBar] = {}
        self.status_labels: dict[str, QLabel] = {}

        # One scrolling column: what you chat with now, the pairs to choose from, the pairs that
        # do not work (folded), your own files, and any file from the hub.
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setObjectName("modelsScroll")
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.addWidget(scroll)
        content = QWidget()
        content.setObjectName("modelsContent")
        scroll.setWidget(content)
        self.scroll_area = scroll
        layout = QVBoxLayout(content)
        layout.setSpacing(12)
        layout.addWidget(self._build_pair_box())
        layout.addWidget(self._build_catalog_section())
        layout.addWidget(self._build_incompatible_section())
        self.doctor = PairDoctorPanel(self.downloads, self.models_dir)
        self.doctor.pair_chosen.connect(self.pair_chosen)
        layout.addWidget(self.doctor)
        layout.addWidget(self._build_local_box())
        layout.addWidget(self._build_custom_box())
        self.message_label = QLabel()
        self.message_label.setObjectName("modelsMessage")
        self.message_label.setWordWrap(True)
        layout.addWidget(self.message_label)
        layout.addStretch(1)
        self.refresh_local_models()
        self._show_fit_and_recommendation()

    # --- building --------------------------------------------------------------------------------

    def _build_catalog_section(self) -> QWidget:
        section = QWidget()
        section.setObjectName("catalogSection")
        v = QVBoxLayout(section)
        v.setContentsMargins(0, 0, 0, 0)
        heading = QLabel("Pairs to download")
        heading.setObjectName("catalogHeading")
        font = heading.font()
        font.setPointSizeF(font.pointSizeF() * 1.3)
        font.setBold(True)
        heading.setFont(font)
        v.addWidget(heading)
        self.machine_label = QLabel()
        self.machine_label.setObjectName("machineLabel")
        self.machine_label.setWordWrap(True)
        v.addWidget(self.machine_label)
        self.card_grid = CardGrid()
        self.card_grid.setObjectName("catalogCards")
        for pair in self.catalog.pairs:
            card = PairCard(pair)
            card.download_button.clicked.connect(lambda _=False, p=pair: self.on_download_clicked(p))
            card.pause_button.clicked.connect(lambda _=False, k=pair.name: self.pause_download(k))
            card.cancel_button.clicked.connect(lambda _=False, k=pair.name: self.cancel_download(k))
            card.use_button.clicked.connect(lambda _=False, p=pair: self.use_catalog_pair(p))
            self.cards[pair.name] = card
            self.download_buttons[pair.name] = card.download_button
            self.pause_buttons[pair.name] = card.pause_button
            self.cancel_buttons[pair.name] = card.cancel_button
            self.progress_bars[pair.name] = card.progress_bar
            self.status_labels[pair.name] = card.status_label
            self.card_grid.add_card(card)
            self._show_kept_part(pair)
        v.addWidget(self.card_grid)
        return section

    def _build_incompatible_section(self) -> QWidget:
        """Known-bad pairs, folded away behind a disclosure (closed until asked for)."""
        section = QWidget()
        section.setObjectName("incompatibleSection")
        v = QVBoxLayout(section)
        v.setContentsMargins(0, 0, 0, 0)
        bad = self.catalog.incompatible
        toggle = QToolButton()
        toggle.setObjectName("incompatibleToggle")
        toggle.setText(f"Pairs that do not work ({len(bad)})")
        toggle.setAccessibleName(f"Pairs that do not work ({len(bad)})")
        toggle.setToolTip("Pairs people try that llama.cpp's vocabulary rules refuse, and why")
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
        label = QLabel(
            "<p>A draft model must share its target's vocabulary: llama.cpp refuses these pairs.</p>"
            f"<ul>{lines}</ul>"
        )
        label.setObjectName("incompatibleLabel")
        label.setTextFormat(Qt.TextFormat.RichText)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        label.setVisible(False)
        v.addWidget(label)

        def on_toggled(is_open: bool) -> None:
            label.setVisible(is_open)
            toggle.setArrowType(Qt.ArrowType.DownArrow if is_open else Qt.ArrowType.RightArrow)

        toggle.toggled.connect(on_toggled)
        self.incompatible_toggle = toggle
        self.incompatible_label = label
        section.setVisible(bool(bad))
        return section

    def _build_custom_box(self) -> QGroupBox:
        box = QGroupBox("Any GGUF file from the Hugging Face hub")
        grid = QGridLayout(box)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("repository, e.g. Qwen/Qwen3-0.6B-GGUF")
        self.file_edit = QLineEdit()
        self.file_edit.setPlaceholderText("file, e.g. Qwen3-0.6B-Q8_0.gguf")
        self.revision_edit = QLineEdit()
        self.revision_edit.setPlaceholderText("main")
        download = QPushButton("Download")
        pause = QPushButton("Pause")
        cancel = QPushButton("Cancel")
        for b in (pause, cancel):
            b.setEnabled(False)
        download.clicked.connect(self.on_custom_download_clicked)
        pause.clicked.connect(lambda: self.pause_download(CUSTOM_KEY))
        cancel.clicked.connect(lambda: self.cancel_download(CUSTOM_KEY))
        bar = QProgressBar()
        bar.setRange(0, self.PROGRESS_STEPS)
        status = QLabel()
        status.setWordWrap(True)
        grid.addWidget(self.repo_edit, 0, 0)
        grid.addWidget(self.file_edit, 0, 1)
        grid.addWidget(self.revision_edit, 0, 2)
        grid.addWidget(download, 0, 3)
        grid.addWidget(pause, 0, 4)
        grid.addWidget(cancel, 0, 5)
        grid.addWidget(bar, 1, 0, 1, 2)
        grid.addWidget(status, 1, 2, 1, 4)
        self.download_buttons[CUSTOM_KEY] = download
        self.pause_buttons[CUSTOM_KEY] = pause
        self.cancel_buttons[CUSTOM_KEY] = cancel
        self.progress_bars[CUSTOM_KEY] = bar
        self.status_labels[CUSTOM_KEY] = status
        return box

    def _build_local_box(self) -> QGroupBox:
        box = QGroupBox("Models on this computer")
        v = QVBoxLayout(box)
        columns = ["File", "Size", "Architecture", "Quantisation", "Parameters", "Context"]
        table = QTableWidget(0, len(columns))
        table.setObjectName("localTable")
        table.setHorizontalHeaderLabels(columns)
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        table.setAccessibleName("Models on this computer")
        table.setMinimumHeight(150)
        self.local_table = table
        v.addWidget(table)
        row = QHBoxLayout()
        self.import_button = QPushButton("Import a GGUF file…")
        self.import_button.clicked.connect(self.on_import_button_clicked)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh_local_models)
        hint = QLabel(f"or drop .gguf files here. Folder: {self.models_dir}")
        hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.import_button)
        row.addWidget(refresh)
        row.addWidget(hint, 1)
        v.addLayout(row)
        return box

    def _build_pair_box(self) -> QGroupBox:
        box = QGroupBox("Chat with")
        grid = QGridLayout(box)
        self.target_combo = QComboBox()
        self.target_combo.setObjectName("targetCombo")
        self.draft_combo = QComboBox()
        self.draft_combo.setObjectName("draftCombo")
        self.use_pair_button = QPushButton("Use this pair")
        self.use_pair_button.clicked.connect(self.on_use_pair_button_clicked)
        self.pair_explanation = QLabel()
        self.pair_explanation.setObjectName("pairExplanation")
        self.pair_explanation.setWordWrap(True)
        self.target_combo.setAccessibleName("Target model")
        self.draft_combo.setAccessibleName("Draft")
        self.use_pair_button.setAccessibleName("Use this pair")
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
        return box

    # --- local models and the pair picker --------------------------------------------------------

    def set_model_in_use(self, path: str | None) -> None:
        """The engine's target (the built-in model, or one opened with --model): listed among the
        local models wherever it lives, and chosen under "Chat with"."""
        self.model_in_use = Path(path).resolve() if path else None
        self.refresh_local_models(select=self.model_in_use)

    def refresh_local_models(self, select: Path | None = None) -> None:
        self.local_models = scan_local_models(self.models_dir)
        in_use = self.model_in_use
        if (
            in_use is not None
            and in_use.is_file()
            and all(m.path.resolve() != in_use for m in self.local_models)
        ):
            self.local_models.insert(0, local_model(in_use))
        table = self.local_table
        table.setRowCount(len(self.local_models))
        for row, m in enumerate(self.local_models):
            rel = m.path.relative_to(self.models_dir) if m.path.is_relative_to(self.models_dir) else m.path
            info = m.info
            is_in_use = in_use is not None and m.path.resolve() == in_use
            cells = [
                f"{rel} (in use)" if is_in_use else str(rel),
                format_bytes(m.size_bytes),
                info.architecture if info else "unreadable",
                info.quantization if info else "",
                format_params(info.n_params) if info else "",
                f"{info.context_length:,}" if info and info.context_length else "",
            ]
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(m.problem or str(m.path))
                table.setItem(row, col, item)
        previous = self.target_combo.currentData()
        self.target_combo.blockSignals(True)
        self.target_combo.clear()
        for m in self.local_models:
            if m.info is not None:
                in_use_text = ", in use" if in_use is not None and m.path.resolve() == in_use else ""
                self.target_combo.addItem(f"{m.name} ({m.path.name}{in_use_text})", str(m.path))
        if isinstance(select, Path):  # (a button's clicked(bool) may land here too)
            previous = next((str(m.path) for m in self.local_models if m.path.resolve() == select), previous)
        index = self.target_combo.findData(previous) if previous else -1
        self.target_combo.setCurrentIndex(max(index, 0) if self.target_combo.count() else -1)
        self.target_combo.blockSignals(False)
        self.on_target_combo_current_index_changed()
        self._show_card_states()
        self.models_changed.emit()

    def on_target_combo_current_index_changed(self, _index: int = 0) -> None:
        self.draft_combo.clear()
        target_path = self.target_combo.currentData()
        self.use_pair_button.setEnabled(target_path is not None)
        if target_path is None:
            self.pair_explanation.setText("No local model yet: download a pair or import a GGUF file.")
            return
        self.draft_combo.addItem("n-gram (prompt lookup, no draft model)", NGRAM)
        self.draft_combo.addItem("none (plain decoding)", NO_DRAFT)
        target = next(m for m in self.local_models if str(m.path) == target_path)
        assert target.info is not None
        choices = draft_choices(target.info, self.local_models)
        model = self.draft_combo.model()
        refused: list[str] = []
        for choice in choices:
            self.draft_combo.addItem(f"{choice.name} ({choice.path.name})", str(choice.path))
            index = self.draft_combo.count() - 1
            if choice.problem is not None:
                # Disabled but visible, with the rule it breaks: the user sees why.
                if isinstance(model, QStandardItemModel):
                    item = model.item(index)
                    item.setEnabled(False)
                self.draft_combo.setItemData(index, choice.problem, Qt.ItemDataRole.ToolTipRole)
                why = choice.refusal.describe() if choice.refusal is not None else choice.problem
                refused.append(f"{choice.path.name}: {why}")
            else:
                self.draft_combo.setItemData(index, "can draft for this target", Qt.ItemDataRole.ToolTipRole)
        if refused:
            self.pair_explanation.setText("Cannot draft for this target:\n" + "\n".join(refused))
        else:
            self.pair_explanation.setText("Every local model can draft for this target.")
        self.draft_combo.setCurrentIndex(0)

    def is_draft_enabled(self, index: int) -> bool:
        model = self.draft_combo.model()
        if isinstance(model, QStandardItemModel):
            return bool(model.item(index).isEnabled())
        return True

    def on_use_pair_button_clicked(self) -> None:
        target = self.target_combo.currentData()
        draft = self.draft_combo.currentData()
        if target is None or draft is None or not self.is_draft_enabled(self.draft_combo.currentIndex()):
            return
        self.pair_chosen.emit(str(target), str(draft))

    # --- the cards ---------------------------------------------------------------------------------

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
            self._show_fit_and_recommendation()

    def recommendation(self) -> Recommendation:
        vram = self.vram_bytes if self.gpu_backend else 0
        return recommend_pair(self.catalog, self.machine, self.gpu_backend, vram)

    def _show_fit_and_recommendation(self) -> None:
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
        rec = self.recommendation()
        for name, card in self.cards.items():
            card.set_fit(*describe_fit(card.pair, m, self.gpu_backend, vram))
            card.set_recommended(rec.reason if rec.pair is not None and rec.pair.name == name else None)

    def pair_paths(self, pair: CatalogPair) -> list[Path]:
        """Where the pair's files are (or will be) in the models folder, target first."""
        if pair.is_embedded:
            in_use = self.model_in_use
            if in_use is not None and in_use.name == pair.target.filename and in_use.is_file():
                return [in_use]  # set up already, wherever it was unpacked
            return [self.models_dir / pair.target.filename]
        return [local_path_for(r.repo_id, r.filename, self.models_dir) for r in pair_requests(pair)]

    def _show_card_states(self) -> None:
        in_use = self.model_in_use
        for card in self.cards.values():
            files = self.pair_paths(card.pair)
            card.set_downloaded(all(f.is_file() for f in files))
            card.set_in_use(in_use is not None and files[0].resolve() == in_use)

    def use_catalog_pair(self, pair: CatalogPair) -> None:
        """A downloaded card's "Chat with this pair": the same signal as the picker's button."""
        files = self.pair_paths(pair)
        if not all(f.is_file() for f in files):
            self._show_card_states()
            return
        draft = str(files[1]) if len(files) > 1 else NGRAM
        self.pair_chosen.emit(str(files[0]), draft)

    # --- downloads -------------------------------------------------------------------------------

    def _show_kept_part(self, pair: CatalogPair) -> None:
        kept = sum(partial_download(r.repo_id, r.filename, self.models_dir) for r in pair_requests(pair))
        if kept and pair.download_bytes:
            card = self.cards[pair.name]
            card.set_fraction(kept / pair.download_bytes)
            card.set_status(
                f"{format_bytes(kept)} of {format_bytes(pair.download_bytes)} kept; Download resumes"
            )

    def _set_status(self, key: str, text: str, is_error: bool = False) -> None:
        card = self.cards.get(key)
        if card is not None:
            card.set_status(text, is_error)
            return
        label = self.status_labels[key]
        label.setText(text)
        label.setStyleSheet(f"color: {bad_colour(app_palette())};" if is_error else "")

    def _set_running(self, key: str, is_running: bool) -> None:
        card = self.cards.get(key)
        if card is not None:
            card.set_running(is_running)
            return
        self.download_buttons[key].setEnabled(not is_running)
        self.pause_buttons[key].setEnabled(is_running)
        self.cancel_buttons[key].setEnabled(is_running)

    def on_download_clicked(self, pair: CatalogPair) -> None:
        if pair.is_embedded:
            self._set_up_embedded(pair)
            return
        requests = pair_requests(pair)
        self.start_download(pair.name, requests)

    def on_custom_download_clicked(self) -> None:
        repo, name = self.repo_edit.text().strip(), self.file_edit.text().strip()
        if not repo or not name:
            self._set_status(CUSTOM_KEY, "Give a repository and a file name.")
            return
        revision = self.revision_edit.text().strip() or "main"
        self.start_download(CUSTOM_KEY, [FileRequest(repo, name, revision)])

    @property
    def jobs(self) -> dict[str, DownloadJob]:
        return self.downloads.jobs

    def start_download(self, key: str, requests: Sequence[FileRequest]) -> None:
        if self.downloads.start(key, requests):
            self._set_running(key, True)
            self._set_status(key, "asking the hub…")

    def pause_download(self, key: str) -> None:
        if self.downloads.pause(key):
            self._set_status(key, "pausing…")

    def cancel_download(self, key: str) -> None:
        if self.downloads.cancel(key):
            self._set_status(key, "cancelling…")

    def on_downloads_progressed(self, key: str, p: DownloadProgress) -> None:
        if key not in self.progress_bars:
            return  # another view's download (the pair doctor's)
        text = describe_progress(p)
        self.progress_bars[key].setValue(int(self.PROGRESS_STEPS * p.total_fraction))
        self._set_status(key, text)
        self.status_labels[key].setToolTip(f"{p.filename}: {p.state}")
        self.download_progressed.emit(key, text)

    def on_downloads_finished(self, key: str, done: list[str]) -> None:
        if key not in self.progress_bars:
            self.refresh_local_models()
            return
        self._end_job(key)
        self.progress_bars[key].setValue(self.PROGRESS_STEPS)
        self._set_status(key, "downloaded: " + ", ".join(Path(d).name for d in done))
        self.refresh_local_models()
        self.download_finished.emit(key, [str(d) for d in done])

    def on_downloads_failed(self, key: str, message: str, end: DownloadEnd) -> None:
        if key not in self.progress_bars:
            return
        self._end_job(key)
        if end is DownloadEnd.CANCELLED:
            self.progress_bars[key].setValue(0)
        self._set_status(key, message, is_error=end is DownloadEnd.FAILED)
        self.status_labels[key].setToolTip(message)
        self.download_failed.emit(key, message, end is DownloadEnd.PAUSED)

    def _end_job(self, key: str) -> None:
        self.progress_bars[key].setRange(0, self.PROGRESS_STEPS)
        self._set_running(key, False)

    def _set_up_embedded(self, pair: CatalogPair) -> None:
        """The built-in model ships in Tandem's packages: join its chunks once, then offer it."""
        models_dir = self.models_dir

        def run(control: DownloadControl, on_progress: Callable[[DownloadProgress], None]) -> list[Path]:
            from app.library.default_model import ensure_default_model

            return [ensure_default_model(models_dir)]

        if not self.downloads.start_run(pair.name, run):
            return
        self._set_running(pair.name, True)
        self.progress_bars[pair.name].setRange(0, 0)  # busy: joining the chunks has no progress
        self._set_status(pair.name, "setting up the built-in model…")

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Pause every download (their .part files stay for next time) and wait for the threads."""
        self.downloads.shutdown(timeout_s)

    # --- import ----------------------------------------------------------------------------------

    def on_import_button_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if path:
            self.import_files([Path(path)])

    def import_files(self, files: Sequence[Path]) -> None:
        """Check each file now (a bad one is refused at once), copy the good ones on a thread."""
        from engine.gguf_info import read_gguf_info

        for f in files:
            try:
                read_gguf_info(f)
            except TandemError as e:
                self.show_message(str(e), is_error=True)
                continue
            self.show_message(f"importing {f.name}…")
            self.imports.start(f)

    def on_imports_finished(self, path: str) -> None:
        self.show_message(f"imported {Path(path).name}")
        self.refresh_local_models()

    def on_imports_failed(self, message: str) -> None:
        self.show_message(message, is_error=True)

    def open_link(self, url: str) -> None:
        """A tandem://open_from_hf?model=OWNER/REPO&file=FILE link: show the pair doctor checking it."""
        self.scroll_area.ensureWidgetVisible(self.doctor)
        self.doctor.open_check(url)

    def show_message(self, text: str, is_error: bool = False) -> None:
        self.message_label.setText(text)
        self.message_label.setStyleSheet("color: #b00020;" if is_error else "")

    def event(self, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            for card in self.cards.values():
                card.restyle()
        return super().event(event)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        files = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        if files:
            event.acceptProposedAction()
            self.import_files(files)
