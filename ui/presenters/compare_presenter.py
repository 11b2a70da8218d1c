"""Compare, without widgets: one prompt run twice, plainly then with the speed-up, with the same
sampling; its replies routed to the Compare view (they are never stored), the plain run kept as
this machine's plain speed."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QObject, Signal

from app.host.controller import EngineController
from app.host.messages import ChatTurn
from app.host.reply import Reply, ReplyProgress
from app.settings import Preset, Settings
from engine.errors import Failure
from engine.events import Finished, Stats
from ui.presenters.failures import failure_words, raise_if_unexpected
from ui.presenters.speed_presenter import SpeedPresenter
from ui.presenters.words import NOTHING_DRAFTED, compare_problem, compare_was_fair, longest_stall, task_preset


class ComparePresenter(QObject):
    # Each run by its name, "plain" or "speculative" (the requests' ids are `runs`' keys).
    started = Signal()
    progressed = Signal(str, object)  # name, ReplyProgress of a Compare run
    finished = Signal(str, object)  # name, Reply of a Compare run, its `finished` set
    failed = Signal(str, str)  # name, sentence
    state_changed = Signal(str)  # the status bar's state line

    def __init__(
        self,
        controller: EngineController,
        settings: Callable[[], Settings],
        speed: SpeedPresenter,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self._settings = settings
        self.speed = speed
        self.runs: dict[int, str] = {}  # request id -> "plain" | "speculative"
        self.is_greedy = True  # of the last run: same text is then a check, else by design
        self.task_preset: Preset | None = None  # of the last run: the preset its task ran with
        self._plain_run: Finished | None = None  # kept as the baseline once the runs prove fair
        # Each run's figures as they came, its final ones last (the view's chart; the stalls).
        self.stats: dict[str, list[Stats]] = {}
        self.problem = ""  # of the last runs: why they do not measure the speed-up ("" where they do)
        controller.reply_progressed.connect(self.on_controller_reply_progressed)
        controller.reply_finished.connect(self.on_controller_reply_finished)
        controller.reply_failed.connect(self.on_controller_reply_failed)

    def run(self, prompt: str) -> None:
        """Run the prompt twice, plain then with the speed-up, with the same sampling."""
        if self.controller.is_busy:
            return
        turns = (ChatTurn("user", prompt),)
        settings = self._settings()
        params, max_tokens = settings.sampling(), settings.max_tokens
        preset = task_preset(prompt)
        if preset is not None:
            params = replace(
                params,
                temperature=preset.temperature,
                top_p=preset.top_p,
                repeat_penalty=preset.repeat_penalty,
            )
        self.task_preset = preset
        self.is_greedy = params.is_greedy
        if not params.is_greedy and params.seed is None:
            # One seed for both runs: with n-gram drafts sampled speculation then writes the very
            # text plain decoding writes (engine/sampling.py, keyed sampling), so only speed differs.
            params = replace(params, seed=random.randrange(1 << 31))
        # Neither run drafts from earlier replies nor is kept: the speculative run must not draft
        # the plain run's reply (engine.text_index), or Compare would show that, not speculation.
        plain_id = self.controller.start_reply(
            turns, params=params, max_tokens=max_tokens, speculate=False, remember=False
        )
        speculative_id = self.controller.start_reply(
            turns, params=params, max_tokens=max_tokens, speculate=None, remember=False
        )
        self.runs = {plain_id: "plain", speculative_id: "speculative"}
        self._plain_run = None
        self.stats = {"plain": [], "speculative": []}
        self.started.emit()
        self.state_changed.emit("Compare: writing the usual way first…")

    def stop(self) -> None:
        """Stop the Compare whole when it runs (the run writing and the one queued behind it), else
        the reply being written: stopping only the first let the second run in full."""
        if not self.runs:
            self.controller.stop()
        for request_id in self.runs:
            self.controller.supervisor.cancel(request_id)

    def on_controller_reply_progressed(self, progress: ReplyProgress) -> None:
        name = self.runs.get(progress.request_id)
        if name is not None:
            self.stats.setdefault(name, []).extend(progress.stats)
            self.progressed.emit(name, progress)
            if name == "speculative":
                self.state_changed.emit("Compare: now with the speed-up…")

    def on_controller_reply_finished(self, reply: Reply) -> None:
        finished = reply.finished
        assert finished is not None
        name = self.runs.pop(reply.request_id, None)
        if name is None:
            return
        self.stats.setdefault(name, []).append(finished.stats)
        if name == "plain":
            self._plain_run = finished
        elif self._plain_run is not None:
            # The plain run is this computer's plain speed only where Compare found the two runs
            # fair: a figure from a run it called too busy, or one that stalled, is never
            # "measured on this computer".
            stalls = {
                n: longest_stall([(s.decode_s, s.n_generated) for s in run]) for n, run in self.stats.items()
            }
            self.problem = compare_problem(
                finished.stats, compare_was_fair(self._plain_run.stats, finished.stats), stalls
            )
            if self.problem in ("", NOTHING_DRAFTED):
                self.speed.record_plain_speed(self._plain_run)
            self._plain_run = None
        self.finished.emit(name, reply)
        self.state_changed.emit("Ready" if not self.runs else "Compare: now with the speed-up…")

    def on_controller_reply_failed(self, request_id: int, failure: Failure, has_engine_died: bool) -> None:
        name = self.runs.pop(request_id, None)
        if name is None:
            return
        self.failed.emit(name, failure_words(failure))
        raise_if_unexpected(failure)
