"""A model loading on a thread of its own, beside other work.

A draft model loads this way while its target loads (engine.session): a load is mostly one core's
work, so on 2 cores it is hidden behind the target's rather than paid inside the first reply
(llama.cpp calls release the GIL). The thread never outlives its owner's close: `cancel` stops the
load at llama.cpp's next progress report and waits for it, and a model loaded all the same is
freed. (A native crash takes the process down: the app loads models in its worker process.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.backend import LlamaRunner


class BackgroundLoad:
    """load(cancel) runs on a new thread at once; `result` waits for what it gave."""

    def __init__(self, load: Callable[[threading.Event], LlamaRunner], name: str = "tandem-load") -> None:
        self._load = load
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._runner: LlamaRunner | None = None
        self._error: BaseException | None = None
        self.load_s: float | None = None  # seconds the load took on its thread, once done
        self.started = time.perf_counter()
        # Not a daemon: an interpreter that exits waits for the load to end rather than tearing
        # llama.cpp down under it.
        self._thread = threading.Thread(target=self._run, name=name)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            self._runner = self._load(self._cancel)
        except BaseException as e:  # handed to whoever takes the result, on their thread
            self._error = e
        finally:
            self.load_s = time.perf_counter() - t0
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the load has ended (at most timeout seconds); True once it has."""
        return self._done.wait(timeout)

    def result(self) -> LlamaRunner:
        """The loaded model, waiting for it; the load's own exception is raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._runner is not None
        runner, self._runner = self._runner, None
        return runner

    def cancel(self) -> None:
        """Stop the load and wait for its thread; a model loaded meanwhile is freed."""
        self._cancel.set()
        self._thread.join()
        if self._runner is not None:
            self._runner.close()
            self._runner = None
