"""The pair doctor on the Models page: search the hub, check a target and a draft before
downloading them, see the drafts that pair, then download and chat.

Every hub call runs on a thread (app.library.pair_doctor knows no Qt) and reports back through a
queued signal carrying a ticket; a newer request or Cancel makes older tickets stale, so a late
answer from a slow hub is dropped, and the window never waits on the network.

Why this file is long: the panel's three steps (search, check, download) share their tickets; the
report's words (WindowWords) fill the parts app.library.pair_doctor.report_parts walks.
"""

from __future__ import annotations

import dataclasses
import html
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar, cast

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QSizePolicy,
    QSpinBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.library import hub_search, remote_gguf
from app.library import pair_doctor as doctor
from app.library.catalog import MachineInfo, detect_machine, format_bytes
from app.library.downloads import DownloadProgress, FileRequest, local_path_for
from app.library.measure import ACCEPTANCE_SOURCE_WORDS, MeasureProgress, PairFigures, describe_lines
from app.settings import SpeedUp
from app.store import PairMeasurement, shard_names
from engine.config import DEFAULT_CTX, NGRAM_LOOKUP, DraftChoice
from engine.errors import PairRefusal, TandemError
from ui.models.download_jobs import DownloadEnd, DownloadJobs
from ui.models.pair_card import PROGRESS_STEPS
from ui.presenters.words import choice_name, here_first_line
from ui.qt import theme
from ui.qt.widgets import button, label, named

T = TypeVar("T")  # what a task off the GUI thread returns
DOWNLOAD_KEY = "doctor"
FIT_WORDS = {
    doctor.FitKind.FITS: "fits",
    doctor.FitKind.TIGHT: "tight: close other programs",
    doctor.FitKind.TOO_LARGE: "too large for this machine",
}


def _row(*widgets: QWidget | None) -> QHBoxLayout:
    """A row of widgets, a line edit or a bar taking the room left; None: a stretch."""
    row = QHBoxLayout()
    for w in widgets:
        if w is None:
            row.addStretch(1)
        else:
            row.addWidget(w, 1 if isinstance(w, (QLineEdit, QProgressBar)) else 0)
    return row


class _TaskSignals(QObject):
    done = Signal(int, object)  # ticket, result
    failed = Signal(int, str)  # ticket, one sentence
    progressed = Signal(int, str)  # ticket, what is happening now


class PairDoctorPanel(QGroupBox):
    """Search box, results, a target and a draft to check, the report, drafts, download, chat."""

    pair_chosen = Signal(str, object)  # target path, DraftChoice (the draft file, or n-gram lookup)
    measured_here = Signal()  # stand-ins were timed: the catalog's cards may know more now

    def __init__(self, downloads: DownloadJobs, models_dir: Path, parent: QWidget | None = None) -> None:
        super().__init__("The Hugging Face hub: find a pair, check it, download it", parent)
        self.setObjectName("pairDoctor")
        self.downloads = downloads
        self.models_dir = models_dir
        self.machine: MachineInfo | None = None  # read on first need (_machine)
        self._ticket = 0
        self._cancel = threading.Event()
        self._measuring = False  # the task running is the measurement (its own bar and Cancel)
        self._signals = _TaskSignals()
        self._signals.done.connect(self.on_task_done)
        self._signals.failed.connect(self.on_task_failed)
        self._signals.progressed.connect(self.on_task_progressed)
        self._handlers: dict[int, Callable[[object], None]] = {}  # ticket: what takes its result
        self.report: doctor.CheckReport | None = None
        self._drafts_for = ""  # the target whose drafts the list shows

        v = QVBoxLayout(self)
        where = "Search GGUF models, e.g. qwen2.5 7b instruct"
        self.search_edit = named(QLineEdit(placeholderText=where), "hubSearch", "Search the hub")
        self.search_edit.returnPressed.connect(self.on_search_button_clicked)
        self.search_button = button("Search", clicked=self.on_search_button_clicked)
        self.cancel_button = button("Cancel", clicked=self.cancel)
        v.addLayout(_row(self.search_edit, self.search_button, self.cancel_button))
        self.busy_bar = QProgressBar(minimum=0, maximum=0, textVisible=False)
        self.busy_bar.setMaximumHeight(6)
        v.addWidget(self.busy_bar)
        self.status_label = label(name="doctorStatus")
        self.status_label.setTextFormat(Qt.TextFormat.PlainText)  # from GGUF headers: never markup
        v.addWidget(self.status_label)

        self.results = named(QTreeWidget(), "hubResults", "Search results")
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.results.setMinimumHeight(140)
        self.results.setHeaderLabels(["Repository and file", "Size", "On this machine"])
        self.results.header().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.results.itemActivated.connect(self.on_results_item_activated)
        self.results.itemClicked.connect(self.on_results_item_activated)
        v.addWidget(self.results)

        grid = QGridLayout()
        where = "owner/repo/file.gguf, or pick a file above"
        self.target_edit = named(QLineEdit(placeholderText=where), "doctorTarget", "Target to check")
        where = "optional: owner/repo/file.gguf (empty: look for drafts)"
        self.draft_edit = named(QLineEdit(placeholderText=where), "doctorDraft", "Draft to check")
        self.ctx_spin = QSpinBox(minimum=256, maximum=1_048_576, singleStep=1024, suffix=" tokens")
        self.ctx_spin.setValue(DEFAULT_CTX)
        self.ctx_spin.setAccessibleName("Context for the memory estimate")
        self.check_button = button(
            "Check", "", self.check, "Reads only the files' headers: nothing is downloaded"
        )
        for (row, column), text, buddy in (
            ((0, 0), "Target", self.target_edit),
            ((0, 2), "Context", self.ctx_spin),
            ((1, 0), "Draft", self.draft_edit),
        ):
            caption = QLabel(text)
            caption.setBuddy(buddy)
            grid.addWidget(caption, row, column)
            grid.addWidget(buddy, row, column + 1)
        grid.addWidget(self.check_button, 1, 2, 1, 2)
        grid.setColumnStretch(1, 1)
        v.addLayout(grid)

        self.report_label = label(name="doctorReport", rich=True)
        self.report_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.why_open = False  # the measured figures behind the one-line answer ("why")
        self.report_label.linkActivated.connect(self.on_report_label_link_activated)
        # Never squeezed below its text (the page scrolls): the verdict's last lines are the figures.
        self.report_label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        v.addWidget(self.report_label)

        tip = (
            "Times models of the same shape with random weights here: plain speed, copy work, "
            "whether the draft pays. Nothing is downloaded; they are deleted after."
        )
        self.measure_button = button(
            "Measure on this computer", "doctorMeasure", self.on_measure_button_clicked, tip
        )
        # The measurement's own progress and Cancel, beside it (not the hub search's).
        self.measure_bar = named(QProgressBar(), "measureProgress", "Measuring on this computer")
        self.measure_cancel_button = button(
            "Cancel", "measureCancel", self.cancel, accessible="Cancel the measurement", hidden=True
        )
        v.addLayout(_row(self.measure_button, self.measure_bar, self.measure_cancel_button, None))

        self.drafts_list = named(QListWidget(), "doctorDrafts", "Drafts for this target")
        self.drafts_list.setMaximumHeight(160)
        self.drafts_list.setWordWrap(True)
        self.drafts_list.itemActivated.connect(self.on_drafts_list_item_activated)
        self.drafts_list.itemDoubleClicked.connect(self.on_drafts_list_item_activated)
        v.addWidget(self.drafts_list)

        self.download_button = button("Download this pair", clicked=self.on_download_button_clicked)
        self.download_cancel_button = button("Stop", clicked=lambda: self.downloads.pause(DOWNLOAD_KEY))
        self.chat_button = button("Chat with this pair", clicked=self.on_chat_button_clicked)
        for b in (self.cancel_button, self.measure_button, self.download_button, self.download_cancel_button):
            b.setEnabled(False)
        self.chat_button.setEnabled(False)
        self.progress_bar = QProgressBar(maximum=PROGRESS_STEPS)  # shown while something downloads
        for hidden in (self.busy_bar, self.results, self.measure_bar, self.drafts_list, self.progress_bar):
            hidden.setVisible(False)
        v.addLayout(
            _row(self.download_button, self.download_cancel_button, self.progress_bar, None, self.chat_button)
        )

        downloads.progressed.connect(self.on_downloads_progressed)
        downloads.finished.connect(self.on_downloads_finished)
        downloads.failed.connect(self.on_downloads_failed)

    # --- running things off the GUI thread ---------------------------------------------------------

    def _run(
        self,
        what: str,
        work: Callable[[threading.Event, Callable[[str], None]], T],
        then: Callable[[T], None],
    ) -> None:
        """Start work(cancel, report) on a thread; report(text) shows progress, then(result) runs on
        the GUI thread, unless a newer task or Cancel came first. Only one task is current:
        starting one makes the last one stale."""
        self._cancel.set()
        self._cancel = cancel = threading.Event()
        self._ticket += 1
        ticket = self._ticket
        # The result crosses the thread as a signal's object: it is what `work` returned.
        self._handlers = {ticket: lambda result: then(cast(T, result))}
        signals = self._signals

        def main() -> None:
            try:
                result = work(cancel, lambda text: signals.progressed.emit(ticket, text))
            except remote_gguf.CheckCancelled:
                return
            except TandemError as e:
                signals.failed.emit(ticket, str(e))
            except Exception as e:  # a thread must not die silently: the panel shows it
                signals.failed.emit(ticket, f"unexpected failure: {type(e).__name__}: {e}")
            else:
                signals.done.emit(ticket, result)

        threading.Thread(target=main, name=f"doctor-{what}", daemon=True).start()
        self._measuring = what == "measure"
        self._set_busy(True)

    def _set_busy(self, is_busy: bool) -> None:
        """The hub's bar and Cancel for a search, a check or a drafts search; the measurement's
        own, beside its button, while it measures."""
        measuring = is_busy and self._measuring
        self.busy_bar.setVisible(is_busy and not measuring)
        self.cancel_button.setEnabled(is_busy and not measuring)
        self.measure_bar.setVisible(measuring)
        self.measure_cancel_button.setVisible(measuring)
        if measuring:
            self.measure_bar.setValue(0)

    def cancel(self) -> None:
        self._cancel.set()
        self._handlers = {}
        self._set_busy(False)
        self.measure_button.setEnabled(self.report is not None)
        self.set_status("Cancelled.")

    def on_task_done(self, ticket: int, result: object) -> None:
        handler = self._handlers.pop(ticket, None)
        if handler is None:
            return  # stale: cancelled, or replaced by a newer request
        self._set_busy(False)
        handler(result)

    def on_task_progressed(self, ticket: int, text: str) -> None:
        if ticket in self._handlers:
            self.set_status(text)
            percent = re.match(r"Measuring on this computer: (\d+)%", text)
            if percent is not None:
                self.measure_bar.setValue(int(percent[1]))

    def on_report_label_link_activated(self, link: str) -> None:
        """ "why" / "hide why": the measured figures behind the one-line answer."""
        if link == "why" and self.report is not None:
            self.why_open = not self.why_open
            self.restyle()

    def on_task_failed(self, ticket: int, message: str) -> None:
        if self._handlers.pop(ticket, None) is None:
            return
        self._set_busy(False)
        self.measure_button.setEnabled(self.report is not None)
        self.set_status(doctor.sentence(message), is_error=True)

    def set_status(self, text: str, is_error: bool = False) -> None:
        self.status_label.setText(text)
        theme.set_tone(self.status_label, "error" if is_error else "")

    def _machine(self) -> MachineInfo:
        if self.machine is None:
            self.machine = detect_machine(with_vram=True)
        return self.machine

    # --- search --------------------------------------------------------------------------------------

    def on_search_button_clicked(self) -> None:
        self.search(self.search_edit.text())

    def search(self, query: str) -> None:
        query = query.strip()
        if not query:
            self.set_status("Type what to look for, e.g. qwen2.5 7b instruct.")
            return
        self.search_edit.setText(query)
        self.set_status(f"Searching the hub for “{query}”…")
        self._run(
            "search",
            lambda cancel, report: hub_search.search(
                query,
                cancel=cancel,
                on_listed=lambda n, total: report(
                    f"Searching the hub for “{query}”: files of {n} of {total} repositories…"
                ),
            ),
            lambda repos: self._show_results(query, repos),
        )

    def _show_results(self, query: str, repos: list[hub_search.HubRepo]) -> None:
        self.results.clear()
        self.results.setVisible(bool(repos))
        if not repos:
            self.set_status(f"No GGUF models on the hub match “{query}”.")
            return
        machine, colours = self._machine(), theme.colors()
        for repo in repos:
            top = QTreeWidgetItem([f"{repo.repo_id} · {repo.downloads:,} downloads", "", ""])
            top.setFlags(top.flags() & ~Qt.ItemFlag.ItemIsSelectable)
            self.results.addTopLevelItem(top)
            for quant, files in repo.by_quantization():
                for f in files:
                    fit = doctor.file_fit(f.size_bytes, machine)
                    parts = f" ({f.n_shards} parts)" if f.n_shards > 1 else ""
                    item = QTreeWidgetItem(
                        [f"{quant} · {f.filename}{parts}", format_bytes(f.size_bytes), FIT_WORDS[fit.kind]]
                    )
                    item.setData(0, Qt.ItemDataRole.UserRole, f"{f.repo_id}/{f.filename}")
                    item.setToolTip(2, doctor.describe_fit(fit))
                    colour = colours.ok_text if fit.is_fitting else colours.error_text
                    item.setForeground(2, QBrush(QColor(colour)))
                    top.addChild(item)
            top.setExpanded(len(repos) <= 3)
        n_files = sum(len(r.files) for r in repos)
        self.set_status(f"{len(repos)} repositories, {n_files} GGUF files. Pick a file to check it.")

    def restyle(self) -> None:
        """The report drawn again: the theme changed (the verdict's and the fit's colours), or "why"."""
        if self.report is not None:
            parts = doctor.report_parts(self.report, WindowWords(self.why_open))  # in the window's words
            self.report_label.setText("".join(parts))

    def on_results_item_activated(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        ref = item.data(0, Qt.ItemDataRole.UserRole)
        if not ref:
            return
        self.target_edit.setText(str(ref))
        self.draft_edit.clear()
        self.check()

    # --- check ------------------------------------------------------------------------------------------

    def open_check(self, text: str) -> None:
        """Check a file named by a link (tandem://open_from_hf?model=…&file=…) or a reference."""
        try:
            ref = doctor.parse_model_ref(text)
        except TandemError as e:
            self.set_status(doctor.sentence(str(e)), is_error=True)
            return
        if not ref.filename and not ref.is_local:
            self.search(ref.repo_id)  # the hub's link names a repository: list its files to pick one
            return
        self.target_edit.setText(ref.label)
        self.draft_edit.clear()
        self.check()

    def check(self) -> None:
        try:
            target = doctor.parse_model_ref(self.target_edit.text())
            draft_text = self.draft_edit.text().strip()
            draft = doctor.parse_model_ref(draft_text) if draft_text else None
        except TandemError as e:
            self.set_status(doctor.sentence(str(e)), is_error=True)
            return
        n_ctx, machine = self.ctx_spin.value(), self._machine()
        self.report = None
        self.report_label.clear()
        self.measure_button.setEnabled(False)
        if self._drafts_for != target.label:  # a draft picked from the list keeps the list
            self._drafts_for = ""
            self.drafts_list.clear()
            self.drafts_list.setVisible(False)
        self.download_button.setEnabled(False)
        self.chat_button.setEnabled(False)
        self.set_status("Reading the headers (nothing is downloaded)…")

        self._run(
            "check",
            lambda cancel, _report: doctor.check(target, draft, n_ctx=n_ctx, machine=machine, cancel=cancel),
            lambda report: self._show_report(report, look_for_drafts=draft is None),
        )

    def _show_report(self, report: doctor.CheckReport, look_for_drafts: bool) -> None:
        self.report = report
        self.restyle()
        self.measure_button.setEnabled(True)
        self.set_status("Checked from the headers only.")
        self._offer_download()
        if look_for_drafts and self._drafts_for != report.target.ref.label:
            self._find_drafts(report)

    def _find_drafts(self, report: doctor.CheckReport) -> None:
        target, n_ctx = report.target.ref, report.memory.n_ctx
        machine = self._machine()
        self._drafts_for = target.label
        self.drafts_list.clear()
        ngram = QListWidgetItem(ngram_words(report))
        ngram.setData(Qt.ItemDataRole.UserRole, NGRAM_LOOKUP)  # the others: a hub file's ref
        self.drafts_list.addItem(ngram)
        self.drafts_list.setVisible(True)
        self.set_status("Looking for drafts on the hub…")
        self._run(
            "drafts",
            lambda cancel, _report: doctor.find_drafts(
                target, report.target, n_ctx=n_ctx, machine=machine, cancel=cancel
            ),
            self._show_drafts,
        )

    def _show_drafts(self, candidates: list[doctor.DraftCandidate]) -> None:
        for c in candidates:
            item = QListWidgetItem(f"{choice_name(SpeedUp.DRAFT)} {doctor.describe_candidate(c)}")
            item.setData(Qt.ItemDataRole.UserRole, f"{c.file.repo_id}/{c.file.filename}")
            if not c.is_usable:
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
            self.drafts_list.addItem(item)
        n_usable = sum(c.is_usable for c in candidates)
        self.set_status(
            f"{n_usable} draft model(s) on the hub pair with this target and fit; double-click one to check the pair."
            if n_usable
            else f"No draft model on the hub pairs with this target and fits; "
            f"“{choice_name(SpeedUp.NGRAM)}” always works."
        )

    def on_drafts_list_item_activated(self, item: QListWidgetItem) -> None:
        ref = item.data(Qt.ItemDataRole.UserRole)
        if not ref or not item.flags() & Qt.ItemFlag.ItemIsEnabled:
            return
        # n-gram lookup: the target alone (it needs no second model)
        self.draft_edit.setText("" if ref == NGRAM_LOOKUP else str(ref))
        self.check()

    # --- measure on this computer ------------------------------------------------------------------------

    def on_measure_button_clicked(self) -> None:
        report = self.report
        if report is None:
            return
        self.measure_button.setEnabled(False)
        self.set_status("Measuring on this computer: writing a model of the same shape…")

        def work(cancel: threading.Event, say: Callable[[str], None]) -> PairFigures:
            return doctor.measure_here(
                report, cancel=cancel, on_progress=lambda p: say(measure_progress_words(p))
            )

        self._run("measure", work, lambda here: self._show_here(report, here))

    def _show_here(self, report: doctor.CheckReport, here: PairFigures) -> None:
        self.report = dataclasses.replace(report, here=here)
        self.restyle()
        self.measure_button.setEnabled(True)
        self.measured_here.emit()
        self.set_status(
            "Measured on this computer; nothing was downloaded, and nothing was kept but the figures."
        )

    # --- download and chat ---------------------------------------------------------------------------------

    def _refs(self) -> list[doctor.ModelRef]:
        report = self.report
        if report is None:
            return []
        return [f.ref for f in (report.target, report.draft) if f is not None]

    def _paths(self) -> list[Path]:
        return [
            r.path if r.path is not None else local_path_for(r.repo_id, r.filename, self.models_dir)
            for r in self._refs()
        ]

    def _requests(self) -> list[FileRequest]:
        """The hub files of the pair: every part of a split model."""
        return [
            FileRequest(r.repo_id, name, r.revision)
            for r in self._refs()
            if not r.is_local
            for name in shard_names(r.filename)
        ]

    def _offer_download(self) -> None:
        report = self.report
        pairs = report is not None and report.refusal is None
        parts = [local_path_for(f.repo_id, f.filename, self.models_dir) for f in self._requests()]
        is_ready = pairs and all(p.is_file() for p in [*self._paths(), *parts])
        self.download_button.setEnabled(
            pairs and not is_ready and not self.downloads.is_running(DOWNLOAD_KEY)
        )
        self.chat_button.setEnabled(is_ready)
        if not self.downloads.is_running(DOWNLOAD_KEY):  # a bar only while a download runs
            self.progress_bar.setVisible(False)

    def on_download_button_clicked(self) -> None:
        requests = self._requests()
        if not requests or not self.downloads.start(DOWNLOAD_KEY, requests):
            return
        self.download_button.setEnabled(False)
        self.download_cancel_button.setEnabled(True)
        self.progress_bar.setValue(0)
        self.progress_bar.setVisible(True)
        self.set_status("Downloading (it resumes where it stopped if interrupted)…")

    def on_downloads_progressed(self, key: str, p: DownloadProgress) -> None:
        if key != DOWNLOAD_KEY:
            return
        self.progress_bar.setValue(int(PROGRESS_STEPS * p.total_fraction))
        self.set_status(
            f"Downloading {p.filename}: {format_bytes(p.total_done_bytes)} of {format_bytes(p.total_bytes)}"
        )

    def on_downloads_finished(self, key: str, done: list[str]) -> None:
        if key != DOWNLOAD_KEY:
            return
        self.download_cancel_button.setEnabled(False)
        self.set_status("Downloaded and verified. Chat with this pair when you are ready.")
        self._offer_download()

    def on_downloads_failed(self, key: str, message: str, end: DownloadEnd) -> None:
        if key != DOWNLOAD_KEY:
            return
        self.download_cancel_button.setEnabled(False)
        self._offer_download()
        if end is DownloadEnd.PAUSED:
            self.set_status("Stopped; the part already downloaded is kept and Download resumes it.")
        else:
            self.set_status(doctor.sentence(message), is_error=end is DownloadEnd.FAILED)

    def on_chat_button_clicked(self) -> None:
        paths = self._paths()
        if not paths or not all(p.is_file() for p in paths):
            self._offer_download()
            return
        draft = DraftChoice.of_model(str(paths[1])) if len(paths) > 1 else NGRAM_LOOKUP
        self.pair_chosen.emit(str(paths[0]), draft)


def ngram_words(report: doctor.CheckReport) -> str:
    """The drafts list's first line: n-gram lookup, always offered, with what it measured here."""
    text = f"{choice_name(SpeedUp.NGRAM)}: no second model, no extra memory (always works)"
    if report.draft is None and report.measured is not None:
        text += f"; {doctor.describe_measured(report.measured)}"
    return text


class WindowWords:
    """The check as the window shows it (app.library.pair_doctor.report_parts: the parts, in order),
    rich text: the verdict and the fit coloured, what was measured here in one line with its
    figures behind "why" (shown where `why_open`)."""

    def __init__(self, why_open: bool = False) -> None:
        colours = theme.colors()
        self.good, self.bad = colours.ok_text, colours.error_text
        self.why_open = why_open

    def model(self, role: str, facts: doctor.ModelFacts) -> str:
        label, said = html.escape(facts.ref.label), html.escape(doctor.describe_model(facts))
        return f"<p><b>{role.capitalize()}: {label}</b><br>{doctor.sentence(said)}.</p>"

    def verdict(self, refusal: PairRefusal | None) -> str:
        v = refusal
        if v is None:
            return (
                f"<p style='color:{self.good}'><b>They pair:</b> the draft passes every vocabulary rule.</p>"
            )
        return (
            f"<p style='color:{self.bad}'><b>They do not pair:</b> the {html.escape(v.rule)} differs "
            f"(target: {html.escape(repr(v.target_value))}, draft: {html.escape(repr(v.draft_value))}).</p>"
        )

    def memory(self, need: doctor.MemoryNeed) -> str:
        return f"<p>{html.escape(doctor.sentence(doctor.describe_memory(need)))}.</p>"

    def fit(self, fit: doctor.Fit) -> str:
        colour = self.good if fit.is_fitting else self.bad
        return f"<p style='color:{colour}'>{html.escape(doctor.sentence(doctor.describe_fit(fit)))}.</p>"

    def measured(self, measured: PairMeasurement, with_draft: bool) -> str:
        if with_draft:
            return f"<p><b>{html.escape(doctor.sentence(doctor.describe_measured(measured)))}.</b></p>"
        ngram = f"With “{choice_name(SpeedUp.NGRAM)}”: {doctor.describe_measured(measured)}"
        return f"<p><b>{html.escape(ngram)}.</b></p>"

    def estimate(self, estimate: doctor.SpeedEstimate) -> str:
        return f"<p><i>{html.escape(estimate.describe())}</i></p>"

    def here(self, figures: PairFigures) -> str:
        first = f"<b>{html.escape(here_first_line(figures))}.</b>"  # the answer; the figures behind "why"
        if not self.why_open:
            return f"<p>{first} <a href='why'>why</a></p>"
        lines = describe_lines(figures, f"“{choice_name(SpeedUp.NGRAM)}”", ACCEPTANCE_SOURCE_WORDS)
        return (
            f"<p>{first} <a href='why'>hide why</a><br>" + "<br>".join(html.escape(x) for x in lines) + "</p>"
        )


MEASURE_STAGES = {"write": "writing", "load": "loading", "time": "timing"}


def measure_progress_words(p: MeasureProgress) -> str:
    batch = f" ({p.batch} tokens at once)" if p.batch else ""
    return (
        f"Measuring on this computer: {p.fraction:.0%}, {MEASURE_STAGES.get(p.stage, p.stage)} "
        f"a model shaped like the {p.role}{batch}…"
    )
