"""The Models page's own files: the table of models on this computer, and importing a GGUF file
into the models folder (by the button or by a drop on the page).

A file is checked at once (a bad one is refused with the reason before anything is copied); the
copy runs as a job of ui/models/download_jobs.py, which reports back on the GUI thread.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from PySide6.QtCore import QMimeData, QObject, Qt, QUrl, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.library.catalog import LocalModel, check_model_file, format_bytes, format_params, import_model
from app.library.downloads import DownloadControl
from app.library.file_identity import same_file
from engine.errors import TandemError
from ui.models.download_jobs import DownloadEnd, DownloadJobs
from ui.presenters.words import BUILT_IN_MODELS, built_in_key
from ui.qt.widgets import label, named


class LocalModelsBox(QGroupBox):
    """ "Models on this computer": one row a file, with Import and Refresh under it."""

    COLUMNS = ("File", "Size", "Architecture", "Quantisation", "Parameters", "Context")

    def __init__(self, models_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__("Models on this computer", parent)
        self.models_dir = models_dir
        v = QVBoxLayout(self)
        table = named(QTableWidget(0, len(self.COLUMNS)), "localTable", "Models on this computer")
        table.setHorizontalHeaderLabels(list(self.COLUMNS))
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        table.setMinimumHeight(150)
        self.table = table
        v.addWidget(table)
        row = QHBoxLayout()
        self.import_button = QPushButton("Import a GGUF file…")
        self.refresh_button = QPushButton("Refresh")
        # The folder is a link, its path a tooltip: a long path written out made the page wider
        # than its window (a card cut off, a horizontal scroll bar).
        folder_url = html.escape(QUrl.fromLocalFile(str(models_dir)).toString())
        hint = label(f'or drop .gguf files here. <a href="{folder_url}">Open the models folder</a>')
        named(hint, "modelsFolderHint", f"Open the models folder, {models_dir}", str(models_dir))
        hint.setOpenExternalLinks(True)
        hint.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        row.addWidget(self.import_button)
        row.addWidget(self.refresh_button)
        row.addWidget(hint, 1)
        v.addLayout(row)

    def show_models(self, models: Sequence[LocalModel], in_use: Path | None) -> None:
        table = self.table
        table.setRowCount(len(models))
        for row, m in enumerate(models):
            rel = m.path.relative_to(self.models_dir) if m.path.is_relative_to(self.models_dir) else m.path
            built_in = built_in_key(str(m.path)) if rel == m.path else None
            if built_in is not None:  # a built-in model's file (inside Tandem's install): its name
                rel = Path(f"{dict(BUILT_IN_MODELS)[built_in]} (built in)")
            info = m.info
            is_in_use = in_use is not None and same_file(m.path, in_use)
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


def dropped_files(mime: QMimeData) -> list[Path]:
    """The local files among what is dragged (links and text are not files to import)."""
    return [Path(u.toLocalFile()) for u in mime.urls() if u.isLocalFile()]


class ModelImports(QObject):
    """Checks files offered for import and copies the good ones on a thread; says what happened
    in `message` (text, is an error) and `imported` once a copy is in the models folder."""

    message = Signal(str, bool)
    imported = Signal(str)  # the imported path

    def __init__(self, models_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.models_dir = models_dir
        self.jobs = DownloadJobs(models_dir)  # a copy is a job: one thread each
        self.jobs.finished.connect(self.on_jobs_finished)
        self.jobs.failed.connect(self.on_jobs_failed)
        self._keys = itertools.count()

    def ask_and_import(self, parent: QWidget) -> None:
        path, _ = QFileDialog.getOpenFileName(
            parent, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if path:
            self.import_files([Path(path)])

    def import_files(self, files: Sequence[Path]) -> None:
        """Check each file now (a bad one is refused at once), copy the good ones on a thread."""
        for f in files:
            try:
                check_model_file(f)
            except TandemError as e:
                self.message.emit(str(e), True)
                continue
            self.message.emit(f"importing {f.name}…", False)
            self.jobs.start_run(f"import-{next(self._keys)}", partial(_import, f, self.models_dir))

    def on_jobs_finished(self, _key: str, done: list[str]) -> None:
        self.message.emit(f"imported {Path(done[0]).name}", False)
        self.imported.emit(done[0])

    def on_jobs_failed(self, _key: str, message: str, _end: DownloadEnd) -> None:
        self.message.emit(message, True)


def _import(source: Path, models_dir: Path, _control: DownloadControl, _progress: object) -> list[Path]:
    return [import_model(source, models_dir)]
