"""Which of Tandem's suggested tasks (the demo tasks and a document's quick actions) a model is
offered, from what its GGUF file says and from the tasks measured on it, never from its name in
Tandem's list: the same file opened from disk is offered what it is offered built in.

The rule, in order:
1. A file with no chat template (or one that calls itself a base model) is a base model: it
   continues text rather than doing what it is asked (Gemma 3 270M base gave the note back
   unchanged, docs/first-chat-model.md). No task.
2. A model measured on the tasks (MEASURED: the same architecture and parameter count, so any
   quantisation of it) is offered the ones it was seen to do; the others need a larger model.
3. Any other instruct model is offered every task: Tandem cannot know, and a reply shows it.

A file Tandem cannot read (a server's model, a file gone) is offered every task.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class ModelAbility:
    """What a GGUF file says of the model in it, for the tasks."""

    name: str
    architecture: str
    n_params: int
    has_chat_template: bool
    says_base: bool  # its name or fine-tune says "base"
    quantization: str = ""  # as its tensors say ("Q4_K_M", "F16"): two copies of one model told apart

    @property
    def is_base(self) -> bool:
        return self.says_base or not self.has_chat_template


@dataclass(frozen=True)
class MeasuredModel:
    """A model the suggested tasks were run on (docs/first-chat-model.md, "What each model is
    offered"), known by its architecture and parameter count (the same in every quantisation)."""

    label: str
    architecture: str
    n_params: int
    done: frozenset[str]


# SmolLM2-135M-Instruct (134,515,008 parameters): the paragraph back; the note's mistakes kept,
# nothing renamed, broken French, a looping fix (2026-12-05/06, greedy, "Edit or copy text").
MEASURED = (
    MeasuredModel("SmolLM2 135M Instruct", "llama", 134_515_008, frozenset({"Repeat a paragraph exactly"})),
)
SAME_SIZE = 0.02  # parameter counts within 2% of each other: the same model (embeddings tied or not)


def measured(ability: ModelAbility) -> MeasuredModel | None:
    same = (m for m in MEASURED if m.architecture == ability.architecture)
    return next((m for m in same if abs(ability.n_params - m.n_params) <= SAME_SIZE * m.n_params), None)


_BASE = re.compile(r"\bbase\b", re.IGNORECASE)


@lru_cache(maxsize=64)
def _read(path: str, mtime_ns: int, size: int) -> ModelAbility | None:  # read again once changed
    from app.library.catalog import local_model
    from engine.errors import TandemError

    try:
        info = local_model(Path(path)).info  # the header (no Qt, no engine here)
    except (TandemError, OSError, ValueError):
        return None
    if info is None:
        return None
    said = " ".join(
        str(info.metadata.get(k) or "") for k in ("general.name", "general.finetune", "general.basename")
    )
    return ModelAbility(
        name=info.name,
        architecture=info.architecture,
        n_params=info.n_params,
        has_chat_template=info.chat_template is not None,
        says_base=bool(_BASE.search(said)),
        quantization=info.quantization.removeprefix("ALL_"),
    )


def model_file(model: str | None) -> Path | None:
    """The GGUF file of the model in use: a path, or a built-in model's file (where it is)."""
    if not model:
        return None
    from app.library.model_spec import Embedded

    try:
        embedded = Embedded(model)
    except ValueError:
        return Path(model).expanduser()
    from app.library.default_model import DEFAULT_MODEL_NAME, smollm2_model
    from app.paths import models_dir
    from engine.errors import TandemError

    try:
        return smollm2_model() if embedded is Embedded.SMOLLM2 else models_dir() / DEFAULT_MODEL_NAME
    except (TandemError, OSError):
        return None


def model_ability(model: str | None) -> ModelAbility | None:
    """What the model's file says (model: a path or a built-in model's name); None where it
    cannot be read."""
    path = model_file(model)
    try:
        stat = path.stat() if path is not None else None
    except OSError:
        return None
    return _read(str(path), stat.st_mtime_ns, stat.st_size) if stat is not None else None


def task_refusal(ability: ModelAbility | None, task: str) -> str:
    """Why the model is not offered this task (its title), a sentence for the greyed control's
    tooltip; "" where it is offered."""
    if ability is None:
        return ""
    if ability.is_base:
        return f"{base_model_words(ability)}: it continues text rather than doing what it is asked. An instruct model does this task."
    seen = measured(ability)
    if seen is not None and task not in seen.done:
        return f"Needs a larger model: {seen.label} was seen to fail this task (docs/first-chat-model.md)."
    return ""


def base_model_words(ability: ModelAbility, name: str = "") -> str:
    """ "Gemma 3 270m is a base model (its file has no chat template)"."""
    why = "its file has no chat template" if not ability.has_chat_template else "so its file says"
    return f"{name or ability.name} is a base model ({why})"


def refusals_line(ability: ModelAbility | None, model_name: str, tasks: list[str]) -> str:
    """The one line below the greyed tasks (they are greyed just above it, so it does not name them)."""
    which = "The greyed task needs" if len(tasks) == 1 else "The greyed tasks need"
    if ability is not None and ability.is_base:
        return f"{which} an instruct model: {base_model_words(ability, model_name)}."
    return f"{which} a larger model than {model_name}."
