"""The Models page's downloads as the page shows them: which widgets follow each job (a catalog
pair's card, or the row for any file from the hub), start, pause and cancel, progress, and how a
job ended in words. The threads are ui/models/download_jobs.py's (shared with the pair doctor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLineEdit, QProgressBar

from app.library.catalog import CatalogPair, format_bytes, format_eta
from app.library.downloads import (
    DownloadControl,
    DownloadProgress,
    FileRequest,
    pair_requests,
    partial_download,
)
from ui.models.download_jobs import DownloadEnd, DownloadJobs
from ui.models.pair_card import PROGRESS_STEPS, PairCard
from ui.qt import theme
from ui.qt.widgets import button, label

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


class HubFileRow(QGroupBox):
    """Any GGUF file from the hub, by its repository and name: the fields, and its download shown
    as a card shows one (download_button, pause_button, cancel_button, progress_bar, status_label,
    set_status, set_running)."""

    def __init__(self) -> None:
        super().__init__("Any GGUF file from the Hugging Face hub")
        grid = QGridLayout(self)
        self.repo_edit = QLineEdit(placeholderText="repository, e.g. Qwen/Qwen3-0.6B-GGUF")
        self.file_edit = QLineEdit(placeholderText="file, e.g. Qwen3-0.6B-Q8_0.gguf")
        self.revision_edit = QLineEdit(placeholderText="main")
        self.download_button, self.pause_button, self.cancel_button = map(
            button, ("Download", "Pause", "Cancel")
        )
        self.progress_bar = QProgressBar(maximum=PROGRESS_STEPS)
        self.status_label = label()
        row = (self.repo_edit, self.file_edit, self.revision_edit)
        for column, widget in enumerate((*row, self.download_button, self.pause_button, self.cancel_button)):
            grid.addWidget(widget, 0, column)
        grid.addWidget(self.progress_bar, 1, 0, 1, 2)
        grid.addWidget(self.status_label, 1, 2, 1, 4)
        self.progress_bar.setVisible(False)  # until a download starts (before, an empty box under the fields)
        self.set_running(False)

    def set_status(self, text: str, is_error: bool = False) -> None:
        self.status_label.setText(text)
        theme.set_tone(self.status_label, "error" if is_error else "")

    def set_running(self, is_running: bool) -> None:
        self.download_button.setEnabled(not is_running)
        self.pause_button.setEnabled(is_running)
        self.cancel_button.setEnabled(is_running)
        if is_running:  # shown from the first download on (an idle bar was an empty box)
            self.progress_bar.show()


class ModelDownloads(QObject):
    """The page's download jobs, each shown on its card or on the hub-file row (custom_box)."""

    # key (a pair's name, or CUSTOM_KEY), then the text shown, the final paths in the pair's order
    # (target, draft), or the message and whether it is paused.
    progressed = Signal(str, str)
    finished = Signal(str, list)
    failed = Signal(str, str, bool)
    files_arrived = Signal()  # any download finished, the pair doctor's too: list the models again

    def __init__(self, jobs: DownloadJobs, models_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.jobs = jobs
        self.models_dir = models_dir
        self.custom_box = HubFileRow()
        self.custom_box.download_button.clicked.connect(self.on_custom_download_clicked)
        self.custom_box.pause_button.clicked.connect(lambda: self.pause(CUSTOM_KEY))
        self.custom_box.cancel_button.clicked.connect(lambda: self.cancel(CUSTOM_KEY))
        self.rows: dict[str, PairCard | HubFileRow] = {CUSTOM_KEY: self.custom_box}  # what shows each job
        jobs.progressed.connect(self.on_jobs_progressed)
        jobs.finished.connect(self.on_jobs_finished)
        jobs.failed.connect(self.on_jobs_failed)

    def add_card(self, card: PairCard) -> None:
        """A catalog pair's card: its Download, Pause and Cancel, and the part a pause kept."""
        pair = card.pair
        card.download_button.clicked.connect(lambda _=False, p=pair: self.download_pair(p))
        card.pause_button.clicked.connect(lambda _=False, k=pair.name: self.pause(k))
        card.cancel_button.clicked.connect(lambda _=False, k=pair.name: self.cancel(k))
        self.rows[pair.name] = card
        kept = sum(partial_download(r.repo_id, r.filename, self.models_dir) for r in pair_requests(pair))
        if kept and pair.download_bytes:
            card.set_fraction(kept / pair.download_bytes)
            card.set_status(
                f"{format_bytes(kept)} of {format_bytes(pair.download_bytes)} kept; Download resumes"
            )

    # --- what the user asks ------------------------------------------------------------------------

    def download_pair(self, pair: CatalogPair) -> None:
        """A card's Download (or the welcome panel's): the built-in model is set up, not fetched."""
        if pair.is_embedded:
            self._set_up_embedded(pair)
            return
        self.start(pair.name, pair_requests(pair))

    def on_custom_download_clicked(self) -> None:
        box = self.custom_box
        repo, name = box.repo_edit.text().strip(), box.file_edit.text().strip()
        if not repo or not name:
            box.set_status("Give a repository and a file name.")
            return
        revision = box.revision_edit.text().strip() or "main"
        self.start(CUSTOM_KEY, [FileRequest(repo, name, revision)])

    def start(self, key: str, requests: Sequence[FileRequest]) -> None:
        if self.jobs.start(key, requests):
            self.rows[key].set_running(True)
            self.rows[key].set_status("asking the hub…")

    def pause(self, key: str) -> None:
        if self.jobs.pause(key):
            self.rows[key].set_status("pausing…")

    def cancel(self, key: str) -> None:
        if self.jobs.cancel(key):
            self.rows[key].set_status("cancelling…")

    def _set_up_embedded(self, pair: CatalogPair) -> None:
        """The built-in model ships in Tandem's packages: join its chunks once, then offer it."""
        models_dir = self.models_dir

        def run(control: DownloadControl, on_progress: Callable[[DownloadProgress], None]) -> list[Path]:
            from app.library.default_model import ensure_default_model

            return [ensure_default_model(models_dir)]

        card = self.rows[pair.name]
        if self.jobs.start_run(pair.name, run):
            card.set_running(True)
            card.progress_bar.setRange(0, 0)  # busy: joining the chunks has no progress
            card.set_status("setting up the built-in model…")

    # --- what the jobs report ----------------------------------------------------------------------

    def on_jobs_progressed(self, key: str, p: DownloadProgress) -> None:
        row = self.rows.get(key)
        if row is None:
            return  # another view's download (the pair doctor's)
        text = describe_progress(p)
        row.progress_bar.setValue(int(PROGRESS_STEPS * p.total_fraction))
        row.set_status(text)
        row.status_label.setToolTip(f"{p.filename}: {p.state}")
        self.progressed.emit(key, text)

    def on_jobs_finished(self, key: str, done: list[str]) -> None:
        row = self.rows.get(key)
        if row is not None:
            self._end_job(row)
            row.progress_bar.setValue(PROGRESS_STEPS)
            row.set_status("downloaded: " + ", ".join(Path(d).name for d in done))
        self.files_arrived.emit()
        if row is not None:
            self.finished.emit(key, [str(d) for d in done])

    def on_jobs_failed(self, key: str, message: str, end: DownloadEnd) -> None:
        row = self.rows.get(key)
        if row is None:
            return
        self._end_job(row)
        if end is DownloadEnd.CANCELLED:
            row.progress_bar.setValue(0)
        row.set_status(message, is_error=end is DownloadEnd.FAILED)
        row.status_label.setToolTip(message)
        self.failed.emit(key, message, end is DownloadEnd.PAUSED)

    def _end_job(self, row: PairCard | HubFileRow) -> None:
        row.progress_bar.setRange(0, PROGRESS_STEPS)
        row.set_running(False)
