"""What generation yields: small frozen dataclasses, safe to pickle across a process pipe."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

StopReason = Literal["length", "eos", "stop", "cancelled", "context"]
SpeculationKind = Literal["none", "ngram", "draft"]


class DraftingState(StrEnum):
    """Why speculation is not drafting right now, as data (Stats.note says it in words)."""

    DRAFTING = ""  # nothing to say: drafting as asked, or speculation is off
    SHORT_REPLY = "short_reply"  # the reply is too short to repay loading the draft model
    DRAFT_LOAD_FAILED = "draft_load_failed"  # the draft model could not be loaded
    DRAFT_TOO_SLOW = "draft_too_slow"  # the draft model cannot beat plain decoding here
    SUSPENDED = "suspended"  # drafts stopped paying; re-probed after a back-off


@dataclass(frozen=True)
class TextPiece:
    """Text produced by generation. is_draft: the draft proposed it and the target accepted it."""

    text: str
    n_tokens: int
    is_draft: bool


@dataclass(frozen=True)
class Stats:
    """A snapshot of one reply's numbers so far."""

    speculation: SpeculationKind
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
    # Of n_drafted and n_accepted: drafts from earlier replies (engine.reply_memory).
    n_drafted_memory: int = 0
    n_accepted_memory: int = 0

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
            "speculation": self.speculation,
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
        }


@dataclass(frozen=True)
class Finished:
    """The last event of a reply."""

    stop_reason: StopReason
    text: str
    token_ids: tuple[int, ...]
    stats: Stats


Event = TextPiece | Stats | Finished
