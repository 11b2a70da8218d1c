"""What drafted a step's tokens, and on what evidence: the kinds acceptance is learned per.

Below the drafters and the controller alike: a drafter says which kind its offer is (an Offer),
the controller prices it by that kind's acceptance and answers with a Choice. Integers because
the cost cache stores acceptance under them (engine/costcache.py, format unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class DrafterKind(IntEnum):
    """An n-gram match is as good as it is long; a match of 16 tokens or more is text being copied
    (engine.drafters.NgramDrafter.kind_of), and matches in earlier replies are kept apart from
    matches in the text so far (engine.text_index)."""

    MODEL = 0  # a draft model (costs a decode per drafted token; every other kind is free)
    MATCH_1 = 1  # the text so far: a 1-token match
    MATCH_2 = 2  # ...2 tokens
    MATCH_3_4 = 3  # ...3-4 tokens
    PHRASE = 4  # ...5-15 tokens: a phrase that recurs
    COPY = 5  # ...16 or more: text being copied
    MEMORY_PHRASE = 6  # an earlier reply: a phrase
    MEMORY_COPY = 7  # an earlier reply, 16 tokens or more: a reply being given again


COPY_KINDS = (DrafterKind.COPY, DrafterKind.MEMORY_COPY)
MEMORY_KINDS = (DrafterKind.MEMORY_PHRASE, DrafterKind.MEMORY_COPY)

# Acceptance before anything is measured: a draft model is usually right, a match as good as it
# is long. Optimistic on purpose: one rejected draft corrects an estimate, while a pessimistic
# prior would never try. But 1- and 2-token matches are observed for nothing where not drafted,
# and were right 11-20% and 30-57% of the time in SmolLM2's answers (docs/design-engine.md).
PRIOR_ACCEPT: dict[int, float] = {
    DrafterKind.MODEL: 0.7,
    DrafterKind.MATCH_1: 0.2,
    DrafterKind.MATCH_2: 0.4,
    DrafterKind.MATCH_3_4: 0.7,
    DrafterKind.PHRASE: 0.8,
    DrafterKind.COPY: 0.95,
    DrafterKind.MEMORY_PHRASE: 0.5,
    DrafterKind.MEMORY_COPY: 0.95,
}


@dataclass(frozen=True)
class Offer:
    """What a drafter can draft this step: its kind and how many tokens."""

    kind: DrafterKind
    available: int


@dataclass(frozen=True)
class Choice:
    """A step's draft length and the kind of the offer it drafts from (k 0: a plain step)."""

    k: int
    kind: DrafterKind = DrafterKind.MODEL


PLAIN = Choice(0)
