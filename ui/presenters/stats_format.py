"""Helpers for the speed figures: the engine's plain-speed estimate where a reply is long enough to
compare, and where a reply's accepted drafts came from (ui/presenters/words.py says the rest)."""

from __future__ import annotations

from engine.events import DraftSource, Speculation, StatsRecord
from ui.presenters.verdict import MIN_TOKENS

DASH = "—"


def plain_estimate(stats: StatsRecord) -> float | None:
    """The engine's own estimate of plain tokens/s, where a reply is long enough to compare (its
    first step weighs too much in a short one)."""
    if stats.n_generated < MIN_TOKENS:
        return None
    estimate = stats.plain_tokens_per_s_est
    return estimate if estimate is not None and estimate > 0 else None


def draft_sources(stats: StatsRecord) -> str:
    """Where the accepted drafts came from: the draft model, attached documents, the text so far
    (n-gram matches), earlier replies (the engine's reply memory). "" where n-gram drafts all came from the text
    (what n-gram means) or there is nothing to tell (nothing accepted; a server, which does not
    say)."""
    accepted = stats.n_accepted
    if not stats.is_speculative or not accepted or not stats.n_steps_with_draft:
        return ""
    memory, document = (stats.from_source(s).n_accepted for s in (DraftSource.MEMORY, DraftSource.DOCUMENT))
    if stats.speculation is not Speculation.DRAFT and not memory and not document:
        return ""
    sources = [
        (stats.from_source(DraftSource.MODEL).n_accepted, "the draft model"),
        (document, "the attached documents"),
        (stats.from_source(DraftSource.TEXT).n_accepted, "the conversation" if document else "the text"),
        (memory, "earlier replies"),
    ]
    return "accepted from " + ", ".join(f"{name} {n / accepted:.0%}" for n, name in sources if n > 0)
