"""Why the speed-up is off, in words, from the engine's typed reason (app.host.messages.
SpeculationOff): the header says it beside the model, a reply's Details keep it."""

from __future__ import annotations

from app.host.messages import SpeculationOff
from ui.presenters.verdict import member

OFF_REASONS = {
    SpeculationOff.CHOSEN: "the model writes every word itself",
    SpeculationOff.CANNOT_ROLL_BACK: (
        "this model (recurrent or hybrid) cannot take back a wrong guess, which the speed-up needs"
    ),
    SpeculationOff.DRAFT_REFUSED: "the draft model cannot be used with this model",
    SpeculationOff.SERVER: "the server does not say that it guesses ahead",
}

# SpeculationOff's value as a reply's record keeps it (StatsRecord.extras): Details read it back.
OFF_KEY = "speculation_off"


def off_words(value: object) -> str:
    """Why the speed-up is off ("" where it is not, or the reason is not known)."""
    return OFF_REASONS.get(member(SpeculationOff, value), "")
