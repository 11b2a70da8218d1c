"""The speed baseline per target model (this machine's plain decoding speed, measured by a plain
reply or Compare's plain run, kept in the settings) and the stats record each reply keeps (the
engine's numbers, how it ended, and the baseline it is compared with)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.host.messages import EngineInfo, SpeculationOff
from app.settings import Settings
from app.store import model_key_of_file
from engine.events import Finished, Speculation, Stats, StatsRecord
from ui.presenters.off_words import OFF_KEY
from ui.presenters.verdict import BUSY_SHARE, FAILURE_KEY, STEPS_KEY, headline
from ui.presenters.words import model_name

MIN_TOKENS_FOR_BASELINE = 8  # a plain reply shorter than this is too noisy to be the speed baseline
QUIET_REPLACED = 5  # replies in a row whose steps ran well below the quiet ones: the new usual
PROMPT_BUCKET = 512  # quiet steps are kept for prompts up to 512 tokens, 1024, 2048, ...


def engine_extras(info: EngineInfo | None) -> dict[str, object]:
    """What a finished reply keeps of the engine that wrote it besides its numbers: when it ended
    and the model by its name (exports say both), and why the speed-up was off (Details say it)."""
    extras: dict[str, object] = {"finished_at": round(time.time(), 1)}
    if info is not None:
        extras["model"] = model_name(Path(info.target_path), info.target_name)
        if info.speculation_off is not SpeculationOff.NONE:
            extras[OFF_KEY] = str(info.speculation_off)
    return extras


class SpeedPresenter(QObject):
    """The speed baseline per target model and the stats records of replies."""

    baseline_changed = Signal(str, float)  # target path, plain tokens/s

    def __init__(
        self,
        settings: Callable[[], Settings],
        update_settings: Callable[[Settings], None],
        target_path: Callable[[], str | None],
        parent: QObject | None = None,
    ) -> None:
        """target_path: the loaded target model's path (None while none is loaded)."""
        super().__init__(parent)
        self._settings = settings
        self._update_settings = update_settings
        self._target_path = target_path
        self._slower_in_a_row = 0  # replies whose steps ran below BUSY_SHARE of the quiet ones

    def plain_tokens_per_s(self) -> float | None:
        """The measured plain speed of the loaded target on this machine, if any."""
        path = self._target_path()
        return self._settings().plain_tokens_per_s.get(path) if path else None

    def _steps_key(self, stats: Stats) -> str | None:
        """The loaded target and what sets its steps' speed here (threads, GPU layers, and how
        long the prompt is: a step reads the whole conversation's cache, so a long chat's steps
        are slower, not busy): one usual speed for each."""
        path, s = self._target_path(), self._settings()
        if not path:
            return None
        prompt = PROMPT_BUCKET
        while prompt < stats.n_prompt_tokens:
            prompt *= 2
        return f"{path}|threads={s.n_threads or 'all'}|gpu={s.n_gpu_layers}|prompt<={prompt}"

    def steps_tokens_per_s(self, stats: Stats) -> float | None:
        """The loaded target's one-token steps at its quietest reply here with a prompt of about
        this reply's size (kept in the settings), if any: the usual speed until a plain one is
        measured."""
        key = self._steps_key(stats)
        return self._settings().quiet_steps_tokens_per_s.get(key) if key else None

    def note_steps(self, finished: Finished) -> None:
        """Keep a finished reply's one-token steps where they were the quickest yet (a busy
        computer only slows them); where QUIET_REPLACED replies in a row ran below BUSY_SHARE of
        it, the computer is slower now (another setup, power saving): theirs is the usual then."""
        key, est = self._steps_key(finished.stats), finished.stats.plain_tokens_per_s_est
        if (
            key is None
            or not est
            or finished.stop_reason == "cancelled"
            or finished.stats.n_generated < MIN_TOKENS_FOR_BASELINE
        ):
            return
        kept = self._settings().quiet_steps_tokens_per_s
        usual = kept.get(key, 0.0)
        self._slower_in_a_row = self._slower_in_a_row + 1 if est < BUSY_SHARE * usual else 0
        if est > usual or self._slower_in_a_row >= QUIET_REPLACED:
            self._slower_in_a_row = 0
            self._update_settings(
                replace(self._settings(), quiet_steps_tokens_per_s={**kept, key: round(est, 2)})
            )

    def record_plain_speed(self, finished: Finished) -> bool:
        """Keep a plain reply's decode speed as the baseline (one that ended by itself, long enough);
        True when it was kept."""
        stats = finished.stats
        path = self._target_path()
        if (
            path is None
            or finished.stop_reason == "cancelled"
            or stats.speculation is not Speculation.NONE
            or stats.n_generated < MIN_TOKENS_FOR_BASELINE
        ):
            return False
        speed = round(stats.decode_tokens_per_s, 3)
        speeds = {**self._settings().plain_tokens_per_s, path: speed}
        self._update_settings(replace(self._settings(), plain_tokens_per_s=speeds))
        self.baseline_changed.emit(path, speed)
        return True

    def partial_record(self, stats: Stats | None, failure: str = "") -> StatsRecord | None:
        """What an interrupted reply keeps (its last numbers, and why it failed where it did), or
        None when it had none."""
        if stats is None:
            return None
        return self.record(stats, "interrupted", **({FAILURE_KEY: failure} if failure else {}))

    def record(self, stats: Stats, stop_reason: str, **extras: object) -> StatsRecord:
        """What a reply keeps: the engine's numbers, how it ended, the baseline."""
        # The quiet one-token-step speed the reply is compared with is kept in its record, so the
        # stored reply says what it said at its end.
        steps = self.steps_tokens_per_s(stats)
        record = StatsRecord.of(
            stats, stop_reason, **({STEPS_KEY: round(steps, 2)} if steps else {}), **extras
        )
        return replace(record, plain_tokens_per_s=self.plain_tokens_per_s() or None)


@dataclass(frozen=True)
class PairReply:
    """What one reply measured for its pair on this machine (kept for the pair doctor)."""

    target: str  # app.store.model_key
    drafter: str  # a draft model's model_key, or Speculation.NGRAM (n-gram lookup)
    speedup: float  # the whole request against plain decoding here, as the reply's headline says
    is_plain_estimate: bool
    n_generated: int


def pair_reply(record: StatsRecord, info: EngineInfo | None) -> PairReply | None:
    """The pair measurement a finished reply gives, or None: a reply that ended by itself, with
    the speed-up on, run here (not by a server), long enough for its headline to have a figure."""
    if (
        info is None
        or info.server
        or not record.is_speculative
        or record.stop_reason in ("cancelled", "interrupted")
    ):
        return None
    said = headline(record, record.plain_tokens_per_s, record.note_kind)
    if said.speedup is None:
        return None
    if record.speculation is Speculation.DRAFT:
        if info.draft.kind is not Speculation.DRAFT:
            return None
        drafter = model_key_of_file(info.draft.model)
    else:
        drafter = Speculation.NGRAM
    target = model_key_of_file(info.target_path)
    if target is None or drafter is None:
        return None
    return PairReply(target, drafter, said.speedup, said.is_estimate, record.n_generated)
