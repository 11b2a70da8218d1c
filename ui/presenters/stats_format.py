"""Helpers for the speed figures: where a reply's accepted drafts came from, and the dash shown
for a figure not known yet (ui/presenters/words.py says the rest)."""

from __future__ import annotations

from engine.events import DraftSource, Speculation, StatsRecord

DASH = "—"


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
