"""Why a reply would read again what the model had read before: the conversation's side of it.

The engine sees only tokens: where the prompt stops matching what its cache holds
(engine.reading.cache_use). What changed in the conversation to cause that is known here, by
comparing the request with the one the model read last: another conversation, a new system
prompt (a preset sets one), an edited earlier message, older turns left out to fit. A break
inside the last reply is none of these: its text is read back as the conversation stores it,
which may differ from the tokens the model wrote by a token or two (engine.events.Reread.NONE).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.host.messages import ChatTurn
from engine.events import Reread


@dataclass(frozen=True)
class ReadConversation:
    """What a chat request asked the model to read, as far as reuse goes."""

    history_key: str
    system_prompt: str
    turns: tuple[ChatTurn, ...]
    n_dropped: int


def reread_reason(before: ReadConversation | None, now: ReadConversation | None) -> Reread:
    """The reason to give where the cache held text the new prompt does not continue."""
    if before is None or now is None:
        return Reread.CHANGED
    if before.history_key != now.history_key:
        return Reread.OTHER_CONVERSATION
    if before.system_prompt != now.system_prompt:
        return Reread.SYSTEM_PROMPT
    if before.n_dropped != now.n_dropped:
        return Reread.OLDEST_LEFT_OUT
    # The turns both prompts hold before the new message (a follow-up's earlier ones, an edit or
    # a regenerate's own): one that differs was edited.
    shared = min(len(before.turns), len(now.turns) - 1)
    if before.turns[:shared] != now.turns[:shared]:
        return Reread.EARLIER_MESSAGE
    return Reread.NONE
