"""A message's text: Markdown rendered by Qt, with the draft's accepted tokens tinted.

Qt's Markdown importer rewrites the source (markup removed, whitespace folded), so a character
range of the source is not a range of the document. After rendering, each document character
is matched to the next equal source character within a short window (markup is skipped over,
a folded line break matches any whitespace); the draft's spans of the source then map onto the
document. A character that cannot be matched is simply left untinted.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QResizeEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget

DRAFT_TINT = QColor(60, 190, 110, 70)  # translucent green: readable on light and dark themes
CODE_BACKGROUND = QColor(127, 127, 127, 38)
LOOKAHEAD = 400  # markup the importer drops (a link's URL, a fence line) is shorter than this


def document_characters(doc: QTextDocument) -> list[tuple[int, str]]:
    """(position, character) of every block's text, in document order (tables included)."""
    out: list[tuple[int, str]] = []
    block = doc.firstBlock()
    while block.isValid():
        position = block.position()
        out.extend((position + k, ch) for k, ch in enumerate(block.text()))
        out.append((position + block.length() - 1, "\n"))  # the block separator
        block = block.next()
    return out


def map_to_source(chars: list[tuple[int, str]], source: str) -> list[int]:
    """For each document character, its index in the Markdown source, or -1."""
    result: list[int] = []
    j, n = 0, len(source)
    for _, ch in chars:
        if ch.isspace():
            if j < n and source[j].isspace():
                result.append(j)
                j += 1
            else:
                result.append(-1)
            continue
        k = source.find(ch, j, j + LOOKAHEAD)
        if k < 0:
            result.append(-1)
        else:
            result.append(k)
            j = k + 1
    return result


def draft_mask(n: int, spans: Sequence[tuple[int, int]]) -> bytearray:
    mask = bytearray(n)
    for start, end in spans:
        start, end = max(0, start), min(n, end)
        if end > start:
            mask[start:end] = b"\x01" * (end - start)
    return mask


def render(doc: QTextDocument, source: str, spans: Sequence[tuple[int, int]], tint: bool) -> None:
    doc.setMarkdown(source, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    cursor = QTextCursor(doc)
    # Code blocks get a shaded background so they read as blocks while the reply streams.
    block = doc.firstBlock()
    code_format = QTextBlockFormat()
    code_format.setBackground(CODE_BACKGROUND)
    while block.isValid():
        if block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence):
            cursor.setPosition(block.position())
            cursor.mergeBlockFormat(code_format)
        block = block.next()
    if not tint or not spans:
        return
    chars = document_characters(doc)
    indices = map_to_source(chars, source)
    mask = draft_mask(len(source), spans)
    tint_format = QTextCharFormat()
    tint_format.setBackground(DRAFT_TINT)
    # One edit block: the layout is redone once at its end instead of after every run (a merge
    # outside a block cost 0.7 ms each, 170 ms for a 1,500-token reply with 200 draft runs).
    cursor.beginEditBlock()
    run_start = run_end = -1
    for (position, ch), index in zip(chars, indices, strict=True):
        is_draft = index >= 0 and mask[index] and ch != "\n"
        if is_draft and position == run_end:
            run_end = position + 1
            continue
        if run_end > run_start >= 0:
            cursor.setPosition(run_start)
            cursor.setPosition(run_end, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(tint_format)
        run_start, run_end = (position, position + 1) if is_draft else (-1, -1)
    if run_end > run_start >= 0:
        cursor.setPosition(run_start)
        cursor.setPosition(run_end, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(tint_format)
    cursor.endEditBlock()


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
        self.document().setUndoRedoEnabled(False)  # read-only text re-rendered ~40 times a second
        self.document().documentLayout().documentSizeChanged.connect(self.on_layout_size_changed)
        mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.document().setDefaultStyleSheet(f"code, pre {{ font-family: '{mono.family()}'; }}")
        self._source = ""
        self._spans: tuple[tuple[int, int], ...] = ()
        self._tint = True

    def set_content(self, source: str, spans: Sequence[tuple[int, int]], tint: bool) -> None:
        self._source, self._spans, self._tint = source, tuple(spans), tint
        render(self.document(), source, self._spans, tint)

    def set_tint(self, tint: bool) -> None:
        if tint != self._tint:
            self.set_content(self._source, self._spans, tint)

    def source_text(self) -> str:
        return self._source

    def _fit_height(self) -> None:
        if self._grows:
            self.setFixedHeight(int(self.document().size().height()) + 4)

    def on_layout_size_changed(self, _size: object) -> None:
        self._fit_height()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit_height()

    def sizeHint(self) -> QSize:  # noqa: N802
        if not self._grows:
            return super().sizeHint()
        return QSize(400, int(self.document().size().height()) + 4)
