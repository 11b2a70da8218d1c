"""Failures as the window says them, and the bugs it does not swallow (shared by the presenters)."""

from __future__ import annotations

import os

from engine.errors import ErrorKind, Failure

STRICT_ENV = "TANDEM_STRICT"  # set (the tests set it): a bug reported by the engine's side raises


class UnexpectedFailure(RuntimeError):
    """A failure of kind UNEXPECTED (a bug in the engine's side, not a user's problem), raised
    by the presenter where TANDEM_STRICT is set, after the window has shown it: under pytest a
    bug fails the test instead of becoming one more notice."""


def raise_if_unexpected(failure: Failure) -> None:
    if failure.kind is ErrorKind.UNEXPECTED and os.environ.get(STRICT_ENV):
        raise UnexpectedFailure(failure.sentence)


def failure_words(failure: Failure) -> str:
    """A failure as the window says it: a refused pair from its rule and both values, any other
    from its sentence."""
    pair = failure.pair
    if failure.kind is ErrorKind.INCOMPATIBLE_PAIR and pair is not None:
        return (
            f"the draft model's vocabulary does not match the target's: {pair.rule} differs "
            f"(target: {pair.target_value!r}, draft: {pair.draft_value!r})"
        )
    return failure.sentence
