"""Stopping a reply that repeats itself: the same stretch of tokens, again and again.

A small model asked to edit a note can fall into a loop ("I've added a comma after "morning"…"
thirty times until the token cap): nothing new is written and the user waits for the cap. The
generation loop hands each emitted token to a LoopGuard; it says when the reply's tail is one
stretch repeated `min_repeats` times in a row, covering at least `min_span` tokens (so a short
motif, "- - - -" or "0, 0, 0,", has to run long before it counts, and a sentence is stopped at
its fourth telling). The reply then ends with the stop reason "repetition" (engine.events).

How: for each period p up to `max_period`, run[p] counts how many tokens in a row equal the
token p before them. The last run[p] + p tokens are one stretch of p tokens repeated, so the
tail is a loop when run[p] + p >= max(min_repeats * p, min_span). One comparison per period a
token, done as one numpy comparison over a ring of recent tokens.
"""

from __future__ import annotations

import numpy as np

MAX_PERIOD = 200  # the longest stretch looked for, in tokens (a long sentence or a short paragraph)
MIN_REPEATS = 4  # told this many times in a row
MIN_SPAN = 64  # ...covering at least this many tokens


class LoopGuard:
    def __init__(
        self, max_period: int = MAX_PERIOD, min_repeats: int = MIN_REPEATS, min_span: int = MIN_SPAN
    ) -> None:
        self.max_period = max_period
        self.min_repeats = min_repeats
        self.min_span = min_span
        self._periods = np.arange(1, max_period + 1)
        # What the tail must reach, per period: max(min_repeats * p, min_span) tokens.
        self._needed = np.maximum(min_repeats * self._periods, min_span)
        self.reset()

    def reset(self) -> None:
        """A new reply: nothing seen yet."""
        self._ring = np.full(self.max_period + 1, -1, dtype=np.int64)  # the last tokens, newest at _n % len
        self._n = 0
        self._run = np.zeros(self.max_period, dtype=np.int64)
        self.period = 0  # the repeated stretch's length in tokens, once a loop is found

    def add(self, token: int) -> bool:
        """The next emitted token; True where the reply has become a loop."""
        size = len(self._ring)
        back = self._ring[(self._n - self._periods) % size]  # the token p before this one, per p
        same = (back == token) & (self._periods <= self._n)
        self._run = np.where(same, self._run + 1, 0)
        self._ring[self._n % size] = token
        self._n += 1
        looped = np.nonzero(self._run + self._periods >= self._needed)[0]
        if looped.size == 0:
            return False
        self.period = int(looped[0]) + 1
        return True
