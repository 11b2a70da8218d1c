"""A base model's reply ends at its first new speaker line (engine/chat.py writes the transcript
it continues): the first line that starts with a name and a colon (`Student:`, `Q:`), or with the
transcript's own first words (it starts over), outside fenced code blocks, whitespace trimmed.
`SpeakerStop` says it while the reply streams, holding back what could still become such a
line (tests/app/test_chat.py's `cut_reply` says it of a whole text, the rule it is checked against); `stop_at_speaker_lines` applies it to an engine's events.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from engine.events import DraftSource, Event, Finished, TextPiece

MARKER_CHARS = 40  # of the preamble's first line (transcript_marker)
MIN_MARKER_CHARS = 12

# A new speaker line: a name of up to 31 word characters and spaces at the very start of a line,
# a colon, then a space, a line end, or the end of the text ("10:30" and "http://" are no names).
_SPEAKER = re.compile(r"\w[\w ]{0,30}:(?=\s|$)")
_SPEAKER_SO_FAR = re.compile(r"\w[\w ]{0,30}:\s")  # the same on a line still being written
# What could still grow into one: a partial name, maybe with its colon.
_SPEAKER_PREFIX = re.compile(r"\w[\w ]{0,30}:?")
FENCE = re.compile(r" {0,3}(```|~~~)")


def is_speaker_line(line: str) -> bool:
    """Does this whole line start a new speaker's turn ("Student: ...", "User:")?"""
    return _SPEAKER.match(line) is not None


def transcript_marker(prompt: str) -> str:
    """The first words of a transcript's preamble: a reply line starting with them starts the
    transcript over (seen on Gemma 3 270M at temperature 0.7) and ends the reply too."""
    marker = prompt.lstrip().split("\n", 1)[0].strip()[:MARKER_CHARS]
    return marker if len(marker) >= MIN_MARKER_CHARS else ""


def ends_reply(line: str, marker: str) -> bool:
    return is_speaker_line(line) or bool(marker and line.startswith(marker))


class _Text:
    """A reply's raw text, growing at the end and read near the end. Text before `keep_from` moves
    to a list of parts, so a long reply is not copied again with every piece."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._tail = ""
        self._tail_start = 0  # offset of _tail in the whole text

    def __len__(self) -> int:
        return self._tail_start + len(self._tail)

    def append(self, text: str) -> None:
        self._tail += text

    def get(self, start: int, end: int | None = None) -> str:
        """text[start:end]; start must not be before the last keep_from."""
        assert start >= self._tail_start
        base = self._tail_start
        return self._tail[start - base :] if end is None else self._tail[start - base : end - base]

    def find(self, sub: str, start: int) -> int:
        i = self._tail.find(sub, max(0, start - self._tail_start))
        return i + self._tail_start if i >= 0 else -1

    def keep_from(self, offset: int) -> None:
        cut = offset - self._tail_start
        if cut > 4096:  # in chunks: each move copies the tail
            self._parts.append(self._tail[:cut])
            self._tail = self._tail[cut:]
            self._tail_start = offset

    def __str__(self) -> str:
        return "".join(self._parts) + self._tail


@dataclass
class _Mark:
    end: int  # offset in the raw text where the piece ends
    is_draft: bool
    n_tokens: int
    source: DraftSource = DraftSource.NONE


class SpeakerStop:
    """Streaming form of cut_reply: feed it text as it comes, show only what it returns. Held back
    until safe: leading whitespace (dropped), trailing whitespace, and a line that could still
    become a speaker line. Pieces keep their draft flag and source (the window's tint)."""

    def __init__(self, marker: str = "") -> None:
        self.marker = marker
        self._raw = _Text()  # everything received
        self.stopped = False
        self._end: int | None = None  # where the reply was cut, once stopped
        self._shown = 0  # raw offset up to which text was handed out
        self._start: int | None = None  # first non-whitespace character
        self._line_start = -1  # start of the current line; -1 while on the first line
        self._in_fence = False
        self._scanned = 0  # raw offset up to which newlines were looked for
        self._marks: list[_Mark] = []

    @property
    def text(self) -> str:
        """The reply so far as it will read (complete once finish() was called)."""
        if self._start is None:
            return ""
        end = self._end if self._end is not None else len(self._raw)
        return str(self._raw)[self._start : end].rstrip()

    def feed(
        self, text: str, is_draft: bool = False, n_tokens: int = 0, source: DraftSource = DraftSource.NONE
    ) -> list[TextPiece]:
        if self.stopped or (not text and not n_tokens):
            return []
        self._raw.append(text)
        self._marks.append(_Mark(len(self._raw), is_draft, n_tokens, source))
        if self._start is None:
            raw = self._raw.get(0)  # only whitespace so far, and this piece
            stripped = len(raw) - len(raw.lstrip())
            if stripped == len(raw):
                self._scan_lines()
                return []
            self._start = stripped
        pieces = self._release(self._scan_lines())
        # What is shown, and lies before the current line, is not read again (only by .text).
        self._raw.keep_from(min(self._shown, self._line_start) if self._line_start >= 0 else self._shown)
        return pieces

    def finish(self) -> list[TextPiece]:
        """The rest at the end of generation: a trailing "Name:" counts as a speaker line."""
        if self.stopped:
            return []
        if self._line_start >= 0 and not self._in_fence:
            line = self._raw.get(self._line_start)
            if re.fullmatch(r"\w[\w ]{0,30}:\s*", line):
                self._stop_at(self._line_start)
                return self._release(self._trimmed(self._line_start))
        if self._start is None:
            return []
        return self._release(self._trimmed(len(self._raw)))

    def _trimmed(self, end: int) -> int:
        """end, moved back over trailing whitespace (without copying the text)."""
        raw = self._raw
        while end > self._shown and raw.get(end - 1, end).isspace():
            end -= 1
        return end

    def _stop_at(self, offset: int) -> None:
        self.stopped = True
        self._end = offset

    def _scan_lines(self) -> int:
        """Consume complete lines; return how far the raw text is safe to show."""
        raw = self._raw
        while True:
            nl = raw.find("\n", max(self._line_start, self._scanned))
            if nl < 0:
                self._scanned = len(raw)
                break
            if self._line_start >= 0:
                line = raw.get(self._line_start, nl)
                if not self._in_fence and ends_reply(line, self.marker):
                    self._stop_at(self._line_start)
                    return self._trimmed(self._line_start)
                if FENCE.match(line):
                    self._in_fence = not self._in_fence
            self._line_start = nl + 1
        safe = len(raw)
        if self._line_start >= 0 and not self._in_fence:
            # Names and markers are short: the line's head decides (a long line is never copied).
            head = raw.get(self._line_start, self._line_start + 64)
            is_whole = len(raw) - self._line_start <= 64
            marker = self.marker
            if _SPEAKER_SO_FAR.match(head) or (marker and head.startswith(marker)):
                self._stop_at(self._line_start)
                return self._trimmed(self._line_start)
            if is_whole and (
                _SPEAKER_PREFIX.fullmatch(head) or (marker and head and marker.startswith(head))
            ):
                safe = self._line_start  # could still become "Name: " (or the marker)
        return self._trimmed(safe)

    def _release(self, upto: int) -> list[TextPiece]:
        """Hand out raw[shown:upto] as pieces split where the draft flag changes. A piece's tokens
        go with the text that completes it; tokens of text never shown (leading whitespace) ride
        along with the next piece."""
        start = max(self._shown, self._start or 0)
        if self._start is None or upto <= start:
            return []
        pieces: list[TextPiece] = []
        pos, done, carry = start, 0, 0
        for mark in self._marks:
            if mark.end <= pos:
                done += 1
                carry += mark.n_tokens
                continue
            complete = mark.end <= upto
            end = mark.end if complete else upto
            n_tokens = (mark.n_tokens if complete else 0) + carry
            carry = 0
            text = self._raw.get(pos, end)
            if pieces and (pieces[-1].is_draft, pieces[-1].source) == (mark.is_draft, mark.source):
                last = pieces.pop()
                pieces.append(
                    TextPiece(last.text + text, last.n_tokens + n_tokens, mark.is_draft, mark.source)
                )
            else:
                pieces.append(TextPiece(text, n_tokens, mark.is_draft, mark.source))
            pos = end
            if not complete:
                break
            done += 1
        del self._marks[:done]
        self._shown = upto
        return pieces


class StopEvent(threading.Event):
    """The engine's cancel flag: set by the caller (Stop) or by the speaker rule."""

    def __init__(self, outer: Any = None) -> None:
        super().__init__()
        self.outer = outer

    def is_set(self) -> bool:
        return super().is_set() or (self.outer is not None and bool(self.outer.is_set()))

    def cancelled_by_caller(self) -> bool:
        return self.outer is not None and bool(self.outer.is_set())


def stop_at_speaker_lines(events: Iterator[Event], stop: StopEvent, marker: str = "") -> Iterator[Event]:
    """A base model's event stream with the speaker rule applied; `stop` tells the engine to end."""
    rule = SpeakerStop(marker)
    for event in events:
        if isinstance(event, TextPiece):
            if rule.stopped:
                continue
            yield from rule.feed(event.text, event.is_draft, event.n_tokens, event.source)
            if rule.stopped:
                stop.set()
        elif isinstance(event, Finished):
            yield from rule.finish()
            reason = event.stop_reason
            if rule.stopped and not stop.cancelled_by_caller():
                reason = "stop"
            yield Finished(reason, rule.text, event.token_ids, event.stats)
        else:
            yield event
