"""A message's text: Markdown rendered by Qt, with the draft's accepted tokens tinted, each
stretch in the look of where its guess came from (ui.qt.theme.DraftLook: an attached document, the
conversation, an earlier reply, the draft model).

Qt's Markdown importer rewrites the Markdown text (markup removed, whitespace folded), so a character
range of the text is not a range of the document. After rendering, each document character
is matched to the next equal text character within a short window (markup is skipped over,
a folded line break matches any whitespace); the draft's spans of the text then map onto the
document. A character that cannot be matched is simply left untinted. Long stretches where the
document and the text agree are matched a slice at a time, not a character at a time.

Every lone line break shows as a line break (as typed, as the model wrote it), though Markdown
folds it into a space: that space becomes a line separator in place (keep_line_breaks), so the
document's blocks and positions, and with them the tint, are those of the plain render.

While a reply streams, `MessageBody.stream` lays out only what is new: the text is cut at
block boundaries (a blank line outside a code fence, the end of a closing fence); the blocks
before the last cut are rendered once and stay, and only the open block after it is rendered
again and replaces the previous open block at the end of the document. When the reply ends,
`set_content` renders the whole text once: the final document is exactly `render`'s.

Why this file is long: the mapping of text to document, the streamed render (cut points, open
code fences) and the settled render are one renderer, tested together against a full render
(tests/ui/test_ui_markdown.py).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

from PySide6.QtCore import QEvent, QPoint, QSize, Qt, QTimer
from PySide6.QtGui import (
    QContextMenuEvent,
    QFontDatabase,
    QHelpEvent,
    QResizeEvent,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
    QTextFormat,
)
from PySide6.QtWidgets import QApplication, QFrame, QSizePolicy, QTextBrowser, QToolButton, QToolTip, QWidget

from engine.events import DraftSource, DraftSpan, ReplyText
from ui.chat.code_highlight import YIELD_MS, CodeHighlighter
from ui.presenters import words
from ui.qt import theme
from ui.qt.widgets import tool_button

# The char format property that holds tinted text's source (an engine.events.DraftSource value,
# or UNRECORDED for text saved before sources were kept).
SOURCE_PROPERTY = QTextFormat.Property.UserProperty + 1
UNRECORDED = "unrecorded"
LOOKAHEAD = 400  # markup the importer drops (a link's URL, a fence line) is shorter than this
MARKDOWN = QTextDocument.MarkdownFeature.MarkdownDialectGitHub
# A streaming open block longer than this is cut at its last complete line (inside a code fence
# the rest is rendered as a fence of its own), so a long code block or a paragraph with line
# breaks costs the same per update at its end as at its start.
MAX_OPEN_BLOCK = 3000
MAX_STREAM_STEP = 2500  # new characters laid out per turn of the event loop while streaming
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_LEAD = "x\n\n"  # a paragraph rendered in front of a streamed block, then left out of the copy
# md4c's MD_FLAG_HARD_SOFT_BREAKS (Qt passes its Markdown features to md4c as they are): every lone
# line break parsed as a hard one.
_ALL_BREAKS_HARD = QTextDocument.MarkdownFeature(MARKDOWN.value | 0x8000)
_TWO_LINES = re.compile(r"\S[ \t]*\r?\n[ \t]*\S")  # two lines of text in a row: maybe a soft break
_BLOCK_SEPARATOR = "\u2029"  # between blocks in QTextDocument.toRawText()
# A block's end in toRawText(): the separator, or the mark that opens a table cell or closes a frame.
_BLOCK_ENDS = str.maketrans(dict.fromkeys(_BLOCK_SEPARATOR + "\ufdd0\ufdd1", "\n"))
_IN_BLOCK = re.compile(r"[^\n]+")
_LINE_SEPARATOR = "\u2028"  # a line break inside a block (toPlainText() reads it as "\n")


def _common_prefix_length(a: str, i: int, b: str, j: int) -> int:
    """How many characters a[i:] and b[j:] share at their start (slices compared, galloping)."""
    m = min(len(a) - i, len(b) - j)
    if m <= 0 or a[i] != b[j]:
        return 0
    lo, step = 1, 8
    while True:
        hi = min(m, lo + step)
        if a[i + lo : i + hi] != b[j + lo : j + hi]:
            break
        lo = hi
        if lo == m:
            return m
        step *= 2
    while hi - lo > 1:  # a[i:i+lo] matches; the first difference is in [lo, hi)
        mid = (lo + hi) // 2
        if a[i + lo : i + mid] == b[j + lo : j + mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _tagged(spans: Sequence[DraftSpan], n: int) -> list[tuple[int, int, DraftSource]]:
    """Spans clipped to [0, n), sorted, each with its source ("" where unknown); an overlap goes
    to the earlier span, touching spans of one source join."""
    out: list[tuple[int, int, DraftSource]] = []
    for start, end, tag in sorted((s.start, s.end, s.source) for s in spans):
        start, end = max(0, start, out[-1][1] if out else 0), min(n, end)
        if end <= start:
            continue
        if out and start == out[-1][1] and tag == out[-1][2]:
            out[-1] = (out[-1][0], end, tag)
        else:
            out.append((start, end, tag))
    return out


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_'’"


def _soft_breaks(doc: QTextDocument, markdown: str) -> list[int]:
    """The positions in `doc` (`markdown` rendered) of the spaces that Qt's importer made of lone
    line breaks (Markdown's soft breaks), found by parsing `markdown` again with every soft break
    made hard: each one is then a block separator at the same position, all else alike. None where
    the two documents differ anywhere else (the rendering then stays as it was)."""
    if not _TWO_LINES.search(markdown):
        return []
    hard = QTextDocument()
    hard.setMarkdown(markdown, _ALL_BREAKS_HARD)
    soft_text, hard_text = doc.toRawText(), hard.toRawText()
    if len(soft_text) != len(hard_text):
        return []
    positions: list[int] = []
    start = 0  # soft_text and hard_text agree before `start`
    while (k := hard_text.find(_BLOCK_SEPARATOR, start)) >= 0:
        if soft_text[start:k] != hard_text[start:k] or soft_text[k] not in (" ", _BLOCK_SEPARATOR):
            return []
        if soft_text[k] == " ":
            positions.append(k)
        start = k + 1
    return positions if soft_text[start:] == hard_text[start:] else []


def keep_line_breaks(doc: QTextDocument, markdown: str, cursor: QTextCursor) -> None:
    """Show each lone line break of `markdown` as a line break (the model's poem, address or
    lines without bullets stay line for line), where Markdown would fold it into a space. The space
    becomes a line separator inside its block, in its own character format: the document keeps its
    blocks (a list item is not split into two), its length and every position, so the draft's
    tint maps exactly as before. Only the rendering changes; the text stays as written."""
    for position in _soft_breaks(doc, markdown):
        cursor.setPosition(position)
        cursor.setPosition(position + 1, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(_LINE_SEPARATOR, cursor.charFormat())


def whole_words(markdown: str, spans: Sequence[DraftSpan]) -> list[DraftSpan]:
    """Spans with each edge that falls inside a word moved to the nearer end of that word: a
    draft's tokens end mid-word ("com|ittee"), and half a word tinted reads as a glitch. A word
    is tinted whole or not at all; the spans stay one per span (one may become empty)."""

    def snap(i: int) -> int:
        if not 0 < i < len(markdown) or not (_is_word_char(markdown[i - 1]) and _is_word_char(markdown[i])):
            return i
        start, end = i, i
        while start > 0 and _is_word_char(markdown[start - 1]):
            start -= 1
        while end < len(markdown) and _is_word_char(markdown[end]):
            end += 1
        return start if i - start <= end - i else end

    return [replace(s, start=snap(s.start), end=max(snap(s.start), snap(s.end))) for s in spans]


def draft_ranges(
    doc: QTextDocument, markdown: str, spans: Sequence[DraftSpan]
) -> list[tuple[int, int, DraftSource]]:
    """The [start, end) document positions whose characters came from drafted markdown characters,
    each with the source of its draft ("" where unknown).

    Each block's text and its separator are matched, in document order, to the markdown: a
    document character takes the next equal markdown character within LOOKAHEAD (whitespace
    only the next markdown character, if that is whitespace). Block separators are never tinted.
    """
    n = len(markdown)
    drafted = _tagged(whole_words(markdown, spans), n)
    if not drafted:
        return []
    # The document's text, one character a position (toRawText), each block's end a "\n".
    joined = doc.toRawText().translate(_BLOCK_ENDS) + "\n"
    length = len(joined)

    # Matched stretches (index in joined, index in markdown, length), markdown indices increasing.
    matches: list[tuple[int, int, int]] = []
    i = j = 0
    while i < length and j < n:
        same = _common_prefix_length(joined, i, markdown, j)
        if same:
            matches.append((i, j, same))
            i, j = i + same, j + same
            continue
        ch = joined[i]
        if ch.isspace():
            if markdown[j].isspace():
                matches.append((i, j, 1))
                j += 1
        else:
            k = markdown.find(ch, j, j + LOOKAHEAD)
            if k >= 0:
                matches.append((i, k, 1))
                j = k + 1
        i += 1

    # Drafted parts of the matched stretches, as ranges of the joined text; neighbours of one
    # source joined.
    runs: list[tuple[int, int, DraftSource]] = []
    p = 0
    for di, sj, size in matches:
        while p < len(drafted) and drafted[p][1] <= sj:
            p += 1
        q = p
        while q < len(drafted) and drafted[q][0] < sj + size:
            tag = drafted[q][2]
            start, end = di + max(drafted[q][0], sj) - sj, di + min(drafted[q][1], sj + size) - sj
            if runs and runs[-1][1] == start and runs[-1][2] == tag:
                runs[-1] = (runs[-1][0], end, tag)
            else:
                runs.append((start, end, tag))
            q += 1

    # Split at block ends (an index of the joined text is a document position).
    return [
        (m.start(), m.end(), tag) for start, end, tag in runs for m in _IN_BLOCK.finditer(joined, start, end)
    ]


def tint_format(source: DraftSource = DraftSource.NONE) -> QTextCharFormat:
    """How the model's own, confirmed text drafted from `source` is marked: the source's tint, and
    its underline style in its mark colour (a cue that does not rest on colour alone). The source
    is kept in the format too (SOURCE_PROPERTY), for what reads the document."""
    look = theme.colors().draft_look(source)
    fmt = QTextCharFormat()
    fmt.setBackground(look.tint)
    fmt.setUnderlineStyle(look.underline)
    fmt.setUnderlineColor(look.mark)
    fmt.setProperty(SOURCE_PROPERTY, look.source or UNRECORDED)
    return fmt


def code_runs(doc: QTextDocument) -> list[tuple[QTextBlock, QTextBlock, list[str]]]:
    """Each code block: its first and last lines (blocks of the document) and their texts."""
    runs: list[tuple[QTextBlock, QTextBlock, list[str]]] = []
    is_open = False
    block = doc.firstBlock()
    while block.isValid():
        is_code = block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)
        if is_code and is_open:
            runs[-1] = (runs[-1][0], block, runs[-1][2] + [block.text()])
        elif is_code:
            runs.append((block, block, [block.text()]))
        is_open = is_code
        block = block.next()
    return runs


def render(doc: QTextDocument, markdown: str, spans: Sequence[DraftSpan], tint: bool) -> None:
    """Render `markdown` into `doc`, each lone line break kept, its drafted `spans` tinted (when
    `tint`) by their sources (DraftSource.NONE: the tint of text saved without its source)."""
    doc.setMarkdown(markdown, MARKDOWN)
    cursor = QTextCursor(doc)
    # One edit block: the layout is redone once at its end instead of after every change (a
    # merge outside a block cost 0.7 ms each, 170 ms for a 1,500-token reply with 200 draft runs).
    cursor.beginEditBlock()
    keep_line_breaks(doc, markdown, cursor)
    # Code blocks get a shaded background so they read as blocks while the reply streams.
    code_format = QTextBlockFormat()
    code_format.setBackground(theme.colors().code_background)
    for first, last, _ in code_runs(doc):
        cursor.setPosition(first.position())
        cursor.setPosition(last.position(), QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeBlockFormat(code_format)
    if tint and spans:
        marks: dict[DraftSource, QTextCharFormat] = {}
        for start, end, tag in draft_ranges(doc, markdown, spans):
            marked = marks.get(tag)
            if marked is None:
                marked = marks[tag] = tint_format(tag)
            cursor.setPosition(start)
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(marked)
    cursor.endEditBlock()


def _spans_within(spans: Sequence[DraftSpan], start: int, end: int, shift: int) -> list[DraftSpan]:
    """The parts of sorted, disjoint spans inside [start, end), moved by `shift`."""
    first = max(0, bisect_right(spans, start, key=lambda s: s.start) - 1)
    out = []
    for k in range(first, len(spans)):
        span = spans[k]
        if span.start >= end:
            break
        a, b = max(span.start, start), min(span.end, end)
        if b > a:
            out.append(DraftSpan(a + shift, b + shift, span.source))
    return out


@dataclass
class _Stream:
    """Where a streaming body stands: markdown[:committed] is rendered and stays in the document."""

    shown: int = -1  # markdown[:shown] is in the document (-1: none of it yet: show it all at once)
    committed: int = 0
    prefix: str = ""  # rendered before markdown[committed:] (a code fence's opening line, re-opened)
    tail: int = 0  # document position where the open block's blocks begin
    scanned: int = 0  # markdown[:scanned] was read for cut points (complete lines only)
    fence: str = ""  # the open code fence's marker, "" outside a fence
    fence_line: str = ""  # ... and its opening line
    cut: int = 0  # the newest cut point found
    cut_prefix: str = ""  # what the text after `cut` needs in front of it to render alone

    def scan(self, markdown: str) -> None:
        """Find cut points in the complete lines added since the last scan."""
        while True:
            newline = markdown.find("\n", self.scanned)
            if newline < 0:
                break
            line, end = markdown[self.scanned : newline], newline + 1
            self.scanned = end
            if self.fence:
                stripped = line.strip()
                if (
                    len(line) - len(line.lstrip(" ")) <= 3
                    and stripped.startswith(self.fence)
                    and stripped == stripped[0] * len(stripped)
                ):
                    self.fence = self.fence_line = ""
                    self.cut, self.cut_prefix = end, ""
                continue
            opening = _FENCE.match(line)
            if opening and not (opening.group(1)[0] == "`" and "`" in line[opening.end() :]):
                self.fence, self.fence_line = opening.group(1), line + "\n"
            elif not line.strip():
                self.cut, self.cut_prefix = end, ""
        # A long open block: cut at its last complete line.
        if self.scanned - self.cut > MAX_OPEN_BLOCK:
            self.cut, self.cut_prefix = self.scanned, self.fence_line


class MessageBody(QTextBrowser):
    """A read-only rendered message that grows to its content's height (no inner scrollbar)."""

    def __init__(self, parent: QWidget | None = None, grows_with_content: bool = True) -> None:
        super().__init__(parent)
        self.setOpenExternalLinks(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self._grows = grows_with_content
        if grows_with_content:
            self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
            self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(2)
        self.document().setUndoRedoEnabled(False)  # read-only text, changed ~40 times a second
        self.document().documentLayout().documentSizeChanged.connect(self.on_layout_size_changed)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.document().setDefaultStyleSheet(f"code, pre {{ font-family: '{mono.family()}'; }}")
        self._reply = ReplyText("")  # the text shown (Markdown) and its drafted stretches
        self._tint = True
        self._stream: _Stream | None = None  # set while a reply streams into this body
        self._settle_id = 0  # which finish() may still reach the window
        self._is_settling = False  # whether a finish() has not yet reached the window
        self._is_catching_up = False
        self._is_rendering = False
        self.highlighter = CodeHighlighter(self.document())
        self._copy_buttons: list[QToolButton] = []
        self.setAccessibleName("Message text")

    def set_content(self, reply: ReplyText, tint: bool) -> None:
        """Render the whole text now (a stored message, a change of tint)."""
        self._reply, self._tint = reply, tint
        self._stream = None
        self._settle_id += 1  # a finish() still under way is dropped
        self._is_settling = False
        self._show_rendered(self._rendered(reply.text, reply.spans))
        self._place_copy_buttons()

    def finish(self, reply: ReplyText, tint: bool) -> None:
        """The reply has ended: render its whole text once. The render and the swap into the
        window (with the layout of the whole text) run in two turns of the event loop, so the
        window never stalls for both at once (about 10 ms each at 30,000 characters)."""
        self._reply, self._tint = reply, tint
        self._stream = None
        self._settle_id += 1
        self._is_settling = True
        settle_id = self._settle_id

        def render_step() -> None:
            if settle_id == self._settle_id:
                rendered = self._rendered(self._reply.text, self._reply.spans)
                QTimer.singleShot(YIELD_MS, self, lambda: show_step(rendered))

        def show_step(rendered: QTextDocument) -> None:
            if settle_id == self._settle_id:
                self._is_settling = False
                self._show_rendered(rendered)
                # The buttons in a turn of their own (a first one costs a few ms to build).
                QTimer.singleShot(YIELD_MS, self, self._place_copy_buttons)

        QTimer.singleShot(YIELD_MS, self, render_step)

    def _show_rendered(self, rendered: QTextDocument) -> None:
        self._is_rendering = True  # one fit at the end, not one per layout change on the way
        try:
            self._show(rendered)
        finally:
            self._is_rendering = False
        self._fit_height()

    def stream(self, reply: ReplyText, tint: bool) -> None:
        """Show a streaming reply's text so far: `reply.text` extends what was shown before, and
        only the new text is laid out (its spans: app.host.reply.Reply.shown()'s).

        At most MAX_STREAM_STEP new characters are laid out per turn of the event loop; a burst
        bigger than that (an engine far faster than the window) is shown over the next turns."""
        if self._is_settling:
            self._settle_id += 1
            self._is_settling = False
        if self._stream is None or tint != self._tint or not reply.text.startswith(self._reply.text):
            # A body that shows text already (a reply shown again, the tint switched) shows all
            # it has at once, as set_content would; a new reply starts from nothing.
            self._stream = _Stream(shown=0 if self._stream is None and not self._reply.text else -1)
            self._tint = tint
            self._place_copy_buttons()  # none while streaming
        self._reply = reply
        self._advance()

    def _advance(self) -> None:
        """Lay out the next part of the streamed text (see stream)."""
        state = self._stream
        markdown = self._reply.text
        if state is None or state.shown == len(markdown):
            return
        end = len(markdown) if state.shown < 0 else min(len(markdown), state.shown + MAX_STREAM_STEP)
        state.scan(markdown[:end])
        doc = self.document()
        self._is_rendering = True
        try:
            if state.cut > state.committed:
                committed = self._part(state.prefix, state.committed, state.cut)
                if state.tail == 0:
                    self._show(committed)
                else:
                    self._append_after(state.tail, committed)
                state.committed, state.prefix = state.cut, state.cut_prefix
                state.tail = doc.characterCount() - 1
            open_block = self._part(state.prefix, state.committed, end)
            # The open block is laid out again on every update: its code is coloured once it
            # is closed (committed above), not on every update.
            self.highlighter.skip_from = state.tail
            if state.tail == 0:
                self._show(open_block)
            else:
                self._append_after(state.tail, open_block)
            state.shown = end
        finally:
            self._is_rendering = False
            self.highlighter.skip_from = None
        self._fit_height()
        if end < len(markdown) and not self._is_catching_up:
            self._is_catching_up = True
            QTimer.singleShot(YIELD_MS, self, self._catch_up)

    def _catch_up(self) -> None:
        self._is_catching_up = False
        self._advance()

    def _rendered(self, text: str, spans: Sequence[DraftSpan]) -> QTextDocument:
        """`render` into a document of its own: Qt's importer inserts piece by piece, and into
        the shown document each insertion would redo layout work (3-4x slower at 30,000 chars)."""
        doc = QTextDocument()
        doc.setDefaultFont(self.document().defaultFont())
        doc.setDefaultStyleSheet(self.document().defaultStyleSheet())
        render(doc, text, spans, self._tint)
        return doc

    def _part(self, prefix: str, start: int, end: int) -> QTextDocument:
        """prefix + markdown[start:end] rendered alone; when the document already holds blocks,
        rendered after a paragraph of its own (_LEAD), as it follows a blank line in the reply
        (Qt's importer treats a document's first block differently)."""
        lead = prefix if self._stream is None or self._stream.tail == 0 else _LEAD + prefix
        spans = _spans_within(self._reply.spans, start, end, len(lead) - start) if self._tint else []
        return self._rendered(lead + self._reply.text[start:end], spans)

    def _show(self, rendered: QTextDocument) -> None:
        """Make the shown document a copy of `rendered`: its text removed, its one block left
        with plain formats, then `rendered` pasted in one edit (checked against rendering in
        place: the same HTML; QTextDocument.clear() would make the paste 3x slower)."""
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.select(QTextCursor.SelectionType.Document)
        cursor.removeSelectedText()
        cursor.setBlockFormat(QTextBlockFormat())
        cursor.setBlockCharFormat(QTextCharFormat())
        cursor.setCharFormat(QTextCharFormat())
        cursor.insertFragment(QTextDocumentFragment(rendered))
        cursor.endEditBlock()

    def _append_after(self, position: int, part: QTextDocument) -> None:
        """Replace what follows `position` (the end of a block) with `part`'s blocks after its lead."""
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.setPosition(position)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        lead = part.firstBlock()
        if lead.next().isValid():
            # The copy starts at the lead paragraph's end, so it opens with a block separator:
            # pasted after the last block, every block keeps its own format (a paste merges its
            # first block into the block it lands in).
            part_cursor = QTextCursor(part)
            part_cursor.setPosition(lead.position() + lead.length() - 1)
            part_cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.insertFragment(part_cursor.selection())
        cursor.endEditBlock()

    def restyle(self) -> None:
        """Render again in the theme's colours (the tint and code background are in the document)."""
        if self._stream is not None:
            self._stream = None
            self.stream(self._reply, self._tint)
        elif self._is_settling:
            self.finish(self._reply, self._tint)
        else:
            self.set_content(self._reply, self._tint)
        self.highlighter.rehighlight()

    # ---- code blocks: a Copy button on each (once the text is final) and "Copy code" in the menu

    def code_blocks(self) -> list[tuple[QTextBlock, str]]:
        """Each code block's first line and its whole text."""
        return [(first, "\n".join(lines)) for first, _, lines in code_runs(self.document())]

    def code_at(self, position: int) -> str | None:
        """The text of the code block holding a document position, if any."""
        for first, text in self.code_blocks():
            if first.position() <= position < first.position() + len(text) + 1:
                return text
        return None

    def _place_copy_buttons(self) -> None:
        blocks = self.code_blocks() if self._grows and self._stream is None and not self._is_settling else []
        while len(self._copy_buttons) < len(blocks):
            button = tool_button("Copy", tip="Copy this code block")
            button.setParent(self.viewport())
            button.setAutoRaise(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            button.clicked.connect(partial(self._on_copy_code, button))
            self._copy_buttons.append(button)
        layout = self.document().documentLayout()
        for i, button in enumerate(self._copy_buttons):
            if i >= len(blocks):
                button.hide()
                continue
            first, text = blocks[i]
            rect = layout.blockBoundingRect(first)
            button.setProperty("code", text)
            button.setAccessibleName(f"Copy code block {i + 1}")
            button.adjustSize()
            button.move(max(0, self.viewport().width() - button.width() - 4), int(rect.top()))
            button.show()
            button.raise_()

    def _on_copy_code(self, button: QToolButton) -> None:
        QApplication.clipboard().setText(str(button.property("code") or ""))
        button.setText("Copied")
        QTimer.singleShot(1500, button, lambda: button.setText("Copy"))

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:  # noqa: N802 (Qt's name)
        menu = self.createStandardContextMenu(event.pos())
        code = self.code_at(self.cursorForPosition(event.pos()).position())
        if code is not None:
            action = menu.addAction("Copy code")
            action.triggered.connect(lambda: QApplication.clipboard().setText(code))
        menu.exec(event.globalPos())
        menu.deleteLater()

    def set_tint(self, tint: bool) -> None:
        if tint == self._tint:
            return
        if self._stream is not None:
            self.stream(self._reply, tint)
        else:
            self.set_content(self._reply, tint)

    def source_text(self) -> str:
        return self._reply.text

    def draft_source_at(self, point: QPoint) -> DraftSource | None:
        """The source of the tinted character under a viewport point (DraftSource.NONE where it
        was not kept); None where the character there is not tinted."""
        offset = QPoint(self.horizontalScrollBar().value(), self.verticalScrollBar().value())
        position = self.document().documentLayout().hitTest(point + offset, Qt.HitTestAccuracy.ExactHit)
        if position < 0:
            return None
        cursor = QTextCursor(self.document())
        cursor.setPosition(position + 1)  # a cursor's format is that of the character before it
        value = cursor.charFormat().property(SOURCE_PROPERTY)
        if not value:
            return None
        return DraftSource(value) if value in tuple(DraftSource) else DraftSource.NONE  # UNRECORDED: NONE

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        # Over tinted text, the tooltip names where it was guessed from (a cue without colour).
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            source = self.draft_source_at(event.pos())
            if source is not None:
                QToolTip.showText(event.globalPos(), words.source_tip(source), self.viewport())
                return True
        return super().viewportEvent(event)

    def _fit_height(self) -> None:
        if self._grows and not self._is_rendering:
            self.setFixedHeight(int(self.document().size().height()) + 4)
            # Everything shows: nothing to scroll (resizeEvent leaves QTextEdit's range stale).
            self.verticalScrollBar().setRange(0, 0)

    def on_layout_size_changed(self, _size: object) -> None:
        self._fit_height()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        if self._grows and event.oldSize().width() == event.size().width():
            # Only the height changed (this body fitting its own content): QTextEdit would lay
            # the whole document out again (40 ms at 30,000 characters, on every update).
            return
        super().resizeEvent(event)
        self._fit_height()
        if self._copy_buttons:
            self._place_copy_buttons()

    def sizeHint(self) -> QSize:  # noqa: N802
        if not self._grows:
            return super().sizeHint()
        return QSize(400, int(self.document().size().height()) + 4)
