"""Rendering a reply: the tint's mapping through Markdown, and streaming that lays out only new text.

The streamed body must end exactly as a full render of the same reply (plain text, tinted
ranges, block formats), and while it streams it must look like one (it is built from renders of
its blocks).
"""

from __future__ import annotations

import random

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QTextDocument, QTextFormat

from engine.events import DraftSpan, ReplyText
from ui.chat.markdown_view import (
    MAX_OPEN_BLOCK,
    MAX_STREAM_STEP,
    MessageBody,
    draft_ranges,
    render,
    whole_words,
)
from ui.qt import theme


def tint_ranges(doc: QTextDocument, markdown: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The [start, end) document positions whose characters came from drafted markdown characters."""
    return [
        (start, end) for start, end, _ in draft_ranges(doc, markdown, [DraftSpan(a, b) for a, b in spans])
    ]


REPLY = """# Speculative decoding

A **draft** proposes several tokens and the *target* checks them all in one pass; it keeps the
agreed prefix and adds one token of its own. See [the paper](https://arxiv.org/abs/2211.17192).

```python
def accept(draft, target):
    n = 0

    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return n
```

Three things matter:

1. how often the draft is right,
2. what a draft costs,
3. what a verify batch of *k* tokens costs.

- one
- two

> A quoted line
> and its continuation.

| drafter | cost |
|---------|------|
| n-gram  | none |
| model   | some |

~~~
tilde fence
~~~
Trailing `code` and an ending.
"""


def _reference_tint(doc: QTextDocument, source: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The straightforward per-character matching (what the window did before): the oracle."""
    chars: list[tuple[int, str]] = []
    block = doc.firstBlock()
    while block.isValid():
        chars.extend((block.position() + k, ch) for k, ch in enumerate(block.text()))
        chars.append((block.position() + block.length() - 1, "\n"))
        block = block.next()
    mask = bytearray(len(source))
    for a, b in spans:
        a, b = max(0, a), min(len(source), b)
        if b > a:
            mask[a:b] = b"\x01" * (b - a)
    runs: list[tuple[int, int]] = []
    j = 0
    for position, ch in chars:
        index = -1
        if ch.isspace():
            if j < len(source) and source[j].isspace():
                index, j = j, j + 1
        else:
            k = source.find(ch, j, j + 400)
            if k >= 0:
                index, j = k, k + 1
        if index >= 0 and mask[index] and ch != "\n":
            if runs and runs[-1][1] == position:
                runs[-1] = (runs[-1][0], position + 1)
            else:
                runs.append((position, position + 1))
    return runs


def _drafted(pairs: list[tuple[int, int]]) -> tuple[DraftSpan, ...]:
    return tuple(DraftSpan(a, b) for a, b in pairs)


def _whole(source: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans with their edges on whole words, as the window tints them (whole_words)."""
    return [(s.start, s.end) for s in whole_words(source, _drafted(spans))]


def _random_spans(source: str, seed: int, share: float = 0.4) -> list[tuple[int, int]]:
    rng, spans, position = random.Random(seed), [], 0
    while position < len(source):
        n = rng.randint(1, 24)
        if rng.random() < share:
            spans.append((position, min(len(source), position + n)))
        position += n
    return spans


PARAGRAPHS = (
    "Tandem runs a quantized GGUF **target** model with llama.cpp and lets a cheap **drafter** guess\n"
    "ahead: a small draft model of the same vocabulary, or n-gram lookup in the prompt and the text\n"
    "so far. Each step the drafter proposes several tokens; the target checks them all at once.",
    "## Why it is exact\n\nThe text is exactly what the target alone would write (the same tokens when\n"
    "greedy, the same distribution when sampling), only sooner. See `engine/speculative.py`.",
    "Steps, in order:\n\n1. draft up to *k* tokens,\n2. verify them in one batch,\n3. keep the agreed prefix.",
    "- n-gram lookup costs nothing\n- a draft model costs a forward pass per token\n- both are exact",
)
CODE = (
    "def accept(draft, target):\n    n = 0\n\n    while n < len(draft) and draft[n] == target[n]:\n"
    "        n += 1\n    return n",
    "\n@dataclass\nclass Counters:\n    n_drafted: int = 0\n    n_accepted: int = 0",
    "for step in range(10):\n    tokens = drafter.propose(history, k)\n    kept = verify(tokens)",
)


def _long_reply(n_chars: int) -> str:
    """Paragraphs, headings, lists and fenced code (one opening with an empty line), repeated."""
    parts: list[str] = []
    i = 0
    while sum(len(p) + 2 for p in parts) < n_chars:
        parts.append(PARAGRAPHS[i % len(PARAGRAPHS)].replace("Tandem", f"Tandem ({i})"))
        if i % 2 == 1:
            parts.append("```python\n" + CODE[i % len(CODE)] + "\n```")
        i += 1
    return "\n\n".join(parts)[:n_chars]


def _tinted(doc: QTextDocument) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    block = doc.firstBlock()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().background().color() == theme.LIGHT.draft_tint:
                start, end = fragment.position(), fragment.position() + fragment.length()
                if runs and runs[-1][1] == start:
                    runs[-1] = (runs[-1][0], end)
                else:
                    runs.append((start, end))
            it += 1
        block = block.next()
    return runs


def _look(doc: QTextDocument) -> list[tuple[object, ...]]:
    """What a reader sees, block by block: text, kind of block, list style, code fence, the
    character formats of its fragments."""
    out: list[tuple[object, ...]] = []
    block = doc.firstBlock()
    while block.isValid():
        fmt = block.blockFormat()
        fragments = []
        it = block.begin()
        while not it.atEnd():
            f = it.fragment()
            c = f.charFormat()
            fragments.append(
                (
                    f.text(),
                    c.fontWeight(),
                    c.fontItalic(),
                    c.fontFixedPitch(),
                    c.anchorHref(),
                    c.background().color().name(QColor.NameFormat.HexArgb),
                )
            )
            it += 1
        text_list = block.textList()
        out.append(
            (
                block.text(),
                fmt.headingLevel(),
                fmt.hasProperty(QTextFormat.Property.BlockCodeFence),
                fmt.background().color().name(QColor.NameFormat.HexArgb),
                fmt.indent(),
                fmt.topMargin(),
                fmt.bottomMargin(),
                text_list.format().style() if text_list else None,
                tuple(fragments),
            )
        )
        block = block.next()
    return out


@pytest.mark.parametrize("seed", range(4))
def test_tint_ranges_match_the_per_character_mapping(qapp, seed: int) -> None:
    for source in (REPLY, _long_reply(12_000), "**a**b  c\n\n\n`x`  y", ""):
        spans = _random_spans(source, seed)
        doc = QTextDocument()
        doc.setMarkdown(source, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
        # Each span's edges on whole words first (whole_words: a word is tinted whole or not).
        assert tint_ranges(doc, source, spans) == _reference_tint(doc, source, _whole(source, spans))


def test_render_tints_exactly_the_mapped_ranges_and_shades_code(qapp) -> None:
    spans = _random_spans(REPLY, 7)
    doc = QTextDocument()
    render(doc, REPLY, _drafted(spans), tint=True)
    plain = QTextDocument()
    plain.setMarkdown(REPLY, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    assert _tinted(doc) == _reference_tint(plain, REPLY, _whole(REPLY, spans))
    code = [b for b in _look(doc) if b[2]]
    assert [b[0] for b in code][:2] == ["def accept(draft, target):", "    n = 0"]
    assert len(code) == 7  # both fences, every line (the empty one too)
    block = doc.firstBlock()
    while block.isValid():  # every code line shaded, nothing else
        is_code = block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)
        has_background = block.blockFormat().hasProperty(QTextFormat.Property.BackgroundBrush)
        assert has_background == is_code, block.text()
        block = block.next()


def _stream_in_pieces(body: MessageBody, source: str, spans: list[tuple[int, int]], seed: int) -> int:
    """Feed the text as a reply arrives (a few characters per piece, a few pieces per update);
    returns how many updates."""
    rng, end, updates = random.Random(seed), 0, 0
    while end < len(source):
        end = min(len(source), end + rng.randint(1, 60))
        shown = [(a, min(b, end)) for a, b in spans if a < end]
        body.stream(ReplyText(source[:end], _drafted(shown)), tint=True)
        updates += 1
    return updates


@pytest.mark.parametrize("source_name", ["reply", "long"])
def test_streamed_reply_ends_exactly_as_a_full_render(qtbot, source_name: str) -> None:
    source = REPLY if source_name == "reply" else _long_reply(9_000)
    spans = _random_spans(source, 3)
    body = MessageBody()
    qtbot.addWidget(body)
    body.resize(600, 200)
    body.show()
    _stream_in_pieces(body, source, spans, seed=1)
    full = QTextDocument()
    render(full, source, _drafted(spans), tint=True)
    streamed = body.document()
    if source_name == "long":  # paragraphs, lists and code: it reads the same while it streams
        assert _look(streamed) == _look(full)
    # (Tables and block quotes may differ by an empty block or a margin until the end.)
    # The end: one full render (in two turns of the event loop), identical to rendering the
    # reply from scratch.
    body.finish(ReplyText(source, _drafted(spans)), tint=True)
    assert body._is_settling and body.source_text() == source
    qtbot.waitUntil(lambda: not body._is_settling, timeout=5000)
    assert streamed.toPlainText() == full.toPlainText()
    assert _tinted(streamed) == _tinted(full) and _tinted(full)
    assert _look(streamed) == _look(full)
    full.setDefaultFont(streamed.defaultFont())
    full.setDefaultStyleSheet(streamed.defaultStyleSheet())
    assert streamed.toHtml() == full.toHtml()
    assert body.height() == int(streamed.size().height()) + 4
    assert body.verticalScrollBar().maximum() == 0  # it all shows: a wheel scrolls the chat, not it


def test_streamed_paragraphs_and_fences_look_like_the_full_render_while_streaming(qtbot) -> None:
    """Blocks cut at blank lines and closed fences render alone as they do in the whole."""
    source = (
        "# Title\n\nSome **bold** text and `code`.\n\n```python\nprint('hi')\n\nx = 1\n```\n\n"
        "A list:\n\n- one\n- two\n\nEnd *para*.\n"
    )
    spans = _random_spans(source, 5)
    body = MessageBody()
    qtbot.addWidget(body)
    _stream_in_pieces(body, source, spans, seed=2)
    full = QTextDocument()
    render(full, source, _drafted(spans), tint=True)
    assert _look(body.document()) == _look(full)
    assert _tinted(body.document()) == _tinted(full)


def test_streaming_lays_out_only_the_open_block(qtbot) -> None:
    """After a cut, the blocks before it are not touched again: their QTextBlock objects (and
    layouts) survive every later update."""
    body = MessageBody()
    qtbot.addWidget(body)
    body.stream(ReplyText("First paragraph.\n\nSecond"), tint=True)
    first = body.document().firstBlock()
    layout = first.layout()
    body.stream(ReplyText("First paragraph.\n\nSecond paragraph grows"), tint=True)
    body.stream(ReplyText("First paragraph.\n\nSecond paragraph grows and grows.\n\nThird"), tint=True)
    assert body.document().firstBlock() == first and first.layout() is layout
    assert body.document().toPlainText() == "First paragraph.\nSecond paragraph grows and grows.\nThird"


def test_a_long_code_block_is_cut_inside_and_stays_code(qtbot) -> None:
    lines = [f"    value_{i} = compute({i})  # a line of code" for i in range(200)]
    source = "Code:\n\n```python\n" + "\n".join(lines) + "\n```\n\nAfter."
    assert len(source) > 2 * MAX_OPEN_BLOCK
    body = MessageBody()
    qtbot.addWidget(body)
    _stream_in_pieces(body, source, [], seed=3)
    full = QTextDocument()
    render(full, source, [], tint=True)
    streamed = _look(body.document())
    assert [b[0] for b in streamed] == [b[0] for b in _look(full)]
    assert all(b[2] for b in streamed if b[0].startswith("    value_"))  # every code line is code


def test_tint_toggle_and_restarts_while_streaming(qtbot) -> None:
    body = MessageBody()
    qtbot.addWidget(body)
    spans = _random_spans(REPLY, 9)
    half = len(REPLY) // 2
    body.stream(
        ReplyText(REPLY[:half], _drafted([(a, min(b, half)) for a, b in spans if a < half])), tint=True
    )
    assert _tinted(body.document())
    body.set_tint(False)
    assert _tinted(body.document()) == []
    body.set_tint(True)
    assert _tinted(body.document())
    # Text that does not extend what was shown (a stop string cut it): start over.
    body.stream(ReplyText("Something else entirely.", (DraftSpan(0, 9),)), tint=True)
    assert body.document().toPlainText() == "Something else entirely."
    assert _tinted(body.document()) == [(0, 9)]


def test_a_finish_under_way_gives_way_to_newer_content(qtbot) -> None:
    body = MessageBody()
    qtbot.addWidget(body)
    body.stream(ReplyText("Some *streamed* text"), tint=True)
    body.finish(ReplyText("Some *streamed* text", (DraftSpan(0, 4),)), tint=True)
    body.set_content(ReplyText("A stored message"), tint=True)  # e.g. the tint was switched meanwhile
    assert not body._is_settling
    # Two turns of the event loop later the finish's steps have run (and must have done nothing).
    turns: list[int] = []
    QTimer.singleShot(0, lambda: QTimer.singleShot(0, lambda: QTimer.singleShot(0, lambda: turns.append(1))))
    qtbot.waitUntil(lambda: bool(turns), timeout=5000)
    assert body.document().toPlainText() == "A stored message" and _tinted(body.document()) == []


def test_a_burst_is_laid_out_over_several_turns(qtbot) -> None:
    source = _long_reply(4 * MAX_STREAM_STEP)
    body = MessageBody()
    qtbot.addWidget(body)
    body.stream(ReplyText(source[:100]), tint=True)
    body.stream(ReplyText(source), tint=True)  # far more than one turn's share at once
    assert len(body.document().toPlainText()) < MAX_STREAM_STEP + 100
    assert body.source_text() == source  # what it will show
    full = QTextDocument()
    render(full, source, [], tint=True)
    qtbot.waitUntil(lambda: body.document().toPlainText() == full.toPlainText(), timeout=5000)


POEM = (
    "Roses are red,\nViolets are blue,\nSugar is sweet,\nAnd so are you.\n\nA **bold** line,\nthen `code`\n"
)


def test_a_reply_shows_its_line_breaks_and_its_tint_stays_on_the_same_characters(qtbot) -> None:
    # Bug: a reply with lone line breaks (a poem, an address) showed as one run-on paragraph:
    # Markdown folds a lone line break into a space. Now each shows as a line break, in the
    # rendering only: the document keeps the plain render's blocks and positions, so the tint too.
    drafted = [
        (POEM.index("are blue"), POEM.index("Sugar") + 5),
        (POEM.index("so are"), POEM.index("so are") + 6),
    ]
    plain = QTextDocument()  # how the reply rendered before: Markdown's soft breaks
    plain.setMarkdown(POEM, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    before = tint_ranges(plain, POEM, drafted)
    assert [plain.toPlainText()[a:b] for a, b in before] == ["are blue, Sugar", "so are"]
    body = MessageBody()
    qtbot.addWidget(body)
    body.resize(600, 200)
    body.show()
    _stream_in_pieces(body, POEM, drafted, seed=4)
    streamed = body.document()
    lines = [
        "Roses are red,",
        "Violets are blue,",
        "Sugar is sweet,",
        "And so are you.",
        "A bold line,",
        "then code",
    ]
    assert streamed.toPlainText().splitlines() == lines
    assert streamed.blockCount() == plain.blockCount() == 2  # the same paragraphs, line for line
    assert streamed.firstBlock().layout().lineCount() == 4
    assert _tinted(streamed) == before
    assert [streamed.toPlainText()[a:b] for a, b in before] == ["are blue,\nSugar", "so are"]
    # Only the folded spaces changed: every other character where it was.
    soft, shown = plain.toRawText(), streamed.toRawText()
    assert len(soft) == len(shown)
    assert {(a, b) for a, b in zip(soft, shown, strict=True) if a != b} == {(" ", "\u2028")}
    body.finish(ReplyText(POEM, _drafted(drafted)), tint=True)
    qtbot.waitUntil(lambda: not body._is_settling, timeout=5000)
    assert body.source_text() == POEM  # the text (Copy, Edit, the store) as the model wrote it
    assert streamed.toPlainText().splitlines() == lines and _tinted(streamed) == before
    full = QTextDocument()
    render(full, POEM, _drafted(drafted), tint=True)
    assert _look(streamed) == _look(full)


def test_line_breaks_leave_code_lists_tables_and_headings_as_they_were(qapp) -> None:
    source = (
        REPLY + "\n- an item\n  and its next line\n- a second item\n\n## A heading\nText\non two lines.\n"
    )
    plain = QTextDocument()
    plain.setMarkdown(source, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    doc = QTextDocument()
    render(doc, source, [], tint=False)

    def kinds(d: QTextDocument) -> list[tuple[object, ...]]:
        """_look without the shading of code (render's), the line breaks read as spaces."""
        return [
            (
                text.replace("\u2028", " "),
                *rest[:2],
                *rest[3:7],
                tuple((f[0].replace("\u2028", " "), *f[1:]) for f in fragments),
            )
            for text, *rest, fragments in _look(d)
        ]

    assert kinds(doc) == kinds(plain)  # the same blocks: code, list items, table cells, headings
    shown = doc.toPlainText()
    assert "an item\nand its next line\na second item" in shown  # one item, its line break kept
    assert "keeps the\nagreed prefix" in shown and "A quoted line\nand its continuation." in shown
    assert "Text\non two lines." in shown
    assert "def accept(draft, target):\n    n = 0\n\n    while" in shown  # code as it was
