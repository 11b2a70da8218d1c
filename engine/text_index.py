"""One index over every text Tandem drafts from: the longest earlier context that ends like the
text so far, and what followed it, in time independent of the text's length.

The conversation, its documents and the engine's earlier replies are one stream of token ids, cut
into segments joined by separators of their own (negative ids), so no match crosses from one
into the next. A suffix automaton over the stream (SAM decoding, Hu et al., 2024) is extended by
one state or two per token; after each token its `last` state's suffix link is the longest suffix
that occurred before, and each state keeps where its strings last ended, so the continuation
offered followed the longest agreement, and of several the most recent, however far back it began.

Bounded: SAM states cannot be removed from the front, so a second automaton starts when the first
holds WINDOW tokens and replaces it at 2 x WINDOW: two amortised O(1) extensions a token, about
3 x WINDOW tokens' states. docs/design-engine.md ("one index over every source").
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

# Shorter suffixes of a new token's longest repeat also occurred at the new end: their last end
# is moved there for at most this many of them (the rest keep an earlier, still true, end), so a
# token costs O(1) even in text that repeats one token a thousand times.
_LATEST_UPDATES = 8
WINDOW = 1 << 18  # 262,144 tokens: the automaton covers the last 256-512 Ki tokens
_NO_MORE: dict[int, int] = {}  # (never written)


class SuffixAutomaton:
    """A suffix automaton over a stream of token ids, extended one token at a time. Per state: its
    longest string's length, its suffix link, and the stream position just past its strings'
    latest end. A state's first transition lives in two flat arrays (most states have one); only
    branching states get a dict."""

    def __init__(self, start: int) -> None:
        self.start = start  # the stream position of this automaton's first token
        self.length = array("i", [0])
        self.link = array("i", [-1])
        self.latest = array("q", [start])
        self._tok = array("i", [0])  # each state's first transition: its token...
        self._to = array("i", [-1])  # ...and its target (-1: none)
        self._more: dict[int, dict[int, int]] = {}  # further transitions of branching states
        self.last = 0
        self.n_tokens = 0
        # After each token: the longest earlier match of the stream's end, and where what
        # followed its latest earlier occurrence begins (a stream position; -1: no match).
        self.match_len = 0
        self.match_end = -1

    def _next(self, state: int, token: int) -> int:
        if self._to[state] >= 0 and self._tok[state] == token:
            return self._to[state]
        return self._more.get(state, _NO_MORE).get(token, -1)

    def _set(self, state: int, token: int, target: int) -> None:
        if self._to[state] < 0 or self._tok[state] == token:
            self._tok[state] = token
            self._to[state] = target
        else:
            more = self._more.get(state)
            if more is None:
                self._more[state] = {token: target}
            else:
                more[token] = target

    def _new_state(self, length: int, link: int, latest: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.latest.append(latest)
        self._tok.append(0)
        self._to.append(-1)
        return len(self.length) - 1

    def extend(self, token: int, position: int) -> None:
        """Add the token at stream position `position` (the next one after the last added)."""
        end = position + 1
        self.n_tokens += 1
        length, link, latest = self.length, self.link, self.latest
        cur = self._new_state(length[self.last] + 1, 0, end)
        p = self.last
        while p >= 0 and self._next(p, token) < 0:
            self._set(p, token, cur)
            p = link[p]
        if p >= 0:
            q = self._next(p, token)
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = self._new_state(length[p] + 1, link[q], latest[q])
                self._tok[clone], self._to[clone] = self._tok[q], self._to[q]
                more = self._more.get(q)
                if more is not None:
                    self._more[clone] = dict(more)
                while p >= 0 and self._next(p, token) == q:
                    self._set(p, token, clone)
                    p = link[p]
                link[q] = link[cur] = clone
        self.last = cur
        # The longest suffix seen before is the new state's link; its latest end, not yet moved
        # to this one, is the most recent earlier occurrence.
        s = link[cur]
        if s > 0:
            self.match_len, self.match_end = length[s], latest[s]
        else:
            self.match_len, self.match_end = 0, -1
        for _ in range(_LATEST_UPDATES):
            if s <= 0:
                break
            latest[s] = end
            s = link[s]


class TextIndex:
    """Every text drafted from, as segments of one stream, indexed by a bounded suffix automaton.

    `sync(ctx)` makes the current segment the text so far (appending what it lacks, or starting
    a new segment where ctx does not extend it); `match` then says how far the stream's end
    agrees with an earlier context and where what followed that context begins."""

    PROMPT_TAIL = 256  # an exchange remembered (`add`) keeps this much of its prompt before the reply

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.clear()

    def clear(self) -> None:
        self._tokens: list[int] = []  # the stream from position `_offset` on
        self._offset = 0
        self._end = 0  # stream position after the last token
        self._sam = SuffixAutomaton(0)
        self._young: SuffixAutomaton | None = None  # the next automaton, fed from WINDOW tokens on
        self._n_segments = 0
        self._segment: list[int] = []  # the current segment's tokens (the text it was synced to)
        self.segment_start = 0  # the stream position of the current segment's first token

    def __len__(self) -> int:
        """Segments indexed (conversations, replies, remembered exchanges)."""
        return self._n_segments

    @property
    def n_tokens(self) -> int:
        """Tokens held (the window's worth at most, separators included)."""
        return len(self._tokens)

    # -- writing ------------------------------------------------------------------------------

    def _append(self, token: int) -> None:
        position = self._end
        self._tokens.append(token)
        self._end += 1
        self._sam.extend(token, position)
        if self._young is not None:
            self._young.extend(token, position)
        if self._sam.n_tokens >= 2 * self.window and self._young is not None:
            self._sam, self._young = self._young, None
            drop = self._sam.start - self._offset
            del self._tokens[:drop]
            self._offset = self._sam.start
        if self._young is None and self._sam.n_tokens >= self.window:
            self._young = SuffixAutomaton(self._end)

    def new_segment(self) -> None:
        """Start a segment: a separator no token and no other separator equals."""
        self._n_segments += 1
        self._append(-self._n_segments)
        self._segment = []
        self.segment_start = self._end

    def sync(self, ctx: Sequence[int], check: bool = True) -> int:
        """Make the current segment hold ctx: append what it lacks where ctx extends it, else start
        a new segment with all of ctx. check=False: ctx is known to extend it (the text so far,
        grown in place by a reply). Returns the stream position of ctx's first token."""
        segment = self._segment
        n = len(segment)
        if check and (self._n_segments == 0 or len(ctx) < n or list(ctx[:n]) != segment):
            self.new_segment()
            segment, n = self._segment, 0
        for token in ctx[n:]:
            self._append(token)
            segment.append(token)
        return self.segment_start

    def add(self, prompt: Sequence[int], reply: Sequence[int]) -> None:
        """Remember an exchange (an earlier answer, a reply decoded without drafting): the end of
        its prompt and its reply. Where the current segment already holds them (the reply was
        drafted from this index), only what it lacks is added."""
        if not reply:
            return
        full = [*prompt, *reply]
        n = len(self._segment)
        if self._n_segments and 0 < n <= len(full) and full[:n] == self._segment:
            self.sync(full, check=False)
            return
        self.new_segment()
        self.sync([*prompt[-self.PROMPT_TAIL :], *reply], check=False)

    # -- reading ------------------------------------------------------------------------------

    @property
    def match(self) -> tuple[int, int]:
        """(tokens matched, stream position where what followed them begins): the longest
        earlier context that ends as the stream ends, at its latest occurrence; (0, -1): none."""
        return self._sam.match_len, self._sam.match_end

    def following(self, position: int, k: int) -> list[int]:
        """Up to k tokens of the stream from `position`, stopping at a segment's end."""
        i = position - self._offset
        if i < 0:
            return []
        out = self._tokens[i : i + k]
        for j, token in enumerate(out):
            if token < 0:
                return out[:j]
        return out
