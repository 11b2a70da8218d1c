"""Downloads (and imports: a copy is a job too) on plain Python threads, reported to the GUI thread
by Qt signals.

app.library.downloads knows no Qt; each job reports through a small QObject whose signals are
emitted from the job's thread and delivered queued on the GUI thread, so no widget is touched off
the GUI thread. Pause and cancel set a flag the downloader reads once per chunk (a busy thread
never sees a queued signal). The Models page and the pair doctor share one DownloadJobs: a key
names each job (a catalog pair's name, "custom", "doctor"), and each view follows its own keys.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.library.downloads import DownloadControl, DownloadProgress, DownloadStopped, FileRequest
from engine.errors import TandemError

RunFn = Callable[[DownloadControl, Callable[[DownloadProgress], None]], list[Path]]


class DownloadEnd(Enum):
    """How a download that did not finish ended: the page words it, never parses the message."""

    FAILED = "failed"
    PAUSED = "paused"
    CANCELLED = "cancelled"


class _JobSignals(QObject):
    # Each carries the job's key, so they connect straight to a bound method: a connection to a
    # QObject's method is queued onto that object's (the GUI) thread.
    progressed = Signal(str, object)  # key, DownloadProgress
    finished = Signal(str, object)  # key, list[str] of final paths
    failed = Signal(str, str, object)  # key, one-sentence message, DownloadEnd


class DownloadJob:
    """One download (a pair or a single file) on its own thread, with its pause/cancel control."""

    def __init__(self, key: str, run: RunFn):
        self.key = key
        self.control = DownloadControl()
        self.signals = _JobSignals()
        self._run = run
        self.thread = threading.Thread(target=self._main, name=f"download-{key}", daemon=True)

    def _main(self) -> None:
        key = self.key
        try:
            done = self._run(self.control, lambda p: self.signals.progressed.emit(key, p))
        except DownloadStopped as e:
            end = DownloadEnd.PAUSED if e.is_paused else DownloadEnd.CANCELLED
            self.signals.failed.emit(key, str(e), end)
        except TandemError as e:
            self.signals.failed.emit(key, str(e), DownloadEnd.FAILED)
        except Exception as e:  # a thread must not die silently: the page shows it
            self.signals.failed.emit(key, f"the download failed: {type(e).__name__}: {e}", DownloadEnd.FAILED)
        else:
            self.signals.finished.emit(key, [str(p) for p in done])


class DownloadJobs(QObject):
    """The running downloads, by key. Its signals fire on the GUI thread, after the job is gone."""

    progressed = Signal(str, object)  # key, DownloadProgress; relays each job's: jobs come and go
    finished = Signal(str, object)  # key, list[str] of final paths
    failed = Signal(str, str, object)  # key, message, DownloadEnd

    def __init__(self, models_dir: Path) -> None:
        super().__init__()
        self.models_dir = models_dir
        self.jobs: dict[str, DownloadJob] = {}

    def is_running(self, key: str) -> bool:
        return key in self.jobs

    def start(self, key: str, requests: Sequence[FileRequest]) -> bool:
        """Download the files (resumable, verified) under key; False if that key is running."""
        from app.library.downloads import download_files

        models_dir = self.models_dir

        def run(control: DownloadControl, on_progress: Callable[[DownloadProgress], None]) -> list[Path]:
            return download_files(
                list(requests), models_dir=models_dir, control=control, on_progress=on_progress
            )

        return self.start_run(key, run)

    def start_run(self, key: str, run: RunFn) -> bool:
        if key in self.jobs:
            return False
        job = DownloadJob(key, run)
        job.signals.progressed.connect(self.progressed)  # (queued: this object is the GUI thread's)
        job.signals.finished.connect(self.on_job_finished)
        job.signals.failed.connect(self.on_job_failed)
        self.jobs[key] = job
        job.thread.start()
        return True

    def pause(self, key: str) -> bool:
        job = self.jobs.get(key)
        if job:
            job.control.pause()
        return job is not None

    def cancel(self, key: str) -> bool:
        job = self.jobs.get(key)
        if job:
            job.control.cancel()
        return job is not None

    def on_job_finished(self, key: str, done: list[str]) -> None:
        self._end(key)
        self.finished.emit(key, done)

    def on_job_failed(self, key: str, message: str, end: DownloadEnd) -> None:
        self._end(key)
        self.failed.emit(key, message, end)

    def _end(self, key: str) -> None:
        job = self.jobs.pop(key, None)
        if job is not None:
            job.thread.join(timeout=1)

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Pause every download (their .part files stay for next time) and wait for the threads."""
        for job in list(self.jobs.values()):
            job.control.pause()
        for job in list(self.jobs.values()):
            job.thread.join(timeout=timeout_s)
