"""A conversation of any length opens as fast as a short one (review 5, F1: 20,000 messages did not
open within 300 s, and the window reopens the last conversation at every start).

The window shows the latest page of messages (ui.presenters.presenter.PAGE_MESSAGES) and adds
earlier pages on request; the store keeps them all (search, export and Regenerate read it).
"""

from __future__ import annotations

import resource
import sqlite3
import time
from pathlib import Path

from app.store import Store
from ui.presenters.presenter import PAGE_MESSAGES

N_MESSAGES = 20_000


def write_long_conversation(path: Path, n: int = N_MESSAGES) -> int:
    """A store whose newest conversation holds n messages, written in one bulk insert (as an
    import or years of use would leave it), and an older short one."""
    store = Store(path)
    store.add_message(store.create_conversation("an older, short one").id, "user", "hello")
    conversation = store.create_conversation("a very long one")
    store.close()
    db = sqlite3.connect(path)
    now = time.time()
    db.executemany(
        "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at) "
        "VALUES (?, ?, ?, 'complete', ?, ?)",
        (
            (
                conversation.id,
                "user" if i % 2 == 0 else "assistant",
                f"message number {i}: " + ("a few words of padding " * 4),
                now,
                now,
            )
            for i in range(n)
        ),
    )
    db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now + 1, conversation.id))
    db.commit()
    db.close()
    return conversation.id


def test_the_store_reads_a_long_conversation_by_pages(tmp_path: Path) -> None:
    conversation_id = write_long_conversation(tmp_path / "t.db", 1_000)
    store = Store(tmp_path / "t.db")
    page, has_earlier = store.recent_messages(conversation_id, 50)
    assert has_earlier and len(page) == 50
    assert page[-1].content.startswith("message number 999:")
    assert page[0].content.startswith("message number 950:")
    before, has_earlier = store.recent_messages(conversation_id, 50, page[0].id)
    assert before[-1].content.startswith("message number 949:") and has_earlier
    first, has_earlier = store.recent_messages(conversation_id, 50, store.messages(conversation_id)[10].id)
    assert len(first) == 10 and not has_earlier
    assert store.has_messages(conversation_id)
    assert len(store.messages(conversation_id)) == 1_000  # the whole conversation is still there


def test_a_20000_message_conversation_opens_in_a_page_and_answers(
    open_window, wait_reply, tiny_target: Path, qtbot
) -> None:  # type: ignore[no-untyped-def]
    from app import paths

    conversation_id = write_long_conversation(paths.database_path())
    started = time.monotonic()
    window = open_window(tiny_target, draft="ngram", wait_loaded=False, max_tokens=8)
    shown_s = time.monotonic() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n20,000-message conversation shown in {shown_s:.2f} s, max RSS {rss_mb:.0f} MB (under load)")
    assert window.presenter.conversation_id == conversation_id
    # Before: a widget row per message (1,000: 7.7 s; 20,000: not open after 300 s).
    assert shown_s < 60, shown_s
    widgets = window.chat.message_widgets()
    assert len(widgets) == PAGE_MESSAGES
    assert widgets[-1].text().startswith(f"message number {N_MESSAGES - 1}:")
    assert not window.chat.earlier_button.isHidden()

    # Scrolled to the top: the page before comes, above, in order.
    bar = window.chat.scroll_area.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=30_000)
    bar.setValue(bar.minimum())
    qtbot.waitUntil(lambda: len(window.chat.message_widgets()) == 2 * PAGE_MESSAGES, timeout=30_000)
    texts = [w.text() for w in window.chat.message_widgets()]
    assert texts[0].startswith(f"message number {N_MESSAGES - 2 * PAGE_MESSAGES}:")
    assert texts[PAGE_MESSAGES].startswith(f"message number {N_MESSAGES - PAGE_MESSAGES}:")
    # ... and the button brings the one before that.
    qtbot.waitUntil(lambda: window.chat._from_bottom is None, timeout=10_000)
    window.chat.earlier_button.click()
    assert len(window.chat.message_widgets()) == 3 * PAGE_MESSAGES

    # A new message in it is answered; the store keeps every message.
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=60_000)
    window.presenter.send("and one more question")
    wait_reply(window)
    stored = {m.id: m for m in window.presenter.store.messages(conversation_id)}
    assert stored[window.chat.message_widgets()[-1].message_id].role == "assistant"
    assert window.presenter.store.messages(conversation_id)[-1].content
    assert len(window.presenter.store.messages(conversation_id)) == N_MESSAGES + 2
    # A search's match further back than the messages shown: earlier pages come until it is shown.
    window._show_match(f"{N_MESSAGES - 6 * PAGE_MESSAGES}:")
    texts = [w.text() for w in window.chat.message_widgets()]
    assert any(t.startswith(f"message number {N_MESSAGES - 6 * PAGE_MESSAGES}:") for t in texts)
    assert len(texts) <= 8 * PAGE_MESSAGES
    # Search still finds the earliest message; the list still holds the other conversation.
    assert [c.id for c in window.presenter.store.conversations("number 0:")] == [conversation_id]
    assert [c.title for c in window.presenter.store.conversations()] == [
        "a very long one",
        "an older, short one",
    ]
