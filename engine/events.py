"""What generation yields: small frozen dataclasses, safe to pickle across a process pipe."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, Literal

# "repetition": the reply repeated one stretch again and again (engine.loop_guard stopped it).
StopReason = Literal["length", "eos", "stop", "cancelled", "context", "repetition"]


class Speculation(StrEnum):
    """What drafts for the target: the one name of it, from the command line to the window."""

    NONE = "none"  # plain decoding
    NGRAM = "ngram"  # n-gram lookup in the text so far (and earlier replies)
    DRAFT = "draft"  # a draft model


class DraftingState(StrEnum):
    """Why speculation is not drafting right now, as data (Stats.note says it in words)."""

    DRAFTING = ""  # nothing to say: drafting as asked, or speculation is off
    SHORT_REPLY = "short_reply"  # the reply is too short to repay starting the draft model
    DRAFT_LOAD_FAILED = "draft_load_failed"  # the draft model could not be loaded
    DRAFT_TOO_SLOW = "draft_too_slow"  # the draft model cannot beat plain decoding here
    SUSPENDED = "suspended"  # drafts stopped paying; re-probed after a back-off


class Reread(StrEnum):
    """Why a reply read part of its conversation again that the model had read before, rather
    than only what was new (Stats.reread); the window says it in words (ui/presenters)."""

    NONE = ""  # it read only what was new (or nothing had been read before it that could count)
    FIRST = "first"  # nothing read yet: the model's first reply since it loaded (a model swap)
    CHANGED = "changed"  # the prompt differs from what was read, for no reason named below
    SYSTEM_PROMPT = "system_prompt"  # the system prompt (or the preset that sets it) changed
    EARLIER_MESSAGE = "earlier_message"  # an earlier message was edited
    OTHER_CONVERSATION = "other_conversation"  # another conversation was read in between
    OLDEST_LEFT_OUT = "oldest_left_out"  # the oldest turns were left out to fit the context
    CANNOT_TRIM = "cannot_trim"  # a recurrent or hybrid model cannot cut back what it read


@dataclass(frozen=True)
class Reading:
    """A prompt being read, as llama-server's `prompt_progress` counts it: the prompt's tokens
    (total), those reused from what the model had read before (cache), those in the cache now,
    the reused ones included (processed), and the time since the reading began."""

    n_prompt_tokens: int
    n_cached: int
    n_processed: int
    elapsed_s: float
    seconds_left: float | None = None  # at the speed of the latest chunks; None before one
    reread: Reread = Reread.NONE
    # Where the chunk being read now ends: the most the next report can say (0: not known, as
    # from a server). A display that moves the count on between reports stops short of it.
    n_next: int = 0

    @property
    def n_to_read(self) -> int:
        return self.n_prompt_tokens - self.n_cached

    @property
    def fraction(self) -> float:
        """Of what is new, the share read so far."""
        n = self.n_to_read
        return (self.n_processed - self.n_cached) / n if n > 0 else 1.0


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
class SourceCount:
    """Drafted tokens from one DraftSource, and how many of them the target accepted."""

    n_drafted: int = 0
    n_accepted: int = 0

    def __add__(self, other: SourceCount) -> SourceCount:
        return SourceCount(self.n_drafted + other.n_drafted, self.n_accepted + other.n_accepted)


@dataclass(frozen=True)
class DraftSpan:
    """A drafted stretch of a reply's text: characters [start, end), and where the draft came from
    (DraftSource.NONE where that is not known: a reply saved before sources were kept)."""

    start: int
    end: int
    source: DraftSource = DraftSource.NONE


@dataclass(frozen=True)
class ReplyText:
    """A reply's text as shown and stored, with the stretches of it the draft wrote (the reply
    buffer, app/host/reply.py, makes it; the conversation store keeps it)."""

    text: str
    spans: tuple[DraftSpan, ...] = ()  # sorted and disjoint


def known_sources(spans: Sequence[DraftSpan]) -> tuple[str, ...]:
    """The spans' sources, one per span, where all are known (else ())."""
    return tuple(str(s.source) for s in spans) if all(s.source for s in spans) else ()


# The record's names for the per-source counts (as stored, exported and sent since before the
# counts were one mapping): "text" is every draft beside a draft model that the model did not
# write (n-gram matches in the conversation, documents and earlier replies), 0 without one.
_SOURCE_KEYS = ("n_drafted_text", "n_accepted_text", "n_drafted_memory", "n_accepted_memory",
                "n_drafted_document", "n_accepted_document")  # fmt: skip


def _source_count(source: DraftSource | None, name: str) -> Any:
    """A property of Stats: one source's n_drafted or n_accepted (None: every draft beside a draft
    model that the model did not write)."""
    return property(lambda s: getattr(s._beside_model if source is None else s.from_source(source), name))


@dataclass(frozen=True)
class Stats:
    """A snapshot of one reply's numbers so far: the one list of a reply's numbers. The stored
    record (StatsRecord), the worker's counters (engine.speculative) and what the window reads
    (ui.presenters.words) are built from these fields."""

    speculation: Speculation = Speculation.NONE
    n_prompt_tokens: int = 0  # prompt tokens of this request
    n_prefilled: int = 0  # of those, decoded now (the rest were reused from the cache)
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_steps: int = 0  # verify batches (plain decoding: one per token)
    n_steps_with_draft: int = 0  # 0 also where unknown (a server does not say)
    prefill_s: float = 0.0
    decode_s: float = 0.0
    llama_s: float = 0.0  # time spent inside llama.cpp (decodes), prefill and decode
    draft_max: int = 0  # the draft length in use at the time of this snapshot (0 = plain decoding)
    step_overhead_ms_median: float = 0.0  # time per step spent outside llama.cpp
    note: str = ""  # a state worth showing, e.g. why speculation is not drafting
    note_kind: DraftingState = DraftingState.DRAFTING  # the same state as data: branch on this
    # Plain decoding's speed on this machine now, from the 1-row steps the engine times itself
    # (None before any): the speedup can be estimated before any plain run was measured.
    plain_tokens_per_s_est: float | None = None
    # A draft model's loading and first reading of the prompt (within prefill_s, or decode_s
    # where it was first needed mid-reply).
    draft_catch_up_s: float = 0.0
    # Of n_drafted and n_accepted: how many came from each source (sources that drafted nothing
    # are left out). A new DraftSource needs no new field.
    by_source: Mapping[DraftSource, SourceCount] = field(default_factory=dict)
    # Why part of what the model had read was read again (n_prefilled covers it), and the
    # seconds from the request to the reply's first text (0.0: none yet): engine.reading.
    reread: Reread = Reread.NONE
    first_token_s: float = 0.0

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

    def from_source(self, source: DraftSource) -> SourceCount:
        return self.by_source.get(source, SourceCount())

    @property
    def _beside_model(self) -> SourceCount:
        if self.speculation is not Speculation.DRAFT:
            return SourceCount()
        return sum((c for s, c in self.by_source.items() if s is not DraftSource.MODEL), SourceCount())

    # The per-source counts under the record's names (_SOURCE_KEYS).
    n_drafted_text = _source_count(None, "n_drafted")
    n_accepted_text = _source_count(None, "n_accepted")
    n_drafted_memory = _source_count(DraftSource.MEMORY, "n_drafted")
    n_accepted_memory = _source_count(DraftSource.MEMORY, "n_accepted")
    n_drafted_document = _source_count(DraftSource.DOCUMENT, "n_drafted")
    n_accepted_document = _source_count(DraftSource.DOCUMENT, "n_accepted")

    def as_dict(self) -> dict[str, Any]:
        """The numbers as stored and sent: every field (times rounded to 0.1 ms, speeds to 0.01
        token/s), the rates worked out, the per-source counts under the record's names."""
        out: dict[str, Any] = {}
        for f in fields(Stats):
            value = getattr(self, f.name)
            if f.name == "by_source":
                out.update((key, getattr(self, key)) for key in _SOURCE_KEYS)
            elif f.name == "plain_tokens_per_s_est":
                out[f.name] = round(value, 2) if value else None
            elif isinstance(value, StrEnum):
                out[f.name] = str(value)
            elif isinstance(value, float):
                out[f.name] = round(value, 4)
            else:
                out[f.name] = value
        out.update((name, round(getattr(self, name), digits)) for name, digits in _RATES)
        return out


# The rates a record keeps beside the counts, with the digits it keeps of them: worked out from
# a snapshot's counts and times (Stats' properties), given as they are by a server.
_RATES = (("acceptance_rate", 4), ("mean_accepted_length", 3), ("prefill_tokens_per_s", 2),
          ("decode_tokens_per_s", 2), ("llama_fraction", 4))  # fmt: skip


def _number(value: object) -> float:
    """A real, finite number (an int as it is), else 0 (JSON's NaN and Infinity are not)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return 0


_ENUMS: dict[str, type[StrEnum]] = {"speculation": Speculation, "reread": Reread, "note_kind": DraftingState}


def _by_source(speculation: Speculation, counts: Mapping[str, int]) -> dict[DraftSource, SourceCount]:
    """The per-source mapping from a record's counts (its n_drafted and n_accepted, _SOURCE_KEYS):
    what is not named came from the draft model (beside one) or the conversation (n-gram)."""
    kept: dict[DraftSource, SourceCount] = {}
    for source in (DraftSource.MEMORY, DraftSource.DOCUMENT):
        kept[source] = SourceCount(counts[f"n_drafted_{source}"], counts[f"n_accepted_{source}"])
    total = SourceCount(counts["n_drafted"], counts["n_accepted"])
    if speculation is Speculation.DRAFT:
        text = SourceCount(counts["n_drafted_text"], counts["n_accepted_text"])
        kept[DraftSource.MODEL] = SourceCount(
            total.n_drafted - text.n_drafted, total.n_accepted - text.n_accepted
        )
        total = text
    if speculation is not Speculation.NONE:
        named = kept[DraftSource.MEMORY] + kept[DraftSource.DOCUMENT]
        kept[DraftSource.TEXT] = SourceCount(
            max(0, total.n_drafted - named.n_drafted), max(0, total.n_accepted - named.n_accepted)
        )
    return {s: c for s, c in kept.items() if c.n_drafted > 0 or c.n_accepted > 0}


@dataclass(frozen=True)
class StatsRecord(Stats):
    """One reply's numbers as kept and shown: a Stats snapshot with its rates as fields (a server
    gives its rates, not always the times behind them), how the reply ended and the plain speed it
    is compared with. The store keeps it as JSON (`as_dict`); `from_dict` reads any record older
    code wrote (a missing number reads as 0) and keeps keys it does not know in `extras`."""

    acceptance_rate: float = 0.0
    mean_accepted_length: float = 0.0
    prefill_tokens_per_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    llama_fraction: float = 0.0
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
        known = {f.name: f for f in fields(cls) if f.name not in ("extras", "by_source")}
        counts = dict.fromkeys(("n_drafted", "n_accepted", *_SOURCE_KEYS), 0)
        for key, value in record.items():
            f = known.get(key)
            if key in _SOURCE_KEYS:
                counts[key] = int(_number(value))
            elif f is None:
                extras[key] = value
            elif key in _ENUMS:
                values[key] = _ENUMS[key](value) if value in tuple(_ENUMS[key]) else f.default
            elif key == "note":
                values[key] = str(value) if value is not None else f.default
            elif key == "stop_reason":
                values[key] = value if isinstance(value, str) else None
            elif key in ("plain_tokens_per_s_est", "plain_tokens_per_s"):
                values[key] = float(_number(value)) or None
            elif isinstance(f.default, int):
                values[key] = int(_number(value))
            else:
                values[key] = float(_number(value))
        counts.update((k, values[k]) for k in ("n_drafted", "n_accepted") if k in values)
        by_source = _by_source(values.get("speculation", Speculation.NONE), counts)
        return cls(**values, by_source=by_source, extras=extras)

    def as_dict(self) -> dict[str, Any]:
        """The record as stored: the numbers, then how it ended and its baseline where known."""
        record = super().as_dict()
        record.update((name, getattr(self, name)) for name, _ in _RATES)
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
