"""What generation yields: small frozen dataclasses, safe to pickle across a process pipe."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Literal

StopReason = Literal["length", "eos", "stop", "cancelled", "context"]


class Speculation(StrEnum):
    """What drafts for the target: the one name of it, from the command line to the window."""

    NONE = "none"  # plain decoding
    NGRAM = "ngram"  # n-gram lookup in the text so far (and earlier replies)
    DRAFT = "draft"  # a draft model


class DraftingState(StrEnum):
    """Why speculation is not drafting right now, as data (Stats.note says it in words)."""

    DRAFTING = ""  # nothing to say: drafting as asked, or speculation is off
    SHORT_REPLY = "short_reply"  # the reply is too short to repay loading the draft model
    DRAFT_LOAD_FAILED = "draft_load_failed"  # the draft model could not be loaded
    DRAFT_TOO_SLOW = "draft_too_slow"  # the draft model cannot beat plain decoding here
    SUSPENDED = "suspended"  # drafts stopped paying; re-probed after a back-off


class DraftSource(StrEnum):
    """Where a drafted stretch came from (the target accepted it either way)."""

    NONE = ""  # not drafted: the target's own tokens
    TEXT = "text"  # an n-gram match in the conversation so far (the reply itself included)
    DOCUMENT = "document"  # an n-gram match in an attached document
    MEMORY = "memory"  # an earlier reply (engine.text_index)
    MODEL = "model"  # the draft model


@dataclass(frozen=True)
class TextPiece:
    """Text produced by generation. is_draft: the draft proposed it and the target accepted it;
    source: where that draft came from (DraftSource.NONE for the target's own text)."""

    text: str
    n_tokens: int
    is_draft: bool
    source: DraftSource = DraftSource.NONE


@dataclass(frozen=True)
class Stats:
    """A snapshot of one reply's numbers so far."""

    speculation: Speculation
    n_prompt_tokens: int  # prompt tokens of this request
    n_prefilled: int  # of those, decoded now (the rest were reused from the cache)
    n_generated: int
    n_drafted: int
    n_accepted: int
    n_steps: int  # verify batches (plain decoding: one per token)
    n_steps_with_draft: int
    prefill_s: float
    decode_s: float
    llama_s: float  # time spent inside llama.cpp (decodes), prefill and decode
    draft_max: int  # the draft length in use at the time of this snapshot (0 = plain decoding)
    step_overhead_ms_median: float = 0.0  # time per step spent outside llama.cpp
    note: str = ""  # a state worth showing, e.g. why speculation is not drafting
    note_kind: DraftingState = DraftingState.DRAFTING  # the same state as data: branch on this
    # Plain decoding's speed on this machine now, from the 1-row steps the engine times itself
    # (None before any): the speedup can be estimated before any plain run was measured.
    plain_tokens_per_s_est: float | None = None
    # A draft model's loading and first reading of the prompt (within prefill_s, or decode_s
    # where it was first needed mid-reply).
    draft_catch_up_s: float = 0.0
    # Of n_drafted and n_accepted: drafts from n-gram matches in the text beside a draft model.
    n_drafted_text: int = 0
    n_accepted_text: int = 0
    # Of n_drafted and n_accepted: drafts from earlier replies (engine.text_index).
    n_drafted_memory: int = 0
    n_accepted_memory: int = 0
    # Of n_drafted and n_accepted: drafts from n-gram matches in attached documents.
    n_drafted_document: int = 0
    n_accepted_document: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens accepted per step that had a draft."""
        return self.n_accepted / self.n_steps_with_draft if self.n_steps_with_draft else 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.n_prefilled / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.n_generated / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def llama_fraction(self) -> float:
        return self.llama_s / self.total_s if self.total_s > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "speculation": str(self.speculation),
            "n_prompt_tokens": self.n_prompt_tokens,
            "n_prefilled": self.n_prefilled,
            "n_generated": self.n_generated,
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "n_steps": self.n_steps,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_length": round(self.mean_accepted_length, 3),
            "prefill_s": round(self.prefill_s, 4),
            "decode_s": round(self.decode_s, 4),
            "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 2),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2),
            "llama_s": round(self.llama_s, 4),
            "llama_fraction": round(self.llama_fraction, 4),
            "step_overhead_ms_median": round(self.step_overhead_ms_median, 4),
            "note": self.note,
            "note_kind": str(self.note_kind),
            "plain_tokens_per_s_est": (
                round(self.plain_tokens_per_s_est, 2) if self.plain_tokens_per_s_est else None
            ),
            "draft_catch_up_s": round(self.draft_catch_up_s, 4),
            "n_drafted_text": self.n_drafted_text,
            "n_accepted_text": self.n_accepted_text,
            "n_drafted_memory": self.n_drafted_memory,
            "n_accepted_memory": self.n_accepted_memory,
            "n_drafted_document": self.n_drafted_document,
            "n_accepted_document": self.n_accepted_document,
        }


def _number(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class StatsRecord:
    """One reply's numbers as they are kept and shown: a Stats snapshot with its rates worked out
    and rounded (Stats.as_dict), how the reply ended and the plain speed it is compared with.

    It is what the conversation store holds as JSON (`as_dict`), read back by `from_dict`, which
    takes any record older code wrote (a missing number reads as 0, a missing rate as unknown)
    and keeps the keys it does not know (e.g. the window's sparkline) in `extras`."""

    speculation: Speculation = Speculation.NONE
    n_prompt_tokens: int = 0
    n_prefilled: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_steps: int = 0
    n_steps_with_draft: int = 0  # 0 also where unknown (a server does not say; older records)
    acceptance_rate: float = 0.0
    mean_accepted_length: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    prefill_tokens_per_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    llama_s: float = 0.0
    llama_fraction: float = 0.0
    step_overhead_ms_median: float = 0.0
    note: str = ""
    note_kind: str = ""  # a DraftingState value
    plain_tokens_per_s_est: float | None = None
    draft_catch_up_s: float = 0.0
    n_drafted_text: int = 0
    n_accepted_text: int = 0
    n_drafted_memory: int = 0
    n_accepted_memory: int = 0
    n_drafted_document: int = 0
    n_accepted_document: int = 0
    stop_reason: str | None = None  # a StopReason, or "interrupted"; None while streaming
    plain_tokens_per_s: float | None = None  # the measured plain speed it is compared with
    extras: Mapping[str, Any] = field(default_factory=dict)  # keys kept as they were

    @classmethod
    def of(cls, stats: Stats, stop_reason: str | None = None, **extras: Any) -> StatsRecord:
        """A snapshot as a record, with exactly the numbers `as_dict` stores."""
        record = stats.as_dict()
        if stop_reason is not None:
            record["stop_reason"] = stop_reason
        return cls.from_dict({**record, **extras})

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> StatsRecord:
        values: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        known = {f.name: f for f in fields(cls) if f.name != "extras"}
        for key, value in record.items():
            f = known.get(key)
            if f is None:
                extras[key] = value
            elif key == "speculation":
                values[key] = Speculation(value) if value in tuple(Speculation) else Speculation.NONE
            elif key in ("note", "note_kind"):
                values[key] = str(value) if value is not None else f.default
            elif key == "stop_reason":
                values[key] = value if isinstance(value, str) else None
            elif key in ("plain_tokens_per_s_est", "plain_tokens_per_s"):
                values[key] = _number(value, 0.0) or None
            elif isinstance(f.default, int):
                values[key] = _count(value)
            else:
                values[key] = _number(value, 0.0)
        return cls(**values, extras=extras)

    def as_dict(self) -> dict[str, Any]:
        """The record as stored: the numbers, then how it ended and its baseline where known."""
        record: dict[str, Any] = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("stop_reason", "plain_tokens_per_s", "extras")
        }
        if self.stop_reason is not None:
            record["stop_reason"] = self.stop_reason
        if self.plain_tokens_per_s is not None:
            record["plain_tokens_per_s"] = self.plain_tokens_per_s
        return {**record, **self.extras}

    @property
    def is_speculative(self) -> bool:
        return self.speculation is not Speculation.NONE


@dataclass(frozen=True)
class Finished:
    """The last event of a reply."""

    stop_reason: StopReason
    text: str
    token_ids: tuple[int, ...]
    stats: Stats


Event = TextPiece | Stats | Finished
