"""One reply as it streams: its text, the stretches the draft wrote (DraftSpan), token counts, numbers.

This is the one place a reply's pieces are merged. The path of a token: the engine yields
`TextPiece(text, n_tokens, is_draft)`; the worker process pickles it across its pipe; the
controller's reader thread queues it; one drain on the GUI thread appends every queued piece to
the reply's `Reply` here and emits a `ReplyProgress` (this buffer, where its new text starts,
the stats snapshots that arrived). The chat view and Compare lay out only the new text; the
store saves `shown()`. No view keeps a copy of the text or the spans of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.events import DraftSpan, Finished, Stats, TextPiece
from engine.events import ReplyText as ReplyText  # its home is engine.events; read here by the window


@dataclass(eq=False)
class Reply:
    """A reply being generated (and, once `finished` is set, generated).

    `spans` are sorted and disjoint; neighbouring drafted pieces from the same source are one
    span. Only the controller writes to a Reply, on the GUI thread; readers never change it
    (shown() keeps a cache of its own work, on the same thread).
    """

    request_id: int
    spans: list[DraftSpan] = field(default_factory=list)
    n_tokens: int = 0
    stats: Stats | None = None  # the newest snapshot (the final numbers once finished)
    finished: Finished | None = None
    _text: str = field(default="", init=False, repr=False)
    _parts: list[str] = field(default_factory=list, init=False, repr=False)  # not yet joined into _text
    _length: int = field(default=0, init=False, repr=False)
    # What shown() cut from the front (the whitespace models put after the prompt), decided
    # once the first character that is not whitespace arrives (-1: not yet).
    _cut: int = field(default=-1, init=False, repr=False)
    # shown()'s spans shifted by the cut (_shifted_cut), and how many spans lay before it.
    _shifted: list[DraftSpan] = field(default_factory=list, init=False, repr=False)
    _n_dropped: int = field(default=0, init=False, repr=False)
    _shifted_cut: int = field(default=-1, init=False, repr=False)

    @property
    def text(self) -> str:
        if self._parts:  # joined once per read, not once per piece (a piece is a few characters)
            self._text += "".join(self._parts)
            self._parts.clear()
        return self._text

    def __len__(self) -> int:
        return self._length

    def add(self, piece: TextPiece | Stats) -> None:
        if isinstance(piece, Stats):
            self.stats = piece
            return
        start, end = self._length, self._length + len(piece.text)
        if piece.is_draft:
            last = self.spans[-1] if self.spans else None
            if piece.text and last is not None and last.end == start and last.source == piece.source:
                self.spans[-1] = DraftSpan(last.start, end, last.source)
            elif piece.text:
                self.spans.append(DraftSpan(start, end, piece.source))
        if piece.text:
            self._parts.append(piece.text)
            if self._cut < 0 and piece.text.strip():
                self._cut = start + len(piece.text) - len(piece.text.lstrip())
        self._length = end
        self.n_tokens += piece.n_tokens

    def finish(self, finished: Finished) -> None:
        """The last event: its text is authoritative (a stop string is cut from it); spans keep inside it."""
        self.finished = finished
        self.stats = finished.stats
        if finished.text != self.text:
            n = len(finished.text)
            self._text, self._length = finished.text, n
            self.spans = [DraftSpan(s.start, min(s.end, n), s.source) for s in self.spans if s.start < n]
            stripped = finished.text.lstrip()
            self._cut = n - len(stripped) if stripped else -1
            self._shifted_cut = -1  # spans were cut: shift them all again

    def shown(self, is_final: bool = False) -> ReplyText:
        """The text without the whitespace models put after the prompt (and, once final, at the
        end), the spans shifted to match.

        A streamed update costs what it added: the cut is found once (at the first piece that
        is not whitespace) and the spans shifted by it are kept, so only the spans added since
        the last call (and the last one, which may have grown) are shifted again."""
        text = self.text
        cut = self._cut if self._cut >= 0 else len(text)
        spans = self._shifted_spans(cut)
        if not is_final:
            return ReplyText(text[cut:], tuple(spans))
        n = len(text.rstrip()) - cut
        if n <= 0:
            return ReplyText("", ())
        return ReplyText(
            text[cut : cut + n],
            tuple(DraftSpan(s.start, min(s.end, n), s.source) for s in spans if s.start < n),
        )

    def _shifted_spans(self, cut: int) -> list[DraftSpan]:
        if cut != self._shifted_cut:
            self._shifted, self._n_dropped, self._shifted_cut = [], 0, cut
        shifted = self._shifted
        n_seen = self._n_dropped + len(shifted)
        if n_seen:  # the last span seen may have grown since: shift it again
            if shifted:
                shifted.pop()
            else:
                self._n_dropped -= 1
            n_seen -= 1
        for s in self.spans[n_seen:]:
            if s.end <= cut:  # whitespace before the cut (spans are sorted: these come first)
                self._n_dropped += 1
            else:
                shifted.append(DraftSpan(max(s.start, cut) - cut, s.end - cut, s.source))
        return shifted

    def raw(self) -> ReplyText:
        """The text exactly as generated."""
        return ReplyText(self.text, tuple(self.spans))


@dataclass(frozen=True)
class ReplyProgress:
    """One display update: the reply, where the text it added starts, and the stats that arrived.

    `reply` is the live buffer (read it now, on the GUI thread); `stats` holds every snapshot of
    this update, oldest first (Compare's chart draws them all).
    """

    reply: Reply
    start: int
    stats: tuple[Stats, ...] = ()

    @property
    def request_id(self) -> int:
        return self.reply.request_id
