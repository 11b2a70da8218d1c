"""Earlier replies, kept for drafting: SuffixDecoding's idea (Oliaro et al., 2024) at a desktop's scale.

A reply often says again what an earlier one said: Regenerate, the same question asked in a new
conversation, an API client sending much the same request. The n-gram drafter searches the text
so far; this memory adds the replies the engine gave before, each kept with the end of its
prompt, so a regenerated reply is drafted from its first token. It holds token ids of one
target model (the engine owns one per model) and lives as long as the engine: nothing is
written to disk.

Bounded: when the replies kept pass MAX_TOKENS, the oldest are dropped (down to three quarters,
so the index is rebuilt once in a while, not after every reply).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

_END = -1  # after each entry in the flat token list: no token id equals it


class ReplyMemory:
    MAX_TOKENS = 32_768
    PROMPT_TAIL = 16  # prompt tokens kept before each reply: enough to tell a regenerate apart
    KEY_SIZES = (16, 8, 4)  # n-gram lengths indexed, longest first; matches are then extended back
    MIN_MATCH = 4

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._entries: deque[list[int]] = deque()  # prompt tail + reply, oldest first
        self._n_tokens = 0
        self._tokens: list[int] = []  # every entry, each followed by _END
        # _index[n][ngram] = position after its latest occurrence (where its continuation starts).
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        self._reindex()

    def __len__(self) -> int:
        """Replies kept."""
        return len(self._entries)

    def add(self, prompt: Sequence[int], reply: Sequence[int]) -> None:
        """Keep a finished reply, with the end of the prompt it answered."""
        if not reply:
            return
        entry = [*prompt[-self.PROMPT_TAIL :], *reply]
        self._entries.append(entry)
        self._n_tokens += len(entry)
        if self._n_tokens <= self.max_tokens:
            self._index_entry(entry)
            return
        while len(self._entries) > 1 and self._n_tokens > self.max_tokens * 3 // 4:
            self._n_tokens -= len(self._entries.popleft())
        self._reindex()

    def clear(self) -> None:
        self._entries.clear()
        self._n_tokens = 0
        self._reindex()

    def _reindex(self) -> None:
        self._tokens = []
        self._index = {n: {} for n in self.KEY_SIZES}
        for entry in self._entries:
            self._index_entry(entry)

    def _index_entry(self, entry: list[int]) -> None:
        start = len(self._tokens)
        self._tokens += entry
        self._tokens.append(_END)
        tokens = self._tokens
        for n, index in self._index.items():
            # n-grams with at least one token after them in this entry
            for end in range(start + n, start + len(entry)):
                index[tuple(tokens[end - n : end])] = end

    def lookup(self, ctx: Sequence[int], k_max: int, extend_to: int = 64) -> tuple[list[int], int]:
        """What followed the latest, longest earlier occurrence of ctx's end, and how many tokens
        matched (extended back up to extend_to). ([], 0) where nothing of MIN_MATCH matches."""
        tokens = self._tokens
        for n in self.KEY_SIZES:
            if len(ctx) < n:
                continue
            end = self._index[n].get(tuple(ctx[-n:]))
            if end is None:
                continue
            m = n
            while m < extend_to and end - 1 - m >= 0 and m < len(ctx) and tokens[end - 1 - m] == ctx[-1 - m]:
                m += 1
            stop = tokens.index(_END, end)
            return tokens[end : min(stop, end + k_max)], m
        return [], 0
