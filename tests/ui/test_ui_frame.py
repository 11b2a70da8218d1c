"""The frame around the chat (issue 37): search shows where it matched, jumps to it and clears on
New chat; every notice closes; a Markdown export says each reply's model, date and speed; the
highlight covers whole words; the welcome keeps one line after first use."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.store import MessageStatus, Store
from engine.events import DraftSpan, ReplyText
from ui.chat.conversation_list import ExportFormat
from ui.chat.markdown_view import MessageBody, draft_ranges, whole_words


def _conversation(title: str, reply: str) -> int:
    store = Store()
    try:
        c = store.create_conversation(title)
        store.add_message(c.id, "user", "Tell me about the harbour")
        r = store.add_message(c.id, "assistant", "")
        store.save_reply(r.id, ReplyText(reply), MessageStatus.COMPLETE)
        return c.id
    finally:
        store.close()


def test_search_shows_snippets_jumps_to_the_match_and_clears_on_new_chat(
    qtbot, open_window, tiny_target
) -> None:
    filler = "The weather was calm all week and the boats stayed out late. " * 12
    found = _conversation("Harbour notes", filler + "The committee meets on Tuesday evening at seven.")
    _conversation("Soup", "Leek and potato soup needs an hour.")
    window = open_window(tiny_target)
    window.resize(900, 500)
    window._refresh_conversations()
    qtbot.keyClicks(window.conversations.search, "tuesday")
    items = window.conversations.list
    assert window.conversations.titles() == ["Harbour notes"]
    shown = items.item(0).text()
    assert shown.startswith("Harbour notes\n") and "Tuesday evening" in shown  # the match, in context
    items.setCurrentRow(0)
    assert window.presenter.conversation_id == found
    reply = next(w for w in window.chat.message_widgets() if w.role == "assistant")
    qtbot.waitUntil(lambda: reply.body.textCursor().selectedText() == "Tuesday", timeout=5_000)
    bar = window.chat.scroll_area.verticalScrollBar()
    assert bar.maximum() == 0 or bar.value() > 0  # scrolled down to it
    # New chat: the search is cleared, so the new conversation is in the list.
    qtbot.mouseClick(window.conversations.new_button, Qt.MouseButton.LeftButton)
    assert window.conversations.search.text() == ""
    assert "Soup" in window.conversations.titles()


def test_every_notice_closes(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    window.chat.set_notice("Exported “Harbour notes” to /tmp/x.md.")
    assert not window.chat.notice_close.isHidden()
    qtbot.mouseClick(window.chat.notice_close, Qt.MouseButton.LeftButton)
    assert window.chat.notice.isHidden() and window.chat.notice_close.isHidden()


def test_a_markdown_export_says_each_replys_model_date_and_speed(
    qtbot, open_window, wait_reply, tiny_target, tmp_path: Path
) -> None:
    window = open_window(tiny_target, max_tokens=24)
    window.presenter.send("the cat sat on the mat. the cat sat on the mat.")
    wait_reply(window)
    md = Path(
        window.conversation_actions.export_conversation(None, ExportFormat.MARKDOWN, str(tmp_path / "c.md"))
    ).read_text(encoding="utf-8")
    said = next(line for line in md.splitlines() if "tokens/s" in line)
    stats = window.presenter.store.messages(window.presenter.conversation_id)[-1].stats
    assert stats is not None and stats["model"]
    assert said.startswith(f"*{stats['model']} · 20") and " UTC · " in said
    assert f"{stats['n_generated']} tokens at" in said


def test_the_highlight_covers_whole_words(qtbot) -> None:
    text = "The harbour committee will meet"
    at = text.index("committee")
    # A draft that began mid-word ("com|mittee") and one that ended mid-word ("will me|et").
    spans = [(at + 3, text.index("will") + 4), (text.index("meet") - 1, text.index("meet") + 3)]
    snapped = whole_words(text, [DraftSpan(a, b) for a, b in spans])
    assert [text[s.start : s.end] for s in snapped] == ["committee will", " meet"]
    body = MessageBody()
    qtbot.addWidget(body)
    body.set_content(ReplyText(text, tuple(DraftSpan(a, b) for a, b in spans)), True)
    drafted = [DraftSpan(a, b) for a, b in spans]
    tinted = [body.document().toPlainText()[a:b] for a, b, _ in draft_ranges(body.document(), text, drafted)]
    assert tinted == ["committee will meet"]


def test_the_welcome_keeps_one_line_after_first_use(qtbot, open_window, wait_reply, tiny_target) -> None:
    window = open_window(tiny_target, max_tokens=8)
    welcome = window.welcome
    assert welcome is not None and welcome.isVisible() and not welcome.is_compact
    tall = welcome.sizeHint().height()
    window.presenter.send("hello")
    wait_reply(window)
    assert welcome.isVisible() and welcome.is_compact
    # (Qt lays the welcome out again from a posted event: on a busy machine the reply's end can be
    # seen before it, with the whole welcome's size still cached.)
    qtbot.waitUntil(lambda: welcome.sizeHint().height() < tall * 0.6, timeout=5_000)
    assert welcome.demo_button.isVisible() and welcome.close_button.isVisible()
    window.show_welcome()  # Help ▸ Welcome: whole again
    assert not welcome.is_compact
