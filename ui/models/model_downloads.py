"""The Models page's downloads as the page shows them: which widgets follow each job (a catalog
pair's card, or the row for any file from the hub), start, pause and cancel, progress, and how a
job ended in words. The threads are ui/models/download_jobs.py's (shared with the pair doctor).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QGridLayout, QGroupBox, QLabel, QLineEdit, QProgressBar, QPushButton

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
        self.cards: dict[str, PairCard] = {}
        self.download_buttons: dict[str, QPushButton] = {}
        self.pause_buttons: dict[str, QPushButton] = {}
        self.cancel_buttons: dict[str, QPushButton] = {}
        self.progress_bars: dict[str, QProgressBar] = {}
        self.status_labels: dict[str, QLabel] = {}
        jobs.progressed.connect(self.on_jobs_progressed)
        jobs.finished.connect(self.on_jobs_finished)
        jobs.failed.connect(self.on_jobs_failed)
        self.custom_box = self._build_custom_box()

    # --- the widgets that show a job -------------------------------------------------------------

    def add_card(self, card: PairCard) -> None:
        """A catalog pair's card: its Download, Pause and Cancel, and the part a pause kept."""
        pair = card.pair
        card.download_button.clicked.connect(lambda _=False, p=pair: self.download_pair(p))
        card.pause_button.clicked.connect(lambda _=False, k=pair.name: self.pause(k))
        card.cancel_button.clicked.connect(lambda _=False, k=pair.name: self.cancel(k))
        self.cards[pair.name] = card
        self.download_buttons[pair.name] = card.download_button
        self.pause_buttons[pair.name] = card.pause_button
        self.cancel_buttons[pair.name] = card.cancel_button
        self.progress_bars[pair.name] = card.progress_bar
        self.status_labels[pair.name] = card.status_label
        self._show_kept_part(pair)

    def _build_custom_box(self) -> QGroupBox:
        box = QGroupBox("Any GGUF file from the Hugging Face hub")
        grid = QGridLayout(box)
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("repository, e.g. Qwen/Qwen3-0.6B-GGUF")
        self.file_edit = QLineEdit()
        self.file_edit.setPlaceholderText("file, e.g. Qwen3-0.6B-Q8_0.gguf")
        self.revision_edit = QLineEdit()
        self.revision_edit.setPlaceholderText("main")
        download = button("Download", clicked=self.on_custom_download_clicked)
        pause = button("Pause", clicked=lambda: self.pause(CUSTOM_KEY))
        cancel = button("Cancel", clicked=lambda: self.cancel(CUSTOM_KEY))
        for b in (pause, cancel):
            b.setEnabled(False)
        bar = QProgressBar()
        bar.setRange(0, PROGRESS_STEPS)
        bar.setVisible(False)  # until a download starts (before, an empty box under the fields)
        status = label()
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
        theme.set_tone(label, "error" if is_error else "")

    def _set_running(self, key: str, is_running: bool) -> None:
        card = self.cards.get(key)
        if card is not None:
            card.set_running(is_running)
            return
        self.download_buttons[key].setEnabled(not is_running)
        self.pause_buttons[key].setEnabled(is_running)
        self.cancel_buttons[key].setEnabled(is_running)
        if is_running:  # shown from the first download on (an idle bar was an empty box)
            self.progress_bars[key].show()

    # --- what the user asks ------------------------------------------------------------------------

    def download_pair(self, pair: CatalogPair) -> None:
        """A card's Download (or the welcome panel's): the built-in model is set up, not fetched."""
        if pair.is_embedded:
            self._set_up_embedded(pair)
            return
        self.start(pair.name, pair_requests(pair))

    def on_custom_download_clicked(self) -> None:
        repo, name = self.repo_edit.text().strip(), self.file_edit.text().strip()
        if not repo or not name:
            self._set_status(CUSTOM_KEY, "Give a repository and a file name.")
            return
        revision = self.revision_edit.text().strip() or "main"
        self.start(CUSTOM_KEY, [FileRequest(repo, name, revision)])

    def start(self, key: str, requests: Sequence[FileRequest]) -> None:
        if self.jobs.start(key, requests):
            self._set_running(key, True)
            self._set_status(key, "asking the hub…")

    def pause(self, key: str) -> None:
        if self.jobs.pause(key):
            self._set_status(key, "pausing…")

    def cancel(self, key: str) -> None:
        if self.jobs.cancel(key):
            self._set_status(key, "cancelling…")

    def _set_up_embedded(self, pair: CatalogPair) -> None:
        """The built-in model ships in Tandem's packages: join its chunks once, then offer it."""
        models_dir = self.models_dir

        def run(control: DownloadControl, on_progress: Callable[[DownloadProgress], None]) -> list[Path]:
            from app.library.default_model import ensure_default_model

            return [ensure_default_model(models_dir)]

        if not self.jobs.start_run(pair.name, run):
            return
        self._set_running(pair.name, True)
        self.progress_bars[pair.name].setRange(0, 0)  # busy: joining the chunks has no progress
        self._set_status(pair.name, "setting up the built-in model…")

    # --- what the jobs report ----------------------------------------------------------------------

    def on_jobs_progressed(self, key: str, p: DownloadProgress) -> None:
        if key not in self.progress_bars:
            return  # another view's download (the pair doctor's)
        text = describe_progress(p)
        self.progress_bars[key].setValue(int(PROGRESS_STEPS * p.total_fraction))
        self._set_status(key, text)
        self.status_labels[key].setToolTip(f"{p.filename}: {p.state}")
        self.progressed.emit(key, text)

    def on_jobs_finished(self, key: str, done: list[str]) -> None:
        if key not in self.progress_bars:
            self.files_arrived.emit()
            return
        self._end_job(key)
        self.progress_bars[key].setValue(PROGRESS_STEPS)
        self._set_status(key, "downloaded: " + ", ".join(Path(d).name for d in done))
        self.files_arrived.emit()
        self.finished.emit(key, [str(d) for d in done])

    def on_jobs_failed(self, key: str, message: str, end: DownloadEnd) -> None:
        if key not in self.progress_bars:
            return
        self._end_job(key)
        if end is DownloadEnd.CANCELLED:
            self.progress_bars[key].setValue(0)
        self._set_status(key, message, is_error=end is DownloadEnd.FAILED)
        self.status_labels[key].setToolTip(message)
        self.failed.emit(key, message, end is DownloadEnd.PAUSED)

    def _end_job(self, key: str) -> None:
        self.progress_bars[key].setRange(0, PROGRESS_STEPS)
        self._set_running(key, False)
