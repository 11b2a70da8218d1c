"""The engine and its speed-up, without widgets: which pair is loaded (or loading, or failed),
the one copy of the speed-up state (`SpeculationView`), and the pair's state in words for the
header. It drives the engine controller's loading and follows its engine signals."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import assert_never

from PySide6.QtCore import QObject, Signal

from app.host.controller import EngineController
from app.host.messages import EngineInfo, SpeculationOff
from app.library.model_spec import ModelSpec
from app.settings import Settings, SpeedUp
from engine.config import NGRAM_LOOKUP, PLAIN_DECODING, DraftChoice
from engine.errors import Failure
from engine.events import Speculation
from ui.presenters.failures import failure_words, raise_if_unexpected
from ui.presenters.off_words import off_words
from ui.presenters.words import auto_measured_words, model_name


@dataclass(frozen=True)
class SpeculationView:
    """The one speculation state, as the toolbar and Compare follow it."""

    choice: SpeedUp  # the kind chosen (the header's combo)
    in_effect: SpeedUp  # what the engine runs (Compare's speculative side)
    can_switch: bool  # False while a server is the engine: it decides its own speculation


@dataclass(frozen=True)
class PairView:
    """The pair label: its text, whether it reports a problem, its tooltip and the window title
    (None: unchanged)."""

    text: str
    is_problem: bool = False
    tooltip: str | None = None
    title: str | None = None
    # The speed-up choice the text only says again: the header shows the line only beside another
    # choice (Automatic, which it then explains). None: the text says more than any choice.
    restates: SpeedUp | None = None


def _kind(draft: DraftChoice) -> SpeedUp:
    return SpeedUp(draft.kind)


def pair_words(info: EngineInfo) -> str:
    """The loaded pair's state as the header says it, from the engine's values (the model's
    name is the model picker's)."""
    if info.server:  # (the picker names its model and host)
        how = f"; it drafts with {info.draft_name}" if info.draft_name else ""
        return f"The server decides its speed-up{how}"
    if info.speculation is Speculation.DRAFT and info.draft.model:
        pair = f"{_draft_said(info)} guesses ahead (same vocabulary: compatible)"
    elif info.speculation is Speculation.NGRAM:
        pair = "Guessing from the text (n-gram)"
    elif info.speculation_off is SpeculationOff.DRAFT_REFUSED:
        pair = "Speed-up off"  # (the refusal says why, next)
    else:
        pair = f"Speed-up off: {off_words(info.speculation_off)}"
    if info.draft_refusal is not None and info.speculation_off is not SpeculationOff.CANNOT_ROLL_BACK:
        pair += f". Draft model not used: {failure_words(info.draft_refusal)}."
    return pair


def _draft_said(info: EngineInfo) -> str:
    """The draft model's name, with its quantisation where the target has the same name (two
    copies of one model: "Gemma 3 270m - Q4_K_M" drafting for "Gemma 3 270m")."""
    from ui.presenters.task_ability import model_ability

    found = model_ability(info.draft.model) if info.draft_name == info.target_name else None
    return f"{info.draft_name} - {found.quantization}" if found else info.draft_name


def first_chat_model() -> str:
    """The model a first chat starts on: the offline instruct model SmolLM2 where it is installed
    (the built-in Gemma is a base model that continues text), else Gemma (docs/first-chat-model.md)."""
    import importlib.util

    from app.library.default_model import SMOLLM2_PACKAGE

    return "smollm2" if importlib.util.find_spec(SMOLLM2_PACKAGE) is not None else "default"


class EnginePresenter(QObject):
    """The loaded pair and the speed-up choice; the header and Compare follow its signals."""

    speculation_changed = Signal(object)  # SpeculationView
    pair_changed = Signal(object)  # PairView
    loading_finished = Signal()  # the engine loaded, failed or died: no load in progress
    notice_changed = Signal(str, bool)  # a load that failed or an engine that died, in words

    def __init__(
        self,
        controller: EngineController,
        settings: Callable[[], Settings],
        update_settings: Callable[[Settings], None],
        model: str | None = None,
        draft: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        """model/draft override the saved choice for this session (the command line's --model/--draft)."""
        super().__init__(parent)
        self.controller = controller
        self._settings = settings
        self._update = update_settings
        self._model_override = model
        self._draft_override = DraftChoice.parse(draft) if draft is not None else None
        self.speculation = SpeculationView(_kind(self.draft), _kind(self.draft), True)
        c = controller
        c.engine_loaded.connect(self.on_controller_engine_loaded)
        c.engine_failed.connect(self.on_controller_engine_failed)
        c.engine_died.connect(self.on_controller_engine_died)
        c.draft_changed.connect(self.on_controller_draft_changed)
        c.draft_failed.connect(self.on_controller_draft_failed)

    @property
    def draft(self) -> DraftChoice:
        """The draft to load: the command line's for this session, else the saved choice."""
        return self._draft_override or self._settings().draft

    def start_engine(self) -> None:
        """(Re)load the engine: a server (Settings → Engine) or this computer, with the chosen pair."""
        from app.host.remote_worker import RemoteTarget

        s = self._settings()
        remote = RemoteTarget(s.remote_url, s.remote_api_key, s.remote_model) if s.is_remote else None
        self.controller.use_remote(remote)
        self._show_speculation(can_switch=remote is None)
        if self._draft_override is not None:
            s = dataclasses.replace(s, draft=self._draft_override)
        self.controller.load(s.engine_config(self.model_key()))

    def _show_speculation(
        self,
        draft: DraftChoice | None = None,
        in_effect: Speculation | None = None,
        can_switch: bool | None = None,
    ) -> None:
        """Change the one speculation state (what is not given stays) and announce it."""
        now = self.speculation
        choice = now.choice if draft is None else _kind(draft)
        if draft is not None and choice is not SpeedUp.NONE and self._settings().speed_up is SpeedUp.AUTO:
            choice = SpeedUp.AUTO
        shown = SpeedUp(in_effect) if in_effect is not None else now.in_effect if draft is None else choice
        self.speculation = SpeculationView(
            choice, shown, now.can_switch if can_switch is None else can_switch
        )
        self.speculation_changed.emit(self.speculation)

    def set_speculation(self, choice: DraftChoice, chosen: SpeedUp | None = None) -> None:
        """Switch to plain decoding, n-gram lookup or a draft model; applies from the next reply.
        chosen: the header's choice that made it (AUTO: "Automatic", which the header then
        shows); None: the draft's kind."""
        self._draft_override = None
        self._update(self._settings().with_draft(choice, chosen if chosen is not None else _kind(choice)))
        self._show_speculation(choice)
        self.pair_changed.emit(PairView("Switching the speed-up… (applies from the next reply)"))
        self.controller.supervisor.set_draft(choice)  # (applies from the next reply)

    def has_draft_model(self) -> bool:
        """Whether a draft model was chosen before and is still there."""
        path = self._settings().draft_model_path
        return bool(path) and Path(str(path)).exists()

    def choose_speculation(self, kind: SpeedUp) -> bool:
        """The header's choice (DRAFT: the draft model chosen last; Automatic: that draft model and
        the text, or the text alone where there is none or it was measured not to pay here). False
        when there is no draft model to switch to: the window asks for a file."""
        model = (
            DraftChoice.of_model(str(self._settings().draft_model_path)) if self.has_draft_model() else None
        )
        match SpeedUp(kind):
            case SpeedUp.AUTO:
                verdict = None
                if model is not None:
                    from app.library.measure import figures_here

                    # Measured here before (stand-ins, the files known by name): a draft that does
                    # not pay is not even loaded.
                    here = figures_here(Path(self.model_key()).name, Path(model.model).name)
                    verdict = here.verdict if here is not None else None
                    if verdict is not None and not verdict.pays:
                        model = None
                self.set_speculation(model or NGRAM_LOOKUP, SpeedUp.AUTO)
                if verdict is not None:
                    self.pair_changed.emit(PairView(auto_measured_words(verdict)))
            case SpeedUp.NONE:
                self.set_speculation(PLAIN_DECODING)
            case SpeedUp.NGRAM:
                self.set_speculation(NGRAM_LOOKUP)
            case SpeedUp.DRAFT:
                if model is None:
                    return False
                self.set_speculation(model)
            case unreachable:
                assert_never(unreachable)
        return True

    def next_speculation(self) -> SpeedUp:
        """The kind after the current one: off -> n-gram -> the draft model (when one exists) -> off."""
        kinds = [SpeedUp.NONE, SpeedUp.NGRAM]
        if self.has_draft_model():
            kinds.append(SpeedUp.DRAFT)
        current = self.speculation.choice
        return kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else SpeedUp.NONE

    def reshow_speculation(self) -> None:
        """The toolbar went out of step (a file dialog cancelled): show the choice again."""
        self._show_speculation(self.draft)

    def model_key(self) -> str:
        """The model in use as the model picker names it: a path, or a built-in model's name."""
        return self._model_override or self._settings().model_path or first_chat_model()

    def choose_model(self, model: ModelSpec) -> None:
        """The header's model picker: this model, with the speed-up chosen now (a draft model
        gives way to the text: it was chosen for the model before)."""
        draft = self._settings().draft
        if draft.model:
            draft = NGRAM_LOOKUP  # a draft model belongs to the target it was chosen for
        self.choose_pair(model.text, draft)

    def choose_pair(self, target_path: str, draft: DraftChoice) -> None:
        """A pair from the Models page (or the welcome panel's download): saved, then loaded
        (Automatic stays chosen where it was)."""
        self._model_override = self._draft_override = None
        self._update(dataclasses.replace(self._settings().with_draft(draft), model_path=target_path))
        self._show_speculation(draft)
        self.start_engine()

    def _show_pair(self, info: EngineInfo | None, problem: str = "") -> None:
        if info is None:
            self.pair_changed.emit(PairView(problem or "No model loaded", is_problem=bool(problem)))
            return
        text = pair_words(info)
        if problem:
            text += f" — {problem}"
        is_problem = bool(problem) or info.draft_refusal is not None
        says_more = (
            is_problem
            or info.server
            or info.speculation is Speculation.DRAFT
            or info.speculation_off is SpeculationOff.CANNOT_ROLL_BACK
        )
        self.pair_changed.emit(
            PairView(
                text,
                is_problem=is_problem,
                restates=None if says_more else SpeedUp(info.speculation),
                tooltip=f"Target: {info.target_path}"
                + (f"\nDraft: {info.draft.text}" if info.draft != PLAIN_DECODING else ""),
                title=f"Tandem — {model_name(Path(info.target_path), info.target_name)}",
            )
        )

    def on_controller_engine_loaded(self, info: EngineInfo) -> None:
        self.loading_finished.emit()
        self.on_controller_draft_changed(info)

    def on_controller_engine_failed(self, failure: Failure) -> None:
        words = failure_words(failure)
        self.loading_finished.emit()
        # The header says it in three words (its row has room for little more: a server's error
        # was cut mid-word, "Model not loaded: N"); why is the notice's, whole, and the tooltip's.
        self.pair_changed.emit(PairView("Model not loaded", is_problem=True, tooltip=words))
        self.notice_changed.emit(f"The model could not be loaded: {words}", True)
        raise_if_unexpected(failure)

    def on_controller_engine_died(self, failure: Failure) -> None:
        self.loading_finished.emit()
        self._show_pair(None, "Engine stopped; the next message starts a fresh one")
        self.notice_changed.emit(failure_words(failure), True)

    def on_controller_draft_changed(self, info: EngineInfo) -> None:
        self._show_pair(info)
        self._show_speculation(info.draft, in_effect=info.speculation)

    def on_controller_draft_failed(self, failure: Failure) -> None:
        info = self.controller.info
        self._show_pair(info, f"Speed-up unchanged: {failure_words(failure)}")
        if info is not None:  # back to the draft in use (the one that failed stays the last chosen)
            s = self._settings()
            self._update(dataclasses.replace(s.with_draft(info.draft), draft_model_path=s.draft_model_path))
            self._show_speculation(info.draft)
        raise_if_unexpected(failure)
