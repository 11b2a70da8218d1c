"""The tint says where each drafted stretch came from: one look (tint and underline) per source,
live while a reply streams, after it ends, and in a conversation reopened from the SQLite file;
the header's legend names the sources shown.

Real widgets under pytest-qt, the real Reply buffer fed TextPieces as the engine yields them, the
real window on a tiny model, the real store on disk. The character formats of the QTextDocument
are read back: what the window paints is what they say.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from PySide6.QtGui import QTextCharFormat, QTextDocument, QTextFormat

from app.host.reply import Reply, ReplyText
from app.settings import Theme
from engine.events import DraftSource, DraftSpan, TextPiece, known_sources
from ui.chat.markdown_view import SOURCE_PROPERTY, UNRECORDED, render
from ui.chat.message_widget import MessageWidget
from ui.presenters.words import LEGEND
from ui.qt import theme

Underline = QTextCharFormat.UnderlineStyle

# "Copied words" from a document, "guessed ones" from the draft model, the rest the target's own.
TEXT = "Copied words, then **guessed ones** and the end."
DRAFTED = (DraftSpan(0, 12, DraftSource.DOCUMENT), DraftSpan(21, 33, DraftSource.MODEL))
UNSOURCED = (DraftSpan(0, 12), DraftSpan(21, 33))


@pytest.fixture(params=["light", "dark"])
def colors(request: pytest.FixtureRequest) -> Iterator[theme.ThemeColors]:
    """Render in each theme (what ThemeManager sets; restored after)."""
    before = theme.colors()
    chosen = theme.LIGHT if request.param == "light" else theme.DARK
    theme._set_current(chosen)
    try:
        yield chosen
    finally:
        theme._set_current(before)


def _char_formats(doc: QTextDocument) -> list[tuple[str, QTextCharFormat]]:
    """Each character of the document (block separators as "\\n") with its format."""
    out: list[tuple[str, QTextCharFormat]] = []
    block = doc.firstBlock()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            out.extend((ch, fragment.charFormat()) for ch in fragment.text())
            it += 1
        out.append(("\n", block.charFormat()))
        block = block.next()
    return out


def _runs_by_source(doc: QTextDocument) -> list[tuple[str, str]]:
    """The tinted runs of a document as (source kept in the format, text), in order."""
    runs: list[tuple[str, str]] = []
    is_in_run = False
    for ch, fmt in _char_formats(doc):
        if not fmt.hasProperty(SOURCE_PROPERTY):
            is_in_run = False
            continue
        source = str(fmt.property(SOURCE_PROPERTY))
        if is_in_run and runs[-1][0] == source:
            runs[-1] = (source, runs[-1][1] + ch)
        else:
            runs.append((source, ch))
        is_in_run = True
    return runs


def _assert_looks(doc: QTextDocument, colors: theme.ThemeColors, expected: Sequence[tuple[str, str]]) -> None:
    """Every character of each expected (source, text), found in order, has its source's tint,
    underline and mark; every other character has no tint and no underline."""
    formats = _char_formats(doc)
    text = "".join(ch for ch, _ in formats)
    tinted_at: dict[int, str] = {}
    at = 0
    for source, piece in expected:
        start = text.index(piece, at)
        tinted_at.update({i: source for i in range(start, start + len(piece))})
        at = start + len(piece)
    for i, (ch, fmt) in enumerate(formats):
        has_background = fmt.hasProperty(QTextFormat.Property.BackgroundBrush)
        background = fmt.background().color() if has_background else None
        if i in tinted_at:
            look = colors.draft_look(tinted_at[i])
            assert background == look.tint, f"{ch!r} at {i}: {background} is not {tinted_at[i]}'s tint"
            assert fmt.underlineStyle() == look.underline and fmt.underlineColor() == look.mark
            assert fmt.property(SOURCE_PROPERTY) == (tinted_at[i] or UNRECORDED)
        else:
            assert background is None or background not in _all_tints(colors), f"{ch!r} at {i} is tinted"
            assert fmt.underlineStyle() == Underline.NoUnderline


def _all_tints(colors: theme.ThemeColors) -> list:  # type: ignore[type-arg]
    return [colors.draft_tint, *(look.tint for look in colors.draft_looks)]


def test_every_source_has_its_own_tint_and_underline_in_both_themes() -> None:
    for colors in (theme.LIGHT, theme.DARK):
        looks = colors.draft_looks
        assert [look.source for look in looks] == ["document", "text", "memory", "model"]
        tints = [look.tint.name() for look in looks] + [colors.draft_tint.name()]
        assert len(set(tints)) == len(tints)  # four sources and the unrecorded one, all different
        # Told apart without colour: each source has an underline style of its own.
        assert len({look.underline for look in looks}) == len(looks)
        assert colors.draft_look("") == theme.DraftLook(
            "", colors.draft_tint, colors.draft_mark, Underline.DotLine
        )
        assert colors.draft_look("something new") == colors.draft_look("")
    assert [look.tint for look in theme.LIGHT.draft_looks] != [look.tint for look in theme.DARK.draft_looks]


def test_a_reply_drafted_from_two_sources_renders_two_tints_at_their_characters(qtbot, colors) -> None:
    widget = MessageWidget(1, "assistant")
    qtbot.addWidget(widget)
    widget.set_content(TEXT, DRAFTED, True)
    doc = widget.body.document()
    assert doc.toPlainText() == "Copied words, then guessed ones and the end."
    _assert_looks(doc, colors, [("document", "Copied words"), ("model", "guessed ones")])
    assert _runs_by_source(doc) == [("document", "Copied words"), ("model", "guessed ones")]
    # The same spans without their sources: one tint, that of text saved without its source.
    widget.set_content(TEXT, UNSOURCED, True)
    assert _runs_by_source(doc) == [(UNRECORDED, "Copied words"), (UNRECORDED, "guessed ones")]
    # Tint off: nothing tinted, whatever the sources.
    widget.set_content(TEXT, DRAFTED, False)
    assert _runs_by_source(doc) == []


def test_the_reply_says_where_its_highlighted_words_came_from(qtbot) -> None:
    widget = MessageWidget(1, "assistant")
    qtbot.addWidget(widget)
    widget.set_content(TEXT, DRAFTED, True)
    said = widget.body.accessibleDescription()
    assert said.startswith("50% of this reply is highlighted")
    assert said.endswith("Guessed from an attached document (25%) and the draft model (25%).")
    assert said in widget.body.toolTip()


def _reply_pieces() -> list[TextPiece]:
    """A reply as the engine yields it: the target's own text, drafted runs from three sources,
    a code block and paragraphs (so the streamed document is cut into blocks)."""
    return [
        TextPiece("Here is the fix", 4, False),
        TextPiece(" from your notes", 3, True, DraftSource.DOCUMENT),
        TextPiece(":\n\n```python\n", 3, False),
        TextPiece("def add(a, b):\n", 5, True, DraftSource.MEMORY),
        TextPiece("    return a + b\n", 5, True, DraftSource.MODEL),
        TextPiece("```\n\nIt adds", 4, False),
        TextPiece(" the two numbers", 3, True, DraftSource.TEXT),
        TextPiece(" and returns", 2, True, DraftSource.MODEL),
        TextPiece(" the sum.\n\nThat is all.", 5, False),
    ]


def test_a_streaming_reply_is_tinted_by_source_as_it_arrives_and_at_its_end(qtbot, colors) -> None:
    widget = MessageWidget(1, "assistant")
    qtbot.addWidget(widget)
    widget.resize(600, 300)
    widget.show()
    reply = Reply(request_id=1)
    for piece in _reply_pieces():
        reply.add(piece)
        widget.stream(reply.shown(), True)
        if piece.source is DraftSource.DOCUMENT:  # tinted as it arrives, not only at the end
            assert _runs_by_source(widget.body.document()) == [("document", " from your notes")]
    expected = [
        ("document", " from your notes"),
        ("memory", "def add(a, b):"),
        ("model", "    return a + b"),
        ("text", " the two numbers"),
        ("model", " and returns"),
    ]
    streamed = widget.body.document()
    assert _runs_by_source(streamed) == expected
    widget.finish(reply.shown(is_final=True), True)
    qtbot.waitUntil(lambda: not widget.body._is_settling, timeout=5000)
    assert _runs_by_source(streamed) == expected
    full = QTextDocument()
    shown = reply.shown(is_final=True)
    render(full, shown.text, shown.spans, True)
    assert _runs_by_source(full) == expected
    _assert_looks(streamed, colors, expected)
    # Code on a tint: the highlighter's colours stay readable on every source's tint.
    qtbot.waitUntil(lambda: widget.body.highlighter.pending == 0, timeout=5000)
    for look in colors.draft_looks:
        assert look.tint in theme.text_backgrounds(colors)


def _save_conversation(replies: Sequence[ReplyText]) -> tuple[int, list[int]]:
    """A conversation in the store file: a question, then each reply."""
    from app.store import MessageStatus, Store

    store = Store()
    try:
        conversation = store.create_conversation("Tints")
        store.add_message(conversation.id, "user", "Please copy my notes")
        ids = []
        for reply in replies:
            message = store.add_message(conversation.id, "assistant", "", MessageStatus.STREAMING)
            store.save_reply(message.id, reply, MessageStatus.COMPLETE)
            ids.append(message.id)
        return conversation.id, ids
    finally:
        store.close()


def test_a_reopened_conversation_keeps_each_stretchs_tint_and_the_legend_names_them(
    qtbot, open_window, tiny_target
) -> None:
    # Saved before the window opens: one reply with sources, one from before sources were kept.
    conversation_id, (sourced_id, older_id) = _save_conversation(
        [ReplyText(TEXT, DRAFTED), ReplyText("An older reply, highlighted.", (DraftSpan(3, 15),))]
    )
    window = open_window(tiny_target)
    window.presenter.show_conversation(conversation_id)
    sourced, older = window.chat.widget_for(sourced_id), window.chat.widget_for(older_id)
    assert sourced is not None and older is not None
    assert _runs_by_source(sourced.body.document()) == [
        ("document", "Copied words"),
        ("model", "guessed ones"),
    ]
    _assert_looks(
        sourced.body.document(), theme.LIGHT, [("document", "Copied words"), ("model", "guessed ones")]
    )
    assert _runs_by_source(older.body.document()) == [(UNRECORDED, "older reply,")]
    _assert_looks(older.body.document(), theme.LIGHT, [("", "older reply,")])

    # The legend: each source shown, by name, on its swatch; what the tint is, and is not.
    header, legend = window.header, window.header.legend
    assert {w.source for w in header.swatches} == {"document", "model", ""}
    assert [(w.source, w.name) for w in header.swatches] == [
        ("document", "Document"),
        ("model", "Draft model"),
        ("", "Older reply"),
    ]
    assert all(w.isVisible() and w.accessibleName() == w.name for w in header.swatches)
    assert "Guessed from an attached document" in header.swatches[0].toolTip()
    _assert_swatch_looks(header, theme.LIGHT)
    assert "the model's own words, confirmed" in legend.text() and "not a change" in legend.text()
    said = legend.accessibleDescription()
    assert "Document (amber, solid underline): from an attached document" in said
    assert "Draft model (violet, wavy underline): from the draft model" in said
    assert "does not mark a change or a difference" in said
    # The switch keeps its name; the legend is its label.
    assert window.header.tint_check.accessibleName() == "Highlight the model's confirmed text"
    assert legend.buddy() is window.header.tint_check

    # Dark: the same stretches, in the dark theme's looks.
    window.theme.set_choice(Theme.DARK)
    try:
        _assert_looks(
            sourced.body.document(), theme.DARK, [("document", "Copied words"), ("model", "guessed ones")]
        )
        _assert_swatch_looks(header, theme.DARK)
    finally:
        window.theme.set_choice(Theme.SYSTEM)

    # A new conversation: the legend says what the tint means, without sources to name.
    window.presenter.show_conversation(None)
    assert header.legend.accessibleDescription() == LEGEND  # no source to name
    assert [w.name for w in header.swatches] == ["Highlighted"]


def _assert_swatch_looks(header, colors: theme.ThemeColors) -> None:  # type: ignore[no-untyped-def]
    """Each swatch is drawn as its source's tinted text: its tint and underline, in its pixels."""
    for swatch in header.swatches:
        fmt = _char_formats(swatch._doc)[1][1]
        look = colors.draft_look(swatch.source)
        assert fmt.background().color() == look.tint and fmt.underlineStyle() == look.underline
        image = swatch.grab().toImage()
        assert image.pixelColor(2, image.height() // 2) == look.tint


def test_hovering_tinted_text_names_its_source(qtbot) -> None:
    from PySide6.QtCore import QEvent, QPoint
    from PySide6.QtGui import QHelpEvent, QTextCursor
    from PySide6.QtWidgets import QApplication, QToolTip

    widget = MessageWidget(1, "assistant")
    qtbot.addWidget(widget)
    widget.resize(600, 200)
    widget.show()
    widget.set_content(TEXT, DRAFTED, True)
    body = widget.body

    def point_at(position: int) -> QPoint:
        cursor = QTextCursor(body.document())
        cursor.setPosition(position)
        return body.cursorRect(cursor).center() + QPoint(3, 0)

    assert body.draft_source_at(point_at(2)) == "document"
    assert body.draft_source_at(point_at(22)) == "model"
    assert body.draft_source_at(point_at(15)) is None  # the target's own words
    spot = point_at(22)
    QApplication.sendEvent(
        body.viewport(), QHelpEvent(QEvent.Type.ToolTip, spot, body.viewport().mapToGlobal(spot))
    )
    assert QToolTip.text().startswith("Guessed from the draft model")
    QToolTip.hideText()


def test_the_legend_names_a_source_as_a_reply_streams_in(qtbot, open_window, wait_reply, tiny_target) -> None:
    # Drafting always (adaptive off), as in test_ui_speculation's tint test: whether drafting pays
    # on this tiny model is the controller's call (since c7740b7 it drafts nothing here, even alone
    # on an idle machine); this test is about the legend, not that call.
    window = open_window(tiny_target, max_tokens=200, adaptive=False)
    # Repetitive messages: the n-gram lookup drafts from the conversation (or an earlier reply).
    for _ in range(3):
        window.presenter.send("abc abc abc abc abc abc abc abc abc abc")
        wait_reply(window)
        widget = window.chat.message_widgets()[-1]
        qtbot.waitUntil(lambda: not widget.body._is_settling, timeout=5000)  # noqa: B023
        if _runs_by_source(widget.body.document()):
            break
    runs = _runs_by_source(widget.body.document())
    assert runs, "n-gram lookup accepted nothing on three repetitive replies"
    assert {source for source, _ in runs} <= {"text", "memory"}
    assert {source for source, _ in runs} <= {w.source for w in window.header.swatches}
    from app.store import Store

    store = Store()
    try:
        saved = store.messages(window.presenter.conversation_id)[-1]
    finally:
        store.close()
    assert known_sources(saved.spans) and set(known_sources(saved.spans)) <= {"text", "memory"}
