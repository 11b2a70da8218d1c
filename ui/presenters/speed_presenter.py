"""The speed baseline per target model (this machine's plain decoding speed, measured by a plain
reply or Compare's plain run, kept in the settings) and the stats record each reply keeps (the
engine's numbers, how it ended, and the baseline it is compared with)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.host.messages import EngineInfo
from app.settings import Settings
from app.store import NGRAM_DRAFTER, model_key_of_file
from engine.events import Finished, Speculation, Stats, StatsRecord
from ui.presenters.verdict import STEPS_KEY, headline

MIN_TOKENS_FOR_BASELINE = 8  # a plain reply shorter than this is too noisy to be the speed baseline


class SpeedPresenter(QObject):
    """The speed baseline per target model and the stats records of replies."""

    baseline_changed = Signal(str, float)  # target path, plain tokens/s

    def __init__(
        self,
        settings: Callable[[], Settings],
        update_settings: Callable[..., None],
        target_path: Callable[[], str | None],
        parent: QObject | None = None,
    ) -> None:
        """settings: the current settings; update_settings(**changes) saves changes;
        target_path: the loaded target model's path (None while none is loaded)."""
        super().__init__(parent)
        self._settings = settings
        self._update_settings = update_settings
        self._target_path = target_path
        # Per target: the quickest one-token steps the engine timed on a reply of this session
        # (the median of a reply's, at its quietest): the usual speed until one is measured.
        self._steps: dict[str, float] = {}

    def plain_tokens_per_s(self) -> float | None:
        """The measured plain speed of the loaded target on this machine, if any."""
        path = self._target_path()
        return self._settings().plain_tokens_per_s.get(path) if path else None

    def steps_tokens_per_s(self) -> float | None:
        """The loaded target's one-token steps at the quietest reply of this session, if any."""
        path = self._target_path()
        return self._steps.get(path) if path else None

    def note_steps(self, finished: Finished) -> None:
        """Keep a finished reply's one-token steps where they were the quickest yet: a busy
        computer only slows them, so the quickest is the nearest to a quiet moment. (After the
        reply's record, which is compared with what was known before it.)"""
        path, est = self._target_path(), finished.stats.plain_tokens_per_s_est
        if (
            path is None
            or not est
            or finished.stop_reason == "cancelled"
            or finished.stats.n_generated < MIN_TOKENS_FOR_BASELINE
        ):
            return
        self._steps[path] = max(self._steps.get(path, 0.0), est)

    def record_plain_speed(self, finished: Finished) -> bool:
        """Keep a plain reply's decode speed as the baseline; True when it was kept.

        Only a plain reply (speculation off) that ended by itself and was long enough counts."""
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
        speeds = dict(self._settings().plain_tokens_per_s)
        speeds[path] = speed
        self._update_settings(plain_tokens_per_s=speeds)
        self.baseline_changed.emit(path, speed)
        return True

    def record(self, finished: Finished, **extras: Any) -> StatsRecord:
        """What a finished reply keeps: the engine's numbers, how it ended, the baseline."""
        record = StatsRecord.of(finished.stats, finished.stop_reason, **self._steps_extra(), **extras)
        return replace(record, plain_tokens_per_s=self._plain())

    def partial_record(self, stats: Stats | None) -> StatsRecord | None:
        """What an interrupted reply keeps (its last numbers), or None when it had none."""
        if stats is None:
            return None
        return replace(
            StatsRecord.of(stats, "interrupted", **self._steps_extra()), plain_tokens_per_s=self._plain()
        )

    def _plain(self) -> float | None:
        return self.plain_tokens_per_s() or None

    def _steps_extra(self) -> dict[str, Any]:
        """The quiet one-token-step speed a reply is compared with (no plain speed measured): kept
        in its record, so the stored reply says what it said at its end."""
        steps = self.steps_tokens_per_s()
        return {STEPS_KEY: round(steps, 2)} if steps and not self._plain() else {}


@dataclass(frozen=True)
class PairReply:
    """What one reply measured for its pair on this machine (kept for the pair doctor)."""

    target: str  # app.store.model_key
    drafter: str  # a draft model's model_key, or NGRAM_DRAFTER
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
        drafter = NGRAM_DRAFTER
    target = model_key_of_file(info.target_path)
    if target is None or drafter is None:
        return None
    return PairReply(target, drafter, said.speedup, said.is_estimate, record.n_generated)
