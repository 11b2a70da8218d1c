"""One reply as it streams: its text, the character ranges the draft wrote, token counts, numbers.

This is the one place a reply's pieces are merged. The path of a token: the engine yields
`TextPiece(text, n_tokens, is_draft)`; the worker process pickles it across its pipe; the
controller's reader thread queues it; one drain on the GUI thread appends every queued piece to
the reply's `Reply` here and emits a `ReplyProgress` (this buffer, where its new text starts,
the stats snapshots that arrived). The chat view and Compare lay out only the new text; the
store saves `shown()`. No view keeps a copy of the text or the spans of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.events import Event, Finished, Stats, TextPiece


@dataclass(frozen=True)
class ReplyText:
    """A reply's text as shown and stored, with the [start, end) ranges of it the draft wrote."""

    text: str
    draft_spans: tuple[tuple[int, int], ...] = ()
    # Where each span's draft came from (engine.events.DraftSource values), one per span; empty
    # where unknown (replies saved before sources were kept).
    # (Not compared: two texts with the same highlight are equal, wherever the guesses came from.)
    draft_sources: tuple[str, ...] = field(default=(), compare=False)


@dataclass(eq=False)
class Reply:
    """A reply being generated (and, once `finished` is set, generated).

    `draft_spans` are sorted and disjoint; neighbouring drafted pieces from the same source are
    one range (`draft_sources` says each range's source). Only the controller writes to a Reply,
    on the GUI thread; readers never change it.
    """

    request_id: int
    draft_spans: list[tuple[int, int]] = field(default_factory=list)
    draft_sources: list[str] = field(default_factory=list)
    n_tokens: int = 0
    n_draft_tokens: int = 0  # tokens the draft proposed and the target accepted
    stats: Stats | None = None  # the newest snapshot (the final numbers once finished)
    finished: Finished | None = None
    _text: str = field(default="", init=False, repr=False)
    _parts: list[str] = field(default_factory=list, init=False, repr=False)  # not yet joined into _text
    _length: int = field(default=0, init=False, repr=False)

    @property
    def text(self) -> str:
        if self._parts:  # joined once per read, not once per piece (a piece is a few characters)
            self._text += "".join(self._parts)
            self._parts.clear()
        return self._text

    def __len__(self) -> int:
        return self._length

    def add(self, event: Event) -> None:
        if isinstance(event, TextPiece):
            self.add_piece(event)
        elif isinstance(event, Stats):
            self.stats = event
        elif isinstance(event, Finished):
            self.finish(event)

    def add_piece(self, piece: TextPiece) -> None:
        start, end = self._length, self._length + len(piece.text)
        if piece.is_draft:
            self.n_draft_tokens += piece.n_tokens
            source = str(piece.source)
            if (
                piece.text
                and self.draft_spans
                and self.draft_spans[-1][1] == start
                and self.draft_sources[-1] == source
            ):
                self.draft_spans[-1] = (self.draft_spans[-1][0], end)
            elif piece.text:
                self.draft_spans.append((start, end))
                self.draft_sources.append(source)
        if piece.text:
            self._parts.append(piece.text)
        self._length = end
        self.n_tokens += piece.n_tokens

    def finish(self, finished: Finished) -> None:
        """The last event: its text is authoritative (a stop string is cut from it); spans keep inside it."""
        self.finished = finished
        self.stats = finished.stats
        if finished.text != self.text:
            n = len(finished.text)
            self._text, self._length = finished.text, n
            kept = [(a, min(b, n), s) for (a, b), s in zip(self.draft_spans, self.draft_sources) if a < n]
            self.draft_spans = [(a, b) for a, b, _ in kept]
            self.draft_sources = [s for _, _, s in kept]

    @property
    def is_finished(self) -> bool:
        return self.finished is not None

    def shown(self, is_final: bool = False) -> ReplyText:
        """The text without the whitespace models put after the prompt (and, once final, at the
        end), the spans shifted to match."""
        text = self.text
        if is_final:
            text = text.rstrip()
        cut = len(text) - len(text.lstrip())
        n = len(text)
        spans = (
            (max(a, cut) - cut, min(b, n) - cut, s)
            for (a, b), s in zip(self.draft_spans, self.draft_sources)
            if b > cut and a < n
        )
        kept = [(a, b, s) for a, b, s in spans if b > a]
        return ReplyText(text[cut:], tuple((a, b) for a, b, _ in kept), tuple(s for _, _, s in kept))

    def raw(self) -> ReplyText:
        """The text exactly as generated."""
        return ReplyText(self.text, tuple(self.draft_spans), tuple(self.draft_sources))


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

    @property
    def new_text(self) -> str:
        return self.reply.text[self.start :]
