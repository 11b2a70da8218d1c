"""Errors a user can act on: each carries one sentence written for the person at the keyboard.
Only the edges (the CLI, the app's worker) turn them into text; inside the engine they stay typed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ErrorKind(StrEnum):
    """What kind of error a user met, as data: a window or a client words it, never parses it."""

    MODEL_FILE = "model_file"  # a model file cannot be used (the subclasses below say why)
    MODEL_NOT_FOUND = "model_not_found"
    EMPTY_MODEL = "empty_model"
    NOT_GGUF = "not_gguf"
    TRUNCATED_MODEL = "truncated_model"
    UNSUPPORTED_ARCHITECTURE = "unsupported_architecture"
    MODEL_LOAD = "model_load"
    INCOMPATIBLE_PAIR = "incompatible_pair"
    PROMPT_TOO_LONG = "prompt_too_long"
    OUT_OF_MEMORY = "out_of_memory"
    DECODE = "decode"
    DOWNLOAD = "download"
    RPC = "rpc"
    NO_ENGINE = "no_engine"  # asked of an engine that did not load (the load's error said why)
    ENGINE_STOPPED = "engine_stopped"  # the engine ended before it answered: crashed, closed, replaced
    REMOTE = "remote"  # a server used as the engine could not be reached or refused
    DOCUMENT = "document"  # a file to attach is not a document Tandem can read (app/library/documents.py)
    OTHER = "other"  # a TandemError without a kind of its own
    UNEXPECTED = "unexpected"  # not a TandemError: a bug, logged with its traceback


class TandemError(Exception):
    """Base of every error Tandem reports to a user. kind: what it is, as data."""

    kind: ErrorKind = ErrorKind.OTHER


@dataclass(frozen=True)
class PairRefusal:
    """Why a draft cannot draft for a target: the rule it breaks and both values."""

    rule: str
    target_value: object
    draft_value: object

    def describe(self) -> str:
        return f"{self.rule} differs (target: {self.target_value!r}, draft: {self.draft_value!r})"


@dataclass(frozen=True)
class ContextFit:
    """Whether a message and its documents fit the context, with the numbers to say so."""

    n_prompt: int  # tokens of the prompt: the conversation, its documents and the new message
    n_reply: int  # tokens kept for the reply
    n_ctx: int  # the context now
    n_ctx_offer: int = 0  # a larger context that fits them, within the model and memory (0: none)
    offer_bytes: int = 0  # what that context's cache takes
    n_ctx_limit: int = 0  # the largest context the model and this machine's free memory allow
    free_bytes: int = 0  # memory free now
    n_dropped: int = 0  # the oldest messages left out of the prompt already

    @property
    def n_needed(self) -> int:
        return self.n_prompt + self.n_reply

    @property
    def fits(self) -> bool:
        return self.n_needed <= self.n_ctx


@dataclass(frozen=True)
class Failure:
    """An error as a value that crosses a process pipe: its kind, its sentence and, for a
    refused pair, the rule and both values; for a prompt too long for the context, the numbers."""

    kind: ErrorKind
    sentence: str
    pair: PairRefusal | None = None
    context: ContextFit | None = None

    @classmethod
    def of(cls, error: BaseException, sentence: str | None = None) -> Failure:
        kind = error.kind if isinstance(error, TandemError) else ErrorKind.UNEXPECTED
        pair = error.refusal if isinstance(error, IncompatiblePairError) else None
        context = getattr(error, "fit", None) if isinstance(error, TandemError) else None
        return cls(
            kind,
            str(error) if sentence is None else sentence,
            pair,
            context if isinstance(context, ContextFit) else None,
        )


class ModelFileError(TandemError):
    """A model file cannot be used: missing, empty, not GGUF, truncated, unknown architecture."""

    kind = ErrorKind.MODEL_FILE


class ModelNotFoundError(ModelFileError):
    kind = ErrorKind.MODEL_NOT_FOUND


class EmptyModelError(ModelFileError):
    kind = ErrorKind.EMPTY_MODEL


class NotGGUFError(ModelFileError):
    kind = ErrorKind.NOT_GGUF


class TruncatedModelError(ModelFileError):
    kind = ErrorKind.TRUNCATED_MODEL


class UnsupportedArchitectureError(ModelFileError):
    kind = ErrorKind.UNSUPPORTED_ARCHITECTURE


class ModelLoadError(ModelFileError):
    """llama.cpp refused a file that passed Tandem's own checks."""

    kind = ErrorKind.MODEL_LOAD


class IncompatiblePairError(TandemError):
    """The draft's vocabulary does not match the target's."""

    kind = ErrorKind.INCOMPATIBLE_PAIR

    def __init__(self, rule: str, target_value: object, draft_value: object) -> None:
        self.refusal = PairRefusal(rule, target_value, draft_value)
        super().__init__(f"the draft model cannot draft for this target: {self.refusal.describe()}")


class PromptTooLongError(TandemError):
    kind = ErrorKind.PROMPT_TOO_LONG

    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"the prompt is {n_prompt_tokens} tokens long but the context holds only {n_ctx}; "
            "shorten the prompt or raise --ctx"
        )


class OutOfMemoryError(TandemError):
    kind = ErrorKind.OUT_OF_MEMORY


class DecodeError(TandemError):
    """llama_decode failed for a reason other than a full context."""

    kind = ErrorKind.DECODE


class DownloadError(TandemError):
    """A model download failed; the message says why and what to do."""

    kind = ErrorKind.DOWNLOAD
