"""Failures as the window says them, and the bugs it does not swallow (shared by the presenters)."""

from __future__ import annotations

import os

from engine.errors import ContextFit, ErrorKind, Failure

STRICT_ENV = "TANDEM_STRICT"  # set (the tests set it): a bug reported by the engine's side raises


class UnexpectedFailure(RuntimeError):
    """A failure of kind UNEXPECTED (a bug in the engine's side, not a user's problem), raised
    by the presenter where TANDEM_STRICT is set, after the window has shown it: under pytest a
    bug fails the test instead of becoming one more notice."""


def raise_if_unexpected(failure: Failure) -> None:
    if failure.kind is ErrorKind.UNEXPECTED and os.environ.get(STRICT_ENV):
        raise UnexpectedFailure(failure.sentence)


def context_words(fit: ContextFit) -> str:
    """A prompt too long for the context, from its numbers: what it needs, what the context holds,
    and what this computer allows (the window offers the larger context as a button)."""
    from app.library.documents import format_size

    left_out = f", with the {fit.n_dropped} oldest messages left out," if fit.n_dropped else ""
    said = (
        f"this message and its documents need {fit.n_needed:,} tokens{left_out} ({fit.n_prompt:,} to read, "
        f"{fit.n_reply:,} for the reply); the model's context holds {fit.n_ctx:,}."
    )
    if fit.n_ctx_offer:
        return (
            f"{said} A context of {fit.n_ctx_offer:,} tokens fits in this computer's memory: its cache "
            f"takes about {format_size(fit.offer_bytes)} of the {format_size(fit.free_bytes)} free."
        )
    if fit.n_ctx_limit:
        return (
            f"{said} This model and this computer's free memory allow at most {fit.n_ctx_limit:,}: "
            "attach less, or ask for a shorter reply."
        )
    return f"{said} Attach less, or ask for a shorter reply."


def failure_words(failure: Failure) -> str:
    """A failure as the window says it: a refused pair from its rule and both values, a prompt
    too long from its numbers, any other from its sentence."""
    if failure.context is not None and not failure.context.fits:
        return context_words(failure.context)
    pair = failure.pair
    if failure.kind is ErrorKind.INCOMPATIBLE_PAIR and pair is not None:
        return f"the draft model's vocabulary does not match the target's: {pair.describe()}"
    return failure.sentence
