"""Stopping a reply that repeats itself: the same stretch of tokens, again and again.

A small model asked to edit a note can fall into a loop (the same sentence thirty times until the
token cap). LoopGuard, fed each emitted token, says when the tail is one stretch repeated
MIN_REPEATS times in a row over at least MIN_SPAN tokens (a short motif, "- - - -", must run
long), and the reply ends with the stop reason "repetition". For each period p up to
MAX_PERIOD, run[p] counts the tokens in a row equal to the one p before them: the tail is a
loop when run[p] + p >= max(MIN_REPEATS * p, MIN_SPAN), one numpy comparison a token.

LineRepeats catches near-repeats ("10. Use a study app: ...", "11. Use a study app: ..."): whole
lines compared with their numbering, bullets and spacing taken off, a line of at least
MIN_LINE_TOKENS tokens told LINE_TELLINGS times in a row is a loop. TextLoopGuard runs the same
guard over a server's streamed text (app/host/remote_worker.py), each word or mark a token.
"""

from __future__ import annotations

import re

import numpy as np

MAX_PERIOD = 200  # the longest stretch looked for, in tokens (a long sentence or a short paragraph)
MIN_REPEATS = 4  # told this many times in a row
MIN_SPAN = 64  # ...covering at least this many tokens
MIN_LINE_TOKENS = 8  # a line this long, told again apart from its numbering and bullets...
LINE_TELLINGS = 4  # ...this many times in a row (the line and 3 repeats of it) is a loop
# A line's numbering, bullets and quote marks, any mix of them: "10. ", "- ", "* ", "(3) ", "b) ",
# "**4.** ", "• ", "> ", "## ".
_LINE_MARKERS = re.compile(r"^(?:\s+|[-*+•·>#]+|\(?\d+[.):]?|\(?[a-zA-Z][.)](?=\s)|\*\*)+")


def line_key(line: str) -> str:
    """A line as the loop check compares it: without its numbering and bullets, its spacing one."""
    return " ".join(_LINE_MARKERS.sub("", line).split())


class LineRepeats:
    """Lines told again and again apart from their numbering (module docstring)."""

    def __init__(self) -> None:
        self._line = bytearray()  # the line being written
        self._n_tokens = 0  # ...its tokens so far
        self._last = ""  # the last line long enough to count, as compared
        self._told = 0  # ...told this many times in a row

    def add(self, text: bytes, n_tokens: int = 1) -> bool:
        """The next token's text (n_tokens: tokens it stands for); True where the reply's last
        lines are one line told LINE_TELLINGS times."""
        self._line += text
        self._n_tokens += n_tokens
        if b"\n" not in text:
            return False
        *lines, rest = bytes(self._line).split(b"\n")
        looped = False
        for line in lines:
            looped = self._end_line(line.decode("utf-8", "replace"), self._n_tokens) or looped
            self._n_tokens = 0
        self._line = bytearray(rest)
        self._n_tokens = 1 if rest else 0
        return looped

    def _end_line(self, line: str, n_tokens: int) -> bool:
        key = line_key(line)
        if not key:
            return False  # a blank line (or a bare number) between items does not break a run
        if n_tokens >= MIN_LINE_TOKENS and key == self._last:
            self._told += 1
        else:
            self._last, self._told = (key, 1) if n_tokens >= MIN_LINE_TOKENS else ("", 0)
        return self._told >= LINE_TELLINGS


class LoopGuard:
    def __init__(self) -> None:
        self._periods = np.arange(1, MAX_PERIOD + 1)
        # What the tail must reach, per period: max(MIN_REPEATS * p, MIN_SPAN) tokens; as a run
        # (tokens equal to the one p before), that less p.
        self._run_needed = np.maximum(MIN_REPEATS * self._periods, MIN_SPAN) - self._periods
        self.reset()

    def reset(self) -> None:
        """A new reply: nothing seen yet."""
        self._ring = np.full(MAX_PERIOD + 1, -1, dtype=np.int64)  # the last tokens, newest at _n % len
        self._n = 0
        self._run = np.zeros(MAX_PERIOD, dtype=np.int64)
        self.lines = LineRepeats()

    def add(self, token: int, text: bytes = b"") -> bool:
        """The next emitted token (and its text, for near-repeats); True where the reply has become
        a loop. (Called for every token a step emits, 64 at a time on a copy: in place, a few
        numpy operations.)"""
        if text and self.lines.add(text):
            return True
        ring, j = self._ring, self._n % len(self._ring)
        # The token p before this one, per p: the ring's slots before j, then those after it, both
        # newest first. A slot not yet written holds -1, which no token equals.
        same = np.concatenate((ring[:j][::-1], ring[j + 1 :][::-1])) == token
        self._run += 1
        self._run *= same
        ring[j] = token
        self._n += 1
        return bool((self._run >= self._run_needed).any())

    def tokens_before_loop(self, tokens: list[int]) -> int:
        """How many of these tokens, emitted next, the reply would keep: up to and including the
        one that makes it a loop (all of them where none does). A draft is cut there: what it
        drafted past that point would be verified for nothing, the reply ending there. What
        `add` would find token by token, for every period and drafted token at once (a 64-token
        draft: ~0.2 ms here); the guard itself is left as it was."""
        k = len(tokens)
        # A tail grows by one token at most a token: most drafts cannot reach a loop at all.
        if k == 0 or not np.any(self._run + k >= self._run_needed):
            return k
        size = len(self._ring)
        seen = self._ring[(self._n - size + np.arange(size)) % size]  # the last tokens, oldest first
        text = np.concatenate([seen, np.asarray(tokens, dtype=np.int64)])
        at = np.arange(k)
        periods = self._periods[:, None]
        same = (text[size + at - periods] == text[size + at]) & (periods <= self._n + at)
        # Per period, the last drafted token that broke its run so far (-1: none has).
        broken_at = np.maximum.accumulate(np.where(same, -1, at), axis=1)
        run = np.where(broken_at < 0, self._run[:, None] + at + 1, at - broken_at)
        looped = np.nonzero((run >= self._run_needed[:, None]).any(axis=0))[0]
        return int(looped[0]) + 1 if looped.size else k


_WORD = re.compile(r"\w+|[^\w\s]")


class TextLoopGuard:
    """LoopGuard over streamed text: each word and punctuation mark a token (the same word, the
    same id); a word cut at a chunk's end waits for the rest."""

    def __init__(self) -> None:
        self.guard = LoopGuard()
        self._ids: dict[str, int] = {}
        self._tail = ""  # a word that the next chunk may continue

    def add(self, text: str) -> bool:
        """The next piece of the reply; True where the reply has become a loop."""
        self._tail += text
        matches = list(_WORD.finditer(self._tail))
        if matches and matches[-1].end() == len(self._tail) and self._tail[-1].isalnum():
            held = matches.pop()  # may go on in the next piece
            self._tail = self._tail[held.start() :]
        else:
            self._tail = ""
        # (any() stops at the first loop: the words after it are not seen.) Lines are checked on
        # the text as it came, each word a token.
        if self.guard.lines.add(text.encode("utf-8"), len(_WORD.findall(text))):
            return True
        return any(self.guard.add(self._ids.setdefault(m.group(), len(self._ids))) for m in matches)
