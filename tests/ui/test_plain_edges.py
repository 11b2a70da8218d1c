"""The smaller items of issue 47 (review ux-3 #12): plain key names in the shortcut sheet, no
"[Errno -2]" in a download's sentence, New chat opening the empty conversation there is, an export's
title and file name whole and plain, Attach… in the home or last folder, greyed task buttons
readable (4.5:1)."""

from __future__ import annotations

import re
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QKeySequence

from engine.events import DraftSource
from ui.chat.conversation_list import ExportFormat
from ui.qt import theme


def test_the_shortcut_sheet_names_the_keys_people_press() -> None:
    from ui.shortcuts import key_text

    # Qt's bindings for New, Refresh, Help and Quit include keyboard keys few have ("New", "Exit").
    assert key_text([QKeySequence("Ctrl+N"), QKeySequence(Qt.Key.Key_New)]) == "Ctrl+N"
    assert (
        key_text([QKeySequence("F5"), QKeySequence(Qt.Key.Key_Refresh), QKeySequence("Ctrl+R")])
        == "F5, Ctrl+R"
    )
    assert key_text([QKeySequence("Ctrl+Q"), QKeySequence(Qt.Key.Key_Exit)]) == "Ctrl+Q"


def test_a_download_that_cannot_resolve_the_hub_says_so_without_errno() -> None:
    import httpx2

    from app.library.downloads import FileRequest, _hub_error

    error = _hub_error(
        httpx2.ConnectError("[Errno -2] Name or service not known"),
        FileRequest("Qwen/Qwen2.5-1.5B-Instruct-GGUF", "q.gguf"),
        "https://huggingface.co",
        False,
    )
    assert "Errno" not in str(error) and "address was not found: offline?" in str(error)


def test_new_chat_opens_the_empty_conversation_there_is(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target, wait_loaded=False)
    presenter, store = window.presenter, window.presenter.store
    presenter.new_conversation()  # an empty "New conversation"
    written = store.create_conversation("Lifeboats")
    store.add_message(written.id, "user", "Where are the lifeboats?")
    presenter.select_conversation(written.id)
    presenter.new_conversation()  # from a conversation with messages: the empty one again
    empties = [c for c in store.conversations() if not store.has_messages(c.id)]
    assert len(empties) == 1 and presenter.conversation_id == empties[0].id


def test_an_export_has_the_whole_title_and_a_plain_file_name(
    qtbot, open_window, tiny_target, tmp_path
) -> None:
    from ui.chat.conversation_actions import export_title, file_stem

    request = "Here is a short text. Repeat it exactly, word for word."
    window = open_window(tiny_target, wait_loaded=False)
    store = window.presenter.store
    conversation = store.create_conversation(request[:47] + "…")  # as the list cuts a title
    store.add_message(conversation.id, "user", request + "\n\nThe new pier opens in May.")
    data = store.export(conversation.id)
    assert export_title(data) == request
    assert file_stem(export_title(data)) == "Here is a short text Repeat it exactly word for word"
    path = window.conversation_actions.export_conversation(
        conversation.id, ExportFormat.MARKDOWN, str(tmp_path / "c.md")
    )
    assert Path(path).read_text(encoding="utf-8").splitlines()[0] == f"# {request}"


def test_attach_opens_in_the_home_folder_then_the_last_one(qtbot, monkeypatch, tmp_path) -> None:
    from PySide6.QtWidgets import QFileDialog

    from ui.chat import attachments

    asked: list[str] = []
    note = tmp_path / "notes" / "note.txt"

    def dialog(_parent, _title, folder, _filter):  # type: ignore[no-untyped-def]
        asked.append(folder)
        return [str(note)], ""

    monkeypatch.setattr(QFileDialog, "getOpenFileNames", staticmethod(dialog))
    monkeypatch.setattr(attachments, "_last_folder", [])
    attachments.pick_files(None)
    attachments.pick_files(None)
    assert asked == [str(Path.home()), str(note.parent)]


def test_greyed_task_buttons_are_readable() -> None:
    for colors in (theme.LIGHT, theme.DARK):
        sheet = theme.style_sheet(colors)
        text = re.search(r"QPushButton:disabled \{ color: ([^;]+);", sheet)
        assert text is not None and not text[1].startswith("palette(")
        soft = QColor(127, 127, 127, 28) if not colors.is_dark else QColor(255, 255, 255, 16)
        background = theme.over(soft, colors.page)
        assert theme.contrast(QColor(text[1]), background) >= 4.5


def test_conversations_of_one_title_are_told_apart_in_the_list(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target, wait_loaded=False)
    store = window.presenter.store
    for _ in range(2):
        store.add_message(store.create_conversation("Notes").id, "user", "the lifeboat station")
    window.conversations.search.setText("lifeboat")
    qtbot.waitUntil(lambda: window.conversations.list.count() == 2, timeout=5_000)
    lines = [window.conversations.list.item(i).text().split("\n")[0] for i in range(2)]
    assert lines[0] != lines[1] and all(line.startswith("Notes · ") for line in lines)
    assert window.conversations.titles() == ["Notes", "Notes"]
    # The snippet's match in bold, as drawn (the list's delegate).
    from ui.chat.conversation_list import SNIPPET_ROLE, snippet_html

    found = window.conversations.list.item(0).data(SNIPPET_ROLE)
    assert found[0] == lines[0] and "<b>lifeboat</b> station" in snippet_html(*found)
    assert not window.conversations.list.grab().isNull()  # drawn without an error


def test_the_theme_is_in_the_view_menu(qtbot, open_window, tiny_target) -> None:
    from PySide6.QtWidgets import QMenu

    from app.settings import load_settings

    window = open_window(tiny_target, wait_loaded=False)
    menu = window.findChild(QMenu, "themeMenu")
    assert menu is not None and [a.text() for a in menu.actions()] == [
        "Follow the &system",
        "&Light",
        "&Dark",
    ]
    next(a for a in menu.actions() if a.data() == "dark").trigger()
    assert window.theme.choice == "dark" and theme.colors().is_dark
    assert load_settings().theme == "dark"
    next(a for a in menu.actions() if a.data() == "light").trigger()
    assert not theme.colors().is_dark


def test_the_highlight_legend_shows_with_the_chat_only(qtbot, open_window, tiny_target) -> None:
    # Review ux-3 #12: the header legend showed the last conversation's sources over Compare and Models.
    window = open_window(tiny_target, wait_loaded=False)
    header = window.header
    header.set_sources([DraftSource.DOCUMENT, DraftSource.TEXT])
    assert header.legend.isVisibleTo(window) and all(s.isVisibleTo(window) for s in header.swatches)
    window.tabs.setCurrentWidget(window.models_page)
    assert not header.legend.isVisibleTo(window) and not any(s.isVisibleTo(window) for s in header.swatches)
    header.set_sources([DraftSource.MEMORY])  # a source named while the chat is away stays hidden with it
    assert not any(s.isVisibleTo(window) for s in header.swatches)
    window.tabs.setCurrentIndex(0)
    assert header.legend.isVisibleTo(window) and all(s.isVisibleTo(window) for s in header.swatches)


def test_a_search_snippet_cuts_at_whole_words(tmp_path) -> None:
    # Review ux-3 #12: "…goes to the lifeboat stati…" (the snippet cut the word after the match).
    from app.store import Store

    store = Store(tmp_path / "t.db")
    text = (
        "On the first night of the voyage everyone on board practises the drill: "
        "when the alarm sounds, everyone goes to the lifeboat station on deck seven and waits there "
        "until the crew has counted every passenger twice."
    )
    conversation = store.create_conversation("Drill")
    store.add_message(conversation.id, "user", text)
    for search, width in (("lifeboat", 70), ("alarm", 40), ("crew", 30)):
        snippet = store.search_snippets(search, [conversation.id], width)[conversation.id]
        assert search in snippet
        words = snippet.strip("…").split()
        assert all(w in text.split() for w in words), snippet
    store.close()
