"""Choosing "Draft model" in the chat's header: the local models that pair with the model in use
(the pair doctor's vocabulary rules, engine.pairing through app.library.catalog.draft_choices),
smallest first (a draft is worth its speed), then the ones that do not pair, greyed, each with its
rule behind a "why" (the item's tooltip), then any other file. Where none pairs, "Draft model" is
greyed in the header with the reason."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QWidget

from app.library.catalog import LocalModel, format_bytes
from engine.config import DraftChoice
from ui.presenters.words import BUILT_IN_MODELS, model_name

OTHER_FILE = "Another GGUF file…"


@dataclass(frozen=True)
class DraftOption:
    path: Path
    name: str  # as people call it ("Qwen2.5 0.5B Instruct")
    size_bytes: int
    why_not: str = ""  # "" where it pairs; else the rule it breaks, in words

    @property
    def pairs(self) -> bool:
        return not self.why_not


def draft_options(
    target_path: str, opened: Sequence[str] = (), listed: Sequence[LocalModel] | None = None
) -> list[DraftOption]:
    """The local models as drafts for this target: `listed` (the Models page's), else the built-in
    ones and the models folder's, and the files opened with "Open a GGUF file…" (`opened`), each
    file once; those that pair first, smallest first, then those that do not, each with why not.
    Two of one name are told apart by their quantisation ("Gemma 3 270M - F16", "Gemma 3 270M -
    Q4_K_M"). The header's draft menu and the Models page's Draft list are this one list."""
    from app.library.catalog import draft_choices, local_model, scan_local_models
    from ui.presenters.task_ability import model_file

    target = local_model(Path(target_path))
    if target.info is None:
        return []
    # The header's: the models folder's, and the built-in models' files (where they are there).
    built_in = [model_file(key) for key, _ in BUILT_IN_MODELS] if listed is None else []
    candidates = list(scan_local_models() if listed is None else listed)
    others = [*(path for path in built_in if path is not None), *map(Path, opened)]
    for path in others:
        try:
            if path.is_file() and all(m.path.resolve() != path.resolve() for m in candidates):
                candidates.append(local_model(path))
        except OSError:  # gone since it was opened
            continue
    by_path = {m.path.resolve(): m for m in candidates}
    options = [
        DraftOption(
            choice.path,
            model_name(choice.path, choice.name),
            by_path[choice.path.resolve()].size_bytes if choice.path.resolve() in by_path else 0,
            ""
            if choice.is_compatible
            else (choice.refusal.describe() if choice.refusal else choice.problem or ""),
        )
        for choice in draft_choices(target.info, candidates)
    ]
    # Two of one name (and the target's) told apart by their quantisation.
    from ui.chat.model_picker import name_and_quantization, told_apart

    names = told_apart(
        [o.name for o in options] + [model_name(target.path, target.name)],
        [name_and_quantization(path)[1] for path in [*(o.path for o in options), target.path]],
    )
    options = [replace(o, name=name) for o, name in zip(options, names, strict=False)]
    return sorted(options, key=lambda o: (not o.pairs, o.size_bytes))


def no_draft_reason(target_name: str) -> str:
    return (
        f"No model on this computer pairs with {target_name} as its draft: a pair from the Models "
        "page brings one (or choose a file from the Model menu)."
    )


class DraftMenu(QMenu):
    """The drafts for the model in use; emits draft_chosen(DraftChoice) or other_file_requested()."""

    draft_chosen = Signal(object)  # DraftChoice: the draft model chosen
    other_file_requested = Signal()

    def __init__(self, options: list[DraftOption], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("draftMenu")
        self.setToolTipsVisible(True)
        pairing = [o for o in options if o.pairs]
        if not pairing:
            self.addAction("No model on this computer pairs with the model in use").setEnabled(False)
        for option in pairing:
            action = self.addAction(f"{option.name} · {format_bytes(option.size_bytes)}")
            action.setToolTip("Pairs with the model in use: every vocabulary rule holds")
            choice = DraftChoice.of_model(str(option.path))
            action.triggered.connect(lambda _=False, c=choice: self.draft_chosen.emit(c))
        others = [o for o in options if not o.pairs]
        if others:
            self.addSection("Do not pair with the model in use")
            for option in others:
                action = self.addAction(f"{option.name} · why?")
                action.setEnabled(False)
                action.setToolTip(f"Why: the {option.why_not}")  # the rule, on demand
        self.addSeparator()
        other = self.addAction(OTHER_FILE)
        other.triggered.connect(self.other_file_requested)
