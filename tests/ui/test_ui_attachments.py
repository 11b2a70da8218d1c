"""Attachments in the real window: the attach path and drag and drop (QMimeData), a long paste
offered as a document, chips with their problems in plain words (nothing sent, nothing typed lost),
documents saved with their message in SQLite (a reopened conversation has them; regenerate and
edit use them; the saved copy stands when the file changes), quick actions, and the diff view."""

from __future__ import annotations

import os
import random
import re
import signal
from pathlib import Path

import pytest
from documents_files import write_pdf
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QAction, QColor, QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtWidgets import QApplication

from app.library.documents import document_block, document_from_text, format_size
from app.settings import load_settings
from app.store import Store
from engine.config import EngineConfig
from engine.events import ReplyText
from engine.session import Engine
from ui.chat.attachments import LONG_PASTE_CHARS, about_tokens
from ui.chat.changes import DiffDialog, diff_html, diff_summary, word_diff
from ui.chat.edit_finder import reply_body
from ui.qt import theme

FIB = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"


def drop_files(window, paths: list[Path]) -> None:  # type: ignore[no-untyped-def]
    """Drop files on the chat as a file manager would: a drag enter, then the drop."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    chat = window.chat
    at = QPoint(chat.width() // 2, chat.height() // 2)
    enter = QDragEnterEvent(
        at, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(chat, enter)
    assert enter.isAccepted()
    drop = QDropEvent(
        QPointF(at), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    )
    QApplication.sendEvent(chat, drop)


def chip_texts(window) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.label.text() for c in window.chat.attachments.chips()]


def test_dropped_files_become_chips_and_go_with_the_message(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    notes = tmp_path / "notes.md"
    notes.write_text("# Harbour\nThe committee met on Tuesday.\n")
    pdf = write_pdf(tmp_path / "report.pdf", [["Sales rose four percent."]])
    window = open_window(tiny_target, max_tokens=8)
    drop_files(window, [notes, pdf])
    texts = chip_texts(window)
    assert texts[0].startswith("notes.md · 40 bytes · about ") and texts[0].endswith(" tokens")
    assert texts[1].startswith("report.pdf · ")
    # One removed before sending.
    window.chat.attachments.chips()[1].remove_button.click()
    assert len(chip_texts(window)) == 1

    spy: list = []
    start_reply = window.controller.start_reply
    window.controller.start_reply = lambda turns, **kw: spy.append((turns, kw)) or start_reply(turns, **kw)
    window.chat.input.setPlainText("Summarise it.")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    assert chip_texts(window) == []  # sent: the tray is empty for the next message
    turns, kw = spy[-1]
    assert "The committee met on Tuesday." in turns[-1].content and turns[-1].content.endswith(
        "Summarise it."
    )
    assert kw["documents"] == ("# Harbour\nThe committee met on Tuesday.\n",)

    # Saved with its message: the file changes on disk, the saved copy stands.
    notes.write_text("something else entirely\n")
    conversation_id = window.presenter.conversation_id
    store = Store()
    try:
        ((message_id, documents),) = store.attachments(conversation_id).items()
        assert [d.name for d in documents] == ["notes.md"] and "Tuesday" in documents[0].text
        assert {m.id: m.content for m in store.messages(conversation_id)}[message_id] == "Summarise it."
    finally:
        store.close()

    # Reopened: the message says what it carried; regenerate sends the saved copy again.
    window.presenter.show_conversation(None)
    window.presenter.show_conversation(conversation_id)
    user = next(w for w in window.chat.message_widgets() if w.role == "user")
    assert user.attachments_label.text() == "Attached: notes.md (40 bytes)"
    window.presenter.regenerate()
    wait_reply(window)
    turns, kw = spy[-1]
    assert "The committee met on Tuesday." in turns[-1].content and "something else" not in turns[-1].content

    # Edit: the chips come back with the message; sent again, the new message carries them.
    window.on_chat_edit_requested(message_id)
    assert [c.attachment.name for c in window.chat.attachments.chips()] == ["notes.md"]
    window.chat.input.setPlainText("Summarise it in one line.")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    turns, _ = spy[-1]
    assert "Tuesday" in turns[-1].content and turns[-1].content.endswith("Summarise it in one line.")


def test_the_same_file_attached_twice_is_one_chip_and_goes_once(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    # Bug: dropping a file, then attaching it again, made two chips, and the model read it twice.
    notes = tmp_path / "notes.md"
    notes.write_text("The committee met on Tuesday.\n")
    binary = tmp_path / "photo.txt"
    binary.write_bytes(bytes(range(256)) * 4)
    window = open_window(tiny_target, max_tokens=8)
    drop_files(window, [notes, notes, binary])
    window.chat.attachments.add_paths([notes, binary])  # Attach…, the same files again
    assert [c.attachment.name for c in window.chat.attachments.chips()] == ["notes.md", "photo.txt"]
    window.chat.attachments.chips()[1].remove_button.click()
    spy: list = []
    start_reply = window.controller.start_reply
    window.controller.start_reply = lambda turns, **kw: spy.append(kw) or start_reply(turns, **kw)
    window.chat.input.setPlainText("Summarise it.")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    assert spy[-1]["documents"] == ("The committee met on Tuesday.\n",)


def test_a_file_that_cannot_be_attached_says_why_and_nothing_is_sent(
    qtbot, open_window, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    scan = write_pdf(tmp_path / "scan.pdf", [[]], image_only=True)
    locked = write_pdf(tmp_path / "locked.pdf", [["secret"]], password="pw")
    binary = tmp_path / "photo.txt"
    binary.write_bytes(bytes(range(256)) * 4)
    window = open_window(tiny_target)
    drop_files(window, [scan, locked, binary, tmp_path / "gone.txt"])
    errors = [c.error.text() for c in window.chat.attachments.chips()]
    assert errors == [
        "This PDF has no text in it, only pictures (a scan?). Run text recognition first.",
        "This PDF is locked with a password. Save an unlocked copy first.",
        "This is not a text file. Tandem reads text, Markdown, code, PDF and Word files.",
        "The file is not there any more.",
    ]
    assert not any(c.error.isHidden() for c in window.chat.attachments.chips())
    window.chat.input.setPlainText("What do these say?")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    assert window.chat.input.toPlainText() == "What do these say?"  # nothing typed is lost
    assert window.presenter.conversation_id is None or not Store().messages(window.presenter.conversation_id)
    assert "cannot be attached" in window.chat.notice.text()


def test_a_long_paste_is_offered_as_an_attachment(qtbot, open_window, tiny_target) -> None:  # type: ignore[no-untyped-def]
    window = open_window(tiny_target)
    window.chat.input.setPlainText("Please check: ")
    window.chat.input.moveCursor(window.chat.input.textCursor().MoveOperation.End)
    pasted = "The quick brown fox jumps over the lazy dog.\n" * (LONG_PASTE_CHARS // 40)
    mime = QMimeData()
    mime.setText(pasted)
    window.chat.input.insertFromMimeData(mime)
    assert not window.chat.attachments.paste_offer.isHidden()
    assert f"{len(pasted):,} characters" in window.chat.attachments.paste_label.text()
    window.chat.attachments.paste_attach_button.click()
    assert window.chat.input.toPlainText() == "Please check: "  # the paste left the box for a chip
    (chip,) = window.chat.attachments.chips()
    assert chip.attachment.name == "pasted text" and chip.attachment.document.text == pasted
    # A short paste stays in the box with no offer.
    short = QMimeData()
    short.setText("a few words")
    window.chat.input.insertFromMimeData(short)
    assert window.chat.attachments.paste_offer.isHidden()


def test_quick_actions_put_an_editable_request_in_the_box(qtbot, open_window, tiny_target, tmp_path) -> None:  # type: ignore[no-untyped-def]
    code = tmp_path / "fib.py"
    code.write_text("def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n")
    window = open_window(tiny_target, temperature=0.7)  # the chat's default
    window.chat.attachments.add_paths([code])
    (chip,) = window.chat.attachments.chips()
    actions = {a.text(): a for a in chip.actions_button.menu().actions()}
    assert list(actions) == ["Rewrite", "Fix spelling and grammar", "Translate", "Refactor code"]
    box = window.chat.input
    # A rewrite is not edit work: the chat's sampling stays.
    actions["Rewrite"].trigger()
    assert box.toPlainText().startswith("Rewrite fib.py in clearer words")
    assert window.header.preset_combo.currentText() == "None" and load_settings().temperature == 0.7
    # Refactoring keeps the file: it runs as the edit preset runs it, chosen in the header. It
    # replaces the other action's request, as that was put in the box.
    actions["Refactor code"].trigger()
    assert box.toPlainText().startswith("Refactor the code in fib.py") and "Rewrite" not in box.toPlainText()
    assert window.header.preset_combo.currentText() == "Edit or copy text"
    settings = load_settings()
    assert (settings.temperature, settings.repeat_penalty) == (0.0, 1.0)
    assert chip_texts(window)  # the chip stays: the request goes with it
    # Words the user typed are kept: the request comes below them, and one undo takes it back.
    box.setPlainText("Keep the docstring.")
    actions["Fix spelling and grammar"].trigger()
    assert box.toPlainText() == (
        "Keep the docstring.\n\nFix the spelling and grammar in fib.py. Return the whole text, changing nothing else."
    )
    box.undo()
    assert box.toPlainText() == "Keep the docstring."


def models_count(model: Path, text: str) -> int:
    """The engine's own count of a text, as a part of a prompt, in this process."""
    engine = Engine(EngineConfig(str(model), n_threads=1, n_ctx=512))
    try:
        return len(engine.tokenize(text, add_special=False))
    finally:
        engine.close()


def test_a_chip_shows_the_models_own_token_count(qtbot, open_window, tiny_target, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """About N tokens (characters / 4) until the engine answers, then the model's own count of
    the document as it is sent (its name and fence around its text)."""
    code = tmp_path / "fib.py"
    code.write_text(FIB)
    window = open_window(tiny_target)
    drop_files(window, [code])
    (chip,) = window.chat.attachments.chips()
    document = chip.attachment.document
    estimate = about_tokens(document)
    assert chip.label.text() == f"fib.py · {format_size(document.n_bytes)} · about {estimate:,} tokens"
    qtbot.waitUntil(lambda: "about" not in chip.label.text(), timeout=30_000)
    exact = models_count(tiny_target, document_block(document))
    assert exact != estimate  # this vocabulary has about a token a character: the test can fail
    assert chip.label.text() == f"fib.py · {format_size(document.n_bytes)} · {exact:,} tokens"
    assert chip.n_tokens == exact and not window.chat.attachments._counting


def test_a_chip_added_before_the_engine_loads_is_counted_once_it_has(qtbot, open_window, tiny_target) -> None:  # type: ignore[no-untyped-def]
    window = open_window(tiny_target, wait_loaded=False)
    assert window.controller.info is None  # the engine loads on the event loop: not yet
    window.chat.attachments.add_text(FIB)
    (chip,) = window.chat.attachments.chips()
    # Nothing to ask yet: the estimate stands, and no count is waited for.
    assert chip.label.text().endswith(f" · about {about_tokens(chip.attachment.document):,} tokens")
    assert not window.chat.attachments._counting
    qtbot.waitUntil(lambda: chip.n_tokens is not None, timeout=60_000)
    assert chip.n_tokens == models_count(tiny_target, document_block(chip.attachment.document))


def test_with_its_engine_dead_a_chip_keeps_its_estimate(qtbot, open_window, tiny_target, tmp_path) -> None:  # type: ignore[no-untyped-def]
    notes = tmp_path / "notes.md"
    notes.write_text("# Harbour\nThe committee met on Tuesday.\n")
    window = open_window(tiny_target)
    pid = window.controller.supervisor.pid
    os.kill(pid, signal.SIGKILL)  # what the OOM killer or a native crash does
    qtbot.waitUntil(lambda: window.controller.info is None, timeout=30_000)
    drop_files(window, [notes])
    (chip,) = window.chat.attachments.chips()
    assert (
        chip.label.text() == f"notes.md · 40 bytes · about {about_tokens(chip.attachment.document):,} tokens"
    )
    assert not window.chat.attachments._counting and chip.n_tokens is None  # nothing will come
    assert window.controller.supervisor.pid is None  # and no engine was started for a count


def test_the_diff_shows_changes_and_copies_and_saves_the_new_text(qtbot, tmp_path) -> None:  # type: ignore[no-untyped-def]
    original = document_from_text("Teh cat sat.\nOn the mat.\n", "note.txt")
    reply = "Here it is:\n\n```\nThe cat sat.\nOn the mat.\n```"
    assert reply_body(reply) == "The cat sat.\nOn the mat."
    dialog = DiffDialog(original, reply)
    qtbot.addWidget(dialog)
    shown = dialog.view.toPlainText()
    # The word that changed, in place (a paragraph is often one line: a line diff showed it all
    # twice), taken out struck through and put in underlined: a cue besides colour.
    assert shown == (
        "1 change: 1 word taken out, 1 put in. Taken out: struck through; put in: underlined.\n"
        "TehThe cat sat.\nOn the mat."
    )
    cursor = dialog.view.document().find("Teh")
    assert cursor.charFormat().fontStrikeOut() and not cursor.charFormat().fontUnderline()
    cursor = dialog.view.document().find("The cat")
    cursor.setPosition(cursor.selectionStart() + 1)  # inside "The"
    assert cursor.charFormat().fontUnderline() and not cursor.charFormat().fontStrikeOut()
    dialog.copy()
    assert QGuiApplication.clipboard().text() == "The cat sat.\nOn the mat."
    dialog.save_as(str(tmp_path / "note-fixed.txt"))
    assert (tmp_path / "note-fixed.txt").read_text() == "The cat sat.\nOn the mat.\n"


def test_the_diff_of_a_long_document_keeps_the_lines_around_its_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = "".join(f"Line {i} of the report.\n" for i in range(40))
    edited = original.replace("Line 20 of", "Line 20, revised, of").replace("Line 39 of the report.\n", "")
    pieces = word_diff(original, edited)
    assert ("added", ", revised,") in pieces and ("removed", "Line 39 of the report.\n") in pieces
    assert diff_summary(pieces) == (
        "2 changes: 5 words taken out, 1 put in. Taken out: struck through; put in: underlined."
    )
    shown = re.sub(r"<[^>]+>", "", diff_html(original, edited))
    assert "⋯ 17 unchanged lines ⋯" in shown and "Line 3 of" not in shown and "Line 17 of" in shown
    assert diff_summary(word_diff("a b\n", "a  b")) == "Only spaces or line breaks changed."
    assert diff_summary(word_diff("a b", "a, b")).startswith("1 change to punctuation.")
    assert diff_summary(word_diff("same", "same")) == "The reply is the same as the document."
    for colors in (theme.LIGHT, theme.DARK):  # text on the marks: 4.5:1 at least (WCAG AA)
        monkeypatch.setattr(theme, "_current", colors)  # the theme in use
        for background in re.findall(r"background-color:(#[0-9a-f]{6})", diff_html("a b", "a c")):
            assert theme.contrast(colors.text, QColor(background)) >= 4.5


def test_the_diff_narrows_down_lines_then_sentences_then_words() -> None:
    # Word by word over a whole document froze the window (15 s on 90 KB with five words changed);
    # lines, then sentences, then words find the same words changed.
    paragraph = " ".join(f"Sentence {i} says that the licence covers the work." for i in range(1200))
    edited = paragraph.replace("Sentence 7 says", "Sentence 7 states").replace(
        "Sentence 1100 says", "It says"
    )
    pieces = word_diff(paragraph, edited)
    assert diff_summary(pieces).startswith("2 changes: 3 words taken out, 2 put in.")
    rng = random.Random(7)
    words = (Path(__file__).parents[2] / "resources" / "documents" / "mit.txt").read_text().split(" ")
    for _ in range(20):  # every piece in its place: the original and the reply both come back whole
        original = " ".join(words)
        changed = list(words)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(changed))
            changed[i : i + rng.randint(0, 3)] = rng.choice([[], ["new"], ["two", "words\n"]])
        reply = " ".join(changed)
        pieces = word_diff(original, reply)
        assert "".join(t for kind, t in pieces if kind != "added") == original
        assert "".join(t for kind, t in pieces if kind != "removed") == reply


def test_documents_that_do_not_fit_are_refused_with_the_numbers(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    long = tmp_path / "long.txt"
    long.write_text("The harbour committee met on Tuesday evening. " * 12)  # ~550 tokens here
    window = open_window(tiny_target, n_ctx=512, max_tokens=64)
    window.chat.attachments.add_paths([long])
    window.chat.input.setPlainText("Copy it.")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    notice = window.chat.notice.text()
    # Worded in the window from the failure's numbers, not the engine's sentence.
    assert notice.startswith("No reply: this message and its documents need "), notice
    assert "the model's context holds 512. A context of 1,024 tokens fits in this computer's memory" in notice
    assert window.stats_label.text() == "Ready"  # not "Reading the conversation…" on and on
    store = Store()
    try:
        user, *replies = store.messages(window.presenter.conversation_id)
        assert user.content == "Copy it." and not any(r.content for r in replies)  # kept; nothing generated
        assert store.attachments(window.presenter.conversation_id)[user.id][0].name == "long.txt"
    finally:
        store.close()
    # One click takes the larger context (kept in Settings) and answers the message.
    action = window.chat.notice_action
    assert action.isVisibleTo(window) and action.text() == "Use 1,024 tokens and answer"
    qtbot.mouseClick(action, Qt.MouseButton.LeftButton)
    assert not window.chat.notice.isVisibleTo(window) and not action.isVisibleTo(window)
    answered = [w for w in window.chat._widgets.values() if w.role == "assistant"]
    qtbot.waitUntil(lambda: answered_now(window) != answered, timeout=60_000)  # reloaded, answering
    wait_reply(window)
    assert load_settings().n_ctx == 1024 and window.controller.info.n_ctx == 1024
    store = Store()
    try:
        user, *replies = [
            m for m in store.messages(window.presenter.conversation_id) if m.status != "superseded"
        ]
        assert user.content == "Copy it." and len(replies) == 1 and replies[0].content
    finally:
        store.close()


def answered_now(window) -> list:  # type: ignore[no-untyped-def]
    return [w for w in window.chat._widgets.values() if w.role == "assistant"]


def test_a_long_file_name_does_not_widen_the_window(qtbot, open_window, tiny_target, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Bug: a chip wrote its file's name whole on one line; a 125-character name made the chip
    # 1,047 px at least, and the chat grew past a 900 px window (its buttons cut off).
    name = "quarterly-report-of-the-northern-region-sales-and-marketing-department-final-version-2-reviewed-copy.txt"
    document = tmp_path / name
    document.write_text("The committee met on Tuesday.\n")
    window = open_window(tiny_target, wait_loaded=False)
    window.resize(900, 700)
    drop_files(window, [document])
    (chip,) = window.chat.attachments.chips()
    qtbot.waitUntil(lambda: chip.isVisible())
    assert window.minimumSizeHint().width() <= 900 and chip.minimumSizeHint().width() < 600
    qtbot.waitUntil(lambda: window.width() == 900 and chip.width() <= window.chat.width())
    text = chip.label.text()
    assert text.startswith("quarterly-report-of-the-") and "…" in text and text.endswith(" tokens")
    assert "-copy.txt · " in text  # its extension, its size and its count stay in sight
    assert chip.label.toolTip().startswith(name)  # the whole name on hover


def test_a_reply_to_a_document_offers_its_changes(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    notes = tmp_path / "notes.md"
    notes.write_text("The committee met on Tuesday.\n")
    window = open_window(tiny_target, max_tokens=8)
    window.presenter.send("Hello.")  # a reply to a message without documents: nothing to compare
    wait_reply(window)
    drop_files(window, [notes])
    window.chat.input.setPlainText("Fix it.")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    replies = [w for w in window.chat._widgets.values() if w.role == "assistant"]
    assert [w.changes_button.isVisibleTo(w) for w in replies] == [False, True]
    assert replies[1].changes_button.accessibleName() == "Show the changes to the document"
    qtbot.mouseClick(replies[1].changes_button, Qt.MouseButton.LeftButton)
    (dialog,) = window.findChildren(DiffDialog)
    qtbot.waitUntil(dialog.isVisible)
    assert dialog.document.name == "notes.md" and dialog.edited == reply_body(replies[1].text())
    dialog.close()


def test_an_empty_chat_with_a_document_suggests_what_to_ask_of_it(
    qtbot, open_window, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    code = tmp_path / "fib.py"
    code.write_text(FIB)
    window = open_window(tiny_target, temperature=0.7)
    chat = window.chat
    assert chat.empty_state.demo_row.isVisibleTo(chat) and not chat.empty_state.document_row.isVisibleTo(chat)
    chat.attachments.add_paths([code])
    # The document's own quick actions, named in full, in place of the demo tasks.
    assert chat.empty_state.document_row.isVisibleTo(chat) and not chat.empty_state.demo_row.isVisibleTo(chat)
    assert chat.empty_state.empty_hint.text().startswith("Ask something about fib.py")
    assert [b.text() for b in chat.empty_state.document_buttons] == [
        "Rewrite",
        "Fix spelling and grammar",
        "Translate",
        "Refactor code",
    ]
    qtbot.mouseClick(chat.empty_state.document_buttons[3], Qt.MouseButton.LeftButton)
    assert chat.input.toPlainText().startswith("Refactor the code in fib.py")
    assert window.header.preset_combo.currentText() == "Edit or copy text"  # edit work, as the chip's
    # Removed, the demo tasks come back.
    chat.attachments.chips()[0].remove_button.click()
    assert chat.empty_state.demo_row.isVisibleTo(chat) and not chat.empty_state.document_row.isVisibleTo(chat)
    assert chat.empty_state.document_buttons == []


NOTE = (
    "Dear neighbours,\n\nThe comittee will meet on tusday at the town hall to discus the budjet for "
    "next year. Please bring your ideas untill then, and read the newsleter before you come. We can "
    "not decide without you.\n\nThank you,\nAnna\n"
)
FIXED = (
    "Dear neighbours,\n\nThe committee will meet on Tuesday at the town hall to discuss the budget for "
    "next year. Please bring your ideas until then, and read the newsletter before you come. We cannot "
    "decide without you.\n\nThank you,\nAnna"
)
REMARK = "```\nThis is the complete text with the necessary changes to the original note.txt.\n```"


def _asked_to_fix_the_note(qtbot, open_window, wait_reply, tiny_target, tmp_path):  # type: ignore[no-untyped-def]
    """A window whose conversation attached note.txt and asked for it fixed, the reply written."""
    note = tmp_path / "note.txt"
    note.write_text(NOTE, encoding="utf-8")
    window = open_window(tiny_target, max_tokens=4)
    drop_files(window, [note])
    window.chat.input.setPlainText("Fix the spelling and grammar in note.txt.")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    return window


def test_changes_finds_the_edited_text_beside_a_fenced_remark(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    # Issue 47 (review ux-3 #5): the reply gave the note back rewritten, then a one-line fenced
    # remark; Changes took the remark as the edit ("32 words taken out, 0 put in").
    window = _asked_to_fix_the_note(qtbot, open_window, wait_reply, tiny_target, tmp_path)
    store = window.presenter.store
    reply = store.messages(window.presenter.conversation_id)[-1]
    store.save_reply(reply.id, ReplyText(f"Here is the corrected note:\n\n{FIXED}\n\n{REMARK}"), reply.status)
    dialog = window.conversation_actions.show_reply_diff(reply.id)
    qtbot.addWidget(dialog)
    assert dialog.edited == FIXED
    shown = dialog.view.toPlainText()
    assert shown.startswith("7 changes: 8 words taken out, 7 put in.")  # not "32 words taken out, 0 put in"
    assert "necessary changes" not in shown and dialog.copy_button.isEnabled()
    # A reply with no copy of the note in it says so, rather than striking the whole note out.
    store.save_reply(
        reply.id, ReplyText("Voici la note : le comité se réunit mardi.\n\n" + REMARK), reply.status
    )
    dialog = window.conversation_actions.show_reply_diff(reply.id)
    qtbot.addWidget(dialog)
    assert dialog.view.toPlainText() == "No edited copy of note.txt in this reply."
    assert not dialog.copy_button.isEnabled() and not dialog.save_button.isEnabled()


def test_the_conversation_menu_compares_the_last_reply_with_its_document(
    qtbot, open_window, wait_reply, tiny_target, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    # Bug: the menu's QAction handed its `checked` (False) to show_reply_diff as the reply's id,
    # so Conversation ▸ Compare the reply with its document always said there was no such reply.
    from ui.chat.changes import DiffDialog

    window = _asked_to_fix_the_note(qtbot, open_window, wait_reply, tiny_target, tmp_path)
    action = next(
        a for a in window.findChildren(QAction) if a.text() == "Compare the reply with its &document…"
    )
    action.trigger()
    dialog = next(d for d in window.findChildren(DiffDialog) if d.isVisible())
    qtbot.addWidget(dialog)
    assert dialog.document.name == "note.txt" and not window.chat.notice.isVisible()
