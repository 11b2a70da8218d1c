"""Syntax colours for a message's code blocks, by Pygments, without stalling the window.

The colours are a QSyntaxHighlighter's: they live in each block's layout, not in the document,
so a rendered reply's text and formats (what streaming must reproduce exactly) are untouched.
Pygments is pure Python (about 10 µs a character here), so nothing is lexed where Qt asks for a
block's colours: the block is queued, and a timer lexes queued lines a few milliseconds per turn
of the event loop and then colours them. Lines are lexed one at a time (a line inside a
multi-line string is coloured as code) and cached by (language, line), so the full render at
the end of a reply, a resize or a theme switch costs no lexing for lines already seen.
While a reply streams, the open block (re-rendered on every update) is left alone
(`skip_from`): each code block is coloured once, when it is closed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from functools import lru_cache

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QSyntaxHighlighter, QTextBlock, QTextCharFormat, QTextDocument, QTextFormat

from ui.qt import theme

SLICE_S = 0.004  # lexing and colouring per turn of the event loop
CACHE_LINES = 20_000
# Work split over turns of the event loop resumes on a 1 ms timer, not a 0 ms one: Qt runs 0 ms
# timers before due timers and input, so those would wait for the whole chain (the renderer too).
YIELD_MS = 1
WARM_WAIT_MS = 50

_Tokens = tuple[tuple[int, int, object], ...]  # (start, length, Pygments token type)
_token_cache: OrderedDict[tuple[str, str], _Tokens] = OrderedDict()


_warm = threading.Event()  # set once Pygments' lexers are imported (on a thread: ~150 ms)
_warming: list[threading.Thread] = []


def warm_up() -> None:
    """Import Pygments and its common lexers on a thread, away from the event loop."""
    if _warming:
        return

    def work() -> None:
        try:
            for name in ("python", "bash", "javascript", "json", "c", "cpp", "rust"):
                _lexer(name)
            lexer = _lexer("python")
            list(lexer.get_tokens_unprocessed("def f(x): return x  # warm"))  # type: ignore[attr-defined]
            from pygments.styles import get_style_by_name

            for theme_colors in (theme.LIGHT, theme.DARK):
                get_style_by_name(theme_colors.code_style)
        finally:
            _warm.set()

    thread = threading.Thread(target=work, name="pygments-warm-up", daemon=True)
    _warming.append(thread)
    thread.start()


@lru_cache(maxsize=64)
def _lexer(language: str) -> object | None:
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    name = language.strip().lower()
    if not name:
        return None
    try:
        lexer: object = get_lexer_by_name(name, stripnl=False, ensurenl=False, stripall=False)
    except ClassNotFound:
        return None
    return lexer


def code_language(block: QTextBlock) -> str | None:
    """The fence's language of a code block's line ("" when none given); None outside code."""
    fmt = block.blockFormat()
    if not fmt.hasProperty(QTextFormat.Property.BlockCodeFence):
        return None
    return fmt.stringProperty(QTextFormat.Property.BlockCodeLanguage)


def tokens(language: str, line: str) -> _Tokens:
    key = (language, line)
    cached = _token_cache.get(key)
    if cached is not None:
        _token_cache.move_to_end(key)
        return cached
    lexer = _lexer(language)
    result: _Tokens = ()
    if lexer is not None:
        result = tuple(
            (start, len(value), ttype)
            for start, ttype, value in lexer.get_tokens_unprocessed(line)  # type: ignore[attr-defined]
            if value
        )
    _token_cache[key] = result
    if len(_token_cache) > CACHE_LINES:
        _token_cache.popitem(last=False)
    return result


_formats: dict[str, dict[object, QTextCharFormat | None]] = {}


def syntax_color(colors: theme.ThemeColors, ttype: object) -> QColor | None:
    """A token's colour in the theme's Pygments style, made readable (4.5:1) on every background
    code can sit on, the tint included (theme.readable); None where the style gives none."""
    from pygments.styles import get_style_by_name

    spec = get_style_by_name(colors.code_style).style_for_token(ttype)
    if not spec.get("color"):
        return None
    return theme.readable(QColor("#" + spec["color"]), theme.text_backgrounds(colors), colors.is_dark)


def _format(colors: theme.ThemeColors, ttype: object) -> QTextCharFormat | None:
    formats = _formats.setdefault(colors.code_style, {})
    if ttype in formats:
        return formats[ttype]
    color = syntax_color(colors, ttype)
    fmt: QTextCharFormat | None = None
    if color is not None:
        # Colour only: bold or italic would change widths, and the layout with them.
        fmt = QTextCharFormat()
        fmt.setForeground(color)
    formats[ttype] = fmt
    return fmt


class CodeHighlighter(QSyntaxHighlighter):
    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        warm_up()
        # Set while a streaming open block is laid out after this document position: blocks
        # after it are not coloured; the block holding it (the last one that stays) keeps its colours.
        self.skip_from: int | None = None
        self._queue: deque[tuple[QTextBlock, str]] = deque()
        self._is_applying = False
        self._is_scheduled = False

    @property
    def pending(self) -> int:
        return len(self._queue)

    def highlightBlock(self, text: str) -> None:  # noqa: N802 (Qt's name)
        block = self.currentBlock()
        language = code_language(block)
        if language is None or not text or not language.strip():
            return
        if not self._is_applying:
            if self.skip_from is None:
                self._queue.append((block, text))
                self._schedule()
                return
            if block.position() > self.skip_from or (language, text) not in _token_cache:
                return
        elif _lexer(language) is None:  # (cached: the queue's worker looked it up)
            return
        self._apply(language, text)

    def _apply(self, language: str, text: str) -> None:
        colors = theme.colors()
        for start, length, ttype in tokens(language, text):
            fmt = _format(colors, ttype)
            if fmt is not None:
                self.setFormat(start, length, fmt)

    def _schedule(self) -> None:
        if not self._is_scheduled:
            self._is_scheduled = True
            QTimer.singleShot(YIELD_MS, self, self._work)

    def _work(self) -> None:
        self._is_scheduled = False
        if not _warm.is_set():  # the first lexers are still being imported on their thread
            self._is_scheduled = True
            QTimer.singleShot(WARM_WAIT_MS, self, self._work)
            return
        deadline = time.perf_counter() + SLICE_S
        document = self.document()
        while self._queue and time.perf_counter() < deadline:
            block, text = self._queue.popleft()
            if not block.isValid() or block.document() is not document or block.text() != text:
                continue  # replaced since (a streaming block re-rendered)
            language = code_language(block)
            if language is None or _lexer(language) is None:
                continue
            tokens(language, text)
            self._is_applying = True
            try:
                self.rehighlightBlock(block)
            finally:
                self._is_applying = False
        if self._queue:
            self._schedule()
