"""Errors a user can act on.

Every error carries one sentence written for the person at the keyboard. Only the edges
(the CLI, the app's worker) turn them into text; inside the engine they stay typed.
"""

from __future__ import annotations


class TandemError(Exception):
    """Base of every error Tandem reports to a user."""


class ModelFileError(TandemError):
    """A model file cannot be used: missing, empty, not GGUF, truncated, unknown architecture."""


class ModelNotFoundError(ModelFileError):
    pass


class EmptyModelError(ModelFileError):
    pass


class NotGGUFError(ModelFileError):
    pass


class TruncatedModelError(ModelFileError):
    pass


class UnsupportedArchitectureError(ModelFileError):
    pass


class ModelLoadError(ModelFileError):
    """llama.cpp refused a file that passed Tandem's own checks."""


class IncompatiblePairError(TandemError):
    """The draft's vocabulary does not match the target's."""

    def __init__(self, rule: str, target_value: object, draft_value: object) -> None:
        self.rule = rule
        self.target_value = target_value
        self.draft_value = draft_value
        super().__init__(
            f"the draft model cannot draft for this target: {rule} differs "
            f"(target: {target_value!r}, draft: {draft_value!r})"
        )


class PromptTooLongError(TandemError):
    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"the prompt is {n_prompt_tokens} tokens long but the context holds only {n_ctx}; "
            "shorten the prompt or raise --ctx"
        )


class OutOfMemoryError(TandemError):
    pass


class DecodeError(TandemError):
    """llama_decode failed for a reason other than a full context."""


class DownloadError(TandemError):
    """A model download failed; the message says why and what to do."""


class EngineCrashedError(TandemError):
    """The engine's worker process died (native crash, killed, out of memory)."""
