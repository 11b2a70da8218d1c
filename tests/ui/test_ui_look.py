"""Themes and text: light/dark (system or chosen), highlighted code blocks with a Copy button."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette, QTextDocument, QTextFormat
from PySide6.QtWidgets import QApplication

from app.settings import Theme
from engine.events import DraftSource, DraftSpan, ReplyText
from ui.chat.markdown_view import MessageBody, render
from ui.presenters.reply_presenter import MessageRow
from ui.qt import theme

CODE_REPLY = "Here:\n\n```python\ndef add(a, b):\n    return a + b  # sum\n```\n\nAnd *more* text.\n"


def _code_line_formats(body: MessageBody) -> dict[str, list[tuple[int, int, str]]]:
    """Each code line's highlighter colours: (start, length, colour)."""
    out = {}
    block = body.document().firstBlock()
    while block.isValid():
        if block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence):
            out[block.text()] = [
                (r.start, r.length, r.format.foreground().color().name()) for r in block.layout().formats()
            ]
        block = block.next()
    return out


def _window_is_dark() -> bool:
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def test_code_blocks_are_highlighted_and_a_copy_button_copies_each(qtbot) -> None:
    body = MessageBody()
    qtbot.addWidget(body)
    body.resize(500, 100)
    body.show()
    body.set_content(ReplyText(CODE_REPLY), tint=True)
    qtbot.waitUntil(lambda: body.highlighter.pending == 0, timeout=5000)
    lines = _code_line_formats(body)
    assert set(lines) == {"def add(a, b):", "    return a + b  # sum"}
    keyword = [f for f in lines["def add(a, b):"] if f[0] == 0]
    assert keyword and keyword[0][1] == 3  # "def" coloured as a keyword
    assert len({colour for *_, colour in lines["    return a + b  # sum"]}) >= 2  # keyword, comment...
    # The colours are the layout's, not the document's: the text's formats stay a plain render's.
    plain = QTextDocument()
    plain.setDefaultFont(body.document().defaultFont())
    plain.setDefaultStyleSheet(body.document().defaultStyleSheet())
    render(plain, CODE_REPLY, [], tint=True)
    assert body.document().toHtml() == plain.toHtml()
    # One Copy button per code block, at its first line; it copies the block's code.
    buttons = [b for b in body._copy_buttons if b.isVisible()]
    assert len(buttons) == 1 and buttons[0].accessibleName() == "Copy code block 1"
    qtbot.mouseClick(buttons[0], Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == "def add(a, b):\n    return a + b  # sum"
    assert body.code_at(body.document().find("return").position()) == QApplication.clipboard().text()
    assert body.code_at(0) is None


def test_the_open_block_is_coloured_once_closed(qtbot) -> None:
    """While streaming, a code block is coloured when it is closed, not on every update."""
    body = MessageBody()
    qtbot.addWidget(body)
    body.show()
    body.stream(ReplyText("Intro.\n\n```python\nx = 1\n"), tint=True)
    qtbot.waitUntil(lambda: body.highlighter.pending == 0, timeout=5000)  # nothing left to colour...
    assert not any(_code_line_formats(body).values())  # ... and the open block was not coloured
    assert not [b for b in body._copy_buttons if b.isVisible()]  # no buttons mid-stream
    body.stream(ReplyText("Intro.\n\n```python\nx = 1\nimport os\n```\n\nAfter."), tint=True)
    qtbot.waitUntil(lambda: all(_code_line_formats(body).values()), timeout=5000)
    body.finish(ReplyText("Intro.\n\n```python\nx = 1\nimport os\n```\n\nAfter."), tint=True)
    qtbot.waitUntil(lambda: not body._is_settling and body.highlighter.pending == 0, timeout=5000)
    assert all(_code_line_formats(body).values())
    assert len([b for b in body._copy_buttons if b.isVisible()]) == 1


def test_theme_choice_and_system_scheme(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target, theme="system")
    try:
        assert window.theme.choice == "system" and not theme.colors().is_dark  # offscreen is light
        assert not _window_is_dark()
        window.chat.add_row(MessageRow(1, "assistant", CODE_REPLY, (DraftSpan(0, 4),)))
        widget = window.chat.widget_for(1)
        assert widget is not None
        light_code = _wait_code_colour(qtbot, widget.body)

        # Settings: Dark. The palette, the draft tint, code colours and the chart follow.
        from ui.settings.settings_dialog import SettingsDialog

        dialog = SettingsDialog(window.presenter.settings, False, window)
        dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
        window.apply_settings(dialog.result_settings())
        assert window.presenter.settings.theme == "dark" and theme.colors().is_dark and _window_is_dark()
        assert (
            theme.colors().draft_look(DraftSource.NONE).tint
            == theme.DARK.draft_tint
            != theme.LIGHT.draft_tint
        )
        assert _tint_in(widget.body) == theme.DARK.draft_tint
        dark_code = _wait_code_colour(qtbot, widget.body, not_equal=light_code)
        assert dark_code != light_code

        # Back to System: the desktop's scheme (light here) ...
        window.apply_settings(dataclasses.replace(window.presenter.settings, theme=Theme.SYSTEM))
        assert not _window_is_dark() and _tint_in(widget.body) == theme.LIGHT.draft_tint
        # ... and a desktop that turns dark is followed while the choice is System.
        QApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Dark)
        assert theme.colors().is_dark and _window_is_dark()
        assert _tint_in(widget.body) == theme.DARK.draft_tint
        QApplication.styleHints().colorSchemeChanged.emit(Qt.ColorScheme.Light)
        assert not theme.colors().is_dark and not _window_is_dark()
    finally:
        window.theme.set_choice(Theme.SYSTEM)


def _tint_in(body: MessageBody):  # type: ignore[no-untyped-def]
    block = body.document().firstBlock()
    it = block.begin()
    return it.fragment().charFormat().background().color()


def _wait_code_colour(qtbot, body: MessageBody, not_equal: str | None = None) -> str:  # type: ignore[no-untyped-def]
    def colour() -> str | None:
        formats = _code_line_formats(body).get("def add(a, b):", [])
        return formats[0][2] if formats else None

    qtbot.waitUntil(lambda: colour() is not None and colour() != not_equal, timeout=5000)
    value = colour()
    assert value is not None
    return value


def test_reply_column_keeps_a_readable_width(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    window.resize(2000, 900)
    window.chat.add_row(MessageRow(1, "assistant", "A long line of text. " * 60))
    widget = window.chat.widget_for(1)
    assert widget is not None
    qtbot.waitUntil(lambda: widget.body.width() > 400, timeout=5000)
    chars = widget.body.width() / widget.body.fontMetrics().averageCharWidth()
    assert 60 < chars <= 115


def test_the_model_in_use_is_listed_and_chosen_on_the_models_page(qtbot, open_window, tiny_target) -> None:
    """The model in use (here a file outside the models folder, as the built-in model or
    --model PATH can be) is among the local models, marked, and selected under "Chat with"."""
    window = open_window(tiny_target)
    page = window.models_page
    assert tiny_target.parent != page.models_dir
    qtbot.waitUntil(lambda: page.picker.target_combo.count() > 0, timeout=10_000)
    assert page.picker.target_combo.currentData() == str(tiny_target)
    assert "in use" in page.picker.target_combo.currentText()
    files = [page.local_box.table.item(r, 0).text() for r in range(page.local_box.table.rowCount())]
    assert any(f.endswith("(in use)") and tiny_target.name in f for f in files)
    assert page.picker.use_pair_button.isEnabled()
    # The refresh button keeps it (and a second refresh does not list it twice).
    page.refresh_local_models()
    assert [m.path for m in page.local_models].count(tiny_target) == 1
