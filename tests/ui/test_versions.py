"""Versions of a reply (issue 51): Regenerate and Edit keep the earlier versions of a turn, the
reply shows < 2/3 > to switch, continuing from a version continues its branch; stored (schema v6,
older stores migrated without loss), exported and imported; bad stored versions skipped."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from app.store import MIGRATIONS, MessageStatus, Store, conversation_markdown, read_conversation_file
from ui.chat.conversation_list import ExportFormat


def _texts(store: Store, conversation_id: int) -> list[str]:
    return [m.content for m in store.messages(conversation_id)]


def _regenerate(store: Store, conversation_id: int, reply_id: int, text: str) -> int:
    """What the window does: the reply (and what follows) superseded, a new one written."""
    store.set_status(
        [m.id for m in store.messages(conversation_id) if m.id >= reply_id], MessageStatus.SUPERSEDED
    )
    return store.add_message(conversation_id, "assistant", text).id


def test_versions_of_a_reply_switch_and_keep_their_branches() -> None:
    store = Store()
    c = store.create_conversation("Soup")
    store.add_message(c.id, "user", "a soup?")
    first = store.add_message(c.id, "assistant", "leek", MessageStatus.CANCELLED).id
    store.add_message(c.id, "user", "and then?")
    store.add_message(c.id, "assistant", "cheese")
    second = _regenerate(store, c.id, first, "tomato")
    third = _regenerate(store, c.id, second, "onion")
    assert _texts(store, c.id) == ["a soup?", "onion"]
    assert store.versions_shown(c.id) == {third: (3, 3)}
    # Back to the first version: its own follow-up comes back with it, its status kept.
    hidden, shown = store.choose_version(third, -2)
    assert hidden == [third] and [m.content for m in shown] == ["leek", "and then?", "cheese"]
    assert _texts(store, c.id) == ["a soup?", "leek", "and then?", "cheese"]
    assert {m.id: m.status for m in store.messages(c.id)}[first] == MessageStatus.CANCELLED
    assert store.versions_shown(c.id) == {first: (1, 3)}
    # Continuing from it continues that branch.
    store.add_message(c.id, "user", "more?")
    assert _texts(store, c.id) == ["a soup?", "leek", "and then?", "cheese", "more?"]
    hidden, shown = store.choose_version(first, +1)
    assert [m.content for m in shown] == ["tomato"] and len(hidden) == 4
    hidden, shown = store.choose_version(second, -1)  # the branch below comes back as last seen
    assert [m.content for m in shown] == ["leek", "and then?", "cheese", "more?"]
    assert store.choose_version(first, -1) == ([], [])  # no version before the first
    store.close()


def test_an_edit_keeps_the_earlier_question_as_a_version() -> None:
    store = Store()
    c = store.create_conversation("Edit")
    q1 = store.add_message(c.id, "user", "first").id
    store.add_message(c.id, "assistant", "one")
    store.set_status([m.id for m in store.messages(c.id)], MessageStatus.SUPERSEDED)
    q2 = store.add_message(c.id, "user", "second").id
    store.add_message(c.id, "assistant", "two")
    assert store.versions_shown(c.id) == {q2: (2, 2)}
    _, shown = store.choose_version(q2, -1)
    assert [m.content for m in shown] == ["first", "one"] and shown[0].id == q1
    store.close()


def _v5_store(path: Path) -> None:
    """A store as schema 5 wrote it: a regenerated reply and an edited question, superseded."""
    db = sqlite3.connect(path)
    for step in MIGRATIONS[:5]:
        db.executescript(str(step))
    db.execute("PRAGMA user_version = 5")
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('Old', 0, 0)")
    rows = [
        ("user", "q", "complete"),
        ("assistant", "a1", "superseded"),  # regenerated
        ("assistant", "a2", "complete"),
        ("user", "r1", "superseded"),  # edited
        ("assistant", "b1", "superseded"),
        ("user", "r2", "complete"),
        ("assistant", "b2", "complete"),
    ]
    for role, content, status in rows:
        db.execute(
            "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at) "
            "VALUES (1, ?, ?, ?, 0, 0)",
            (role, content, status),
        )
    db.commit()
    db.close()


def test_an_older_store_takes_the_migration_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    _v5_store(path)
    store = Store(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) >= 6
    assert _texts(store, 1) == ["q", "a2", "r2", "b2"]
    assert [m.content for m in store.messages(1, include_superseded=True)] == [
        "q",
        "a1",
        "a2",
        "r1",
        "b1",
        "r2",
        "b2",
    ]
    assert store.versions_shown(1) == {3: (2, 2), 6: (2, 2)}
    _, shown = store.choose_version(3, -1)
    assert [m.content for m in shown] == ["a1"]
    _, shown = store.choose_version(2, +1)
    assert [m.content for m in shown] == ["a2", "r2", "b2"]
    _, shown = store.choose_version(6, -1)
    assert [m.content for m in shown] == ["r1", "b1"]
    store.close()


def test_bad_stored_versions_are_skipped_never_lost(tmp_path: Path) -> None:
    store = Store()
    c = store.create_conversation("Bad")
    other = store.create_conversation("Other")
    elsewhere = store.add_message(other.id, "user", "elsewhere").id
    q = store.add_message(c.id, "user", "q").id
    a1 = store.add_message(c.id, "assistant", "a1").id
    a2 = _regenerate(store, c.id, a1, "a2")
    db = store._db
    with db:  # another program's rows: a missing parent, a cycle, a parent in another conversation
        for parent, content in ((99_999, "missing"), (None, "cycle"), (elsewhere, "elsewhere's")):
            cur = db.execute(
                "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at, parent_id, "
                "kept_status) VALUES (?, 'assistant', ?, 'superseded', 0, 0, ?, 'complete')",
                (c.id, content, parent),
            )
            if parent is None:
                db.execute("UPDATE messages SET parent_id = ? WHERE id = ?", (cur.lastrowid, cur.lastrowid))
    assert store.bad_versions(c.id) == 3
    assert store.versions_shown(c.id) == {a2: (2, 2)}  # only the good one counts
    assert [m.content for m in store.choose_version(a2, -1)[1]] == ["a1"]
    assert len(store.messages(c.id, include_superseded=True)) == 6  # nothing dropped
    assert q < a1 < a2
    store.close()


def test_export_keeps_every_version_and_import_brings_them_back(tmp_path: Path) -> None:
    store = Store()
    c = store.create_conversation("Soup")
    store.add_message(c.id, "user", "a soup?")
    first = store.add_message(c.id, "assistant", "leek").id
    store.add_message(c.id, "user", "and then?")
    store.add_message(c.id, "assistant", "cheese")
    _regenerate(store, c.id, first, "tomato")
    data = store.export(c.id)
    assert [m["content"] for m in data["messages"]] == ["a soup?", "tomato"]
    assert [m["content"] for m in data["other_versions"]] == ["leek", "and then?", "cheese"]
    markdown = conversation_markdown(data)
    assert "tomato" in markdown and "leek" not in markdown
    assert "*(1 other version of this reply is kept in Tandem.)*" in markdown
    path = tmp_path / "soup.json"
    path.write_text(json.dumps(data))
    imported = store.import_conversation(read_conversation_file(path))
    assert _texts(store, imported.id) == ["a soup?", "tomato"]
    (reply_id,) = store.versions_shown(imported.id)
    assert store.versions_shown(imported.id)[reply_id] == (2, 2)
    _, shown = store.choose_version(reply_id, -1)
    assert [m.content for m in shown] == ["leek", "and then?", "cheese"]
    # A version pointing at a message the file does not hold is skipped with a count.
    data["other_versions"].append({**data["other_versions"][0], "id": 10_000, "parent": 4_242})
    path.write_text(json.dumps(data))
    again = store.import_conversation(read_conversation_file(path))
    assert store.last_import_skipped == 1 and len(store.messages(again.id, include_superseded=True)) == 5
    store.close()


def _shown(window) -> list[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    """The messages the window shows: (role, text, the version label where one shows)."""
    return [
        (w.role, w.text(), w.version_label.text() if w.version_label.isVisibleTo(w) else "")
        for w in window.chat.message_widgets()
    ]


def test_the_window_keeps_versions_through_regenerate_and_edit_and_after_a_restart(
    qtbot, open_window, wait_reply, tiny_target
) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    window = open_window(tiny_target, max_tokens=12, temperature=1.0)
    window.presenter.send("Hello")
    wait_reply(window)
    first = window.chat.message_widgets()[-1].text()
    last_reply = window.chat.message_widgets()[-1]
    qtbot.mouseClick(last_reply.regenerate_button, Qt.MouseButton.LeftButton)
    wait_reply(window)
    second = window.chat.message_widgets()[-1].text()
    assert _shown(window) == [("user", "Hello", ""), ("assistant", second, "2/2")]
    # < : the first version again, then > back to the second.
    reply = window.chat.message_widgets()[-1]
    assert reply.version_prev.isEnabled() and not reply.version_next.isEnabled()
    qtbot.mouseClick(reply.version_prev, Qt.MouseButton.LeftButton)
    assert _shown(window) == [("user", "Hello", ""), ("assistant", first, "1/2")]
    # Continuing from the first version continues its branch.
    window.presenter.send("Go on")
    wait_reply(window)
    assert [(r, v) for r, _, v in _shown(window)] == [
        ("user", ""),
        ("assistant", "1/2"),
        ("user", ""),
        ("assistant", ""),
    ]
    qtbot.mouseClick(window.chat.message_widgets()[1].version_next, Qt.MouseButton.LeftButton)
    assert _shown(window) == [("user", "Hello", ""), ("assistant", second, "2/2")]

    # Edit: the earlier question is a version of the new one.
    user = window.chat.message_widgets()[0]
    qtbot.mouseClick(user.edit_button, Qt.MouseButton.LeftButton)
    window.chat.input.setPlainText("Hello again")
    qtbot.keyClick(window.chat.input, Qt.Key.Key_Return)
    wait_reply(window)
    shown = _shown(window)
    assert shown[0] == ("user", "Hello again", "2/2") and len(shown) == 2
    conversation_id = window.presenter.conversation_id
    window.shutdown()

    # After a restart: the same conversation, the same versions, still switchable.
    window = open_window(tiny_target, max_tokens=12)
    window.presenter.select_conversation(conversation_id)
    assert _shown(window)[0] == ("user", "Hello again", "2/2")
    qtbot.mouseClick(window.chat.message_widgets()[0].version_prev, Qt.MouseButton.LeftButton)
    assert [(r, t) for r, t, _ in _shown(window)] == [("user", "Hello"), ("assistant", second)]
    assert _shown(window)[1][2] == "2/2"  # the reply's versions below it, as last chosen


def test_versions_go_out_and_come_back_through_the_windows_export_and_import(
    qtbot, open_window, tiny_target, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    store = Store()
    c = store.create_conversation("Soup")
    store.add_message(c.id, "user", "a soup?")
    first = store.add_message(c.id, "assistant", "leek").id
    _regenerate(store, c.id, first, "tomato")
    store.close()
    window = open_window(tiny_target)
    window.presenter.show_conversation(c.id)
    assert _shown(window) == [("user", "a soup?", ""), ("assistant", "tomato", "2/2")]
    md = Path(
        window.conversation_actions.export_conversation(c.id, ExportFormat.MARKDOWN, str(tmp_path / "c.md"))
    ).read_text(encoding="utf-8")
    assert "tomato" in md and "leek" not in md and "1 other version of this reply is kept" in md
    js = window.conversation_actions.export_conversation(c.id, ExportFormat.JSON, str(tmp_path / "c.json"))
    new_id = window.conversation_actions.import_conversation(js)
    assert new_id is not None and window.presenter.conversation_id == new_id
    assert _shown(window) == [("user", "a soup?", ""), ("assistant", "tomato", "2/2")]
    from PySide6.QtCore import Qt

    qtbot.mouseClick(window.chat.message_widgets()[1].version_prev, Qt.MouseButton.LeftButton)
    assert _shown(window) == [("user", "a soup?", ""), ("assistant", "leek", "1/2")]

    # A file whose version points at a message it does not hold: imported, that version left out.
    data = json.loads(Path(js).read_text(encoding="utf-8"))
    data["other_versions"][0]["parent"] = 9_999
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    assert window.conversation_actions.import_conversation(str(bad)) is not None
    assert _shown(window) == [("user", "a soup?", ""), ("assistant", "tomato", "")]
    assert window.chat.notice.text().endswith(
        "1 version of its messages pointed at messages the file does not hold and was left out."
    )

    # Rows another program wrote (a parent of another conversation): a notice, nothing lost.
    store = Store()
    db = store._db
    with db:
        db.execute(
            "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at, parent_id) "
            "VALUES (?, 'assistant', 'stray', 'superseded', 0, 0, ?)",
            (c.id, new_id * 1000),
        )
    store.close()
    window.presenter.show_conversation(c.id)
    assert window.chat.notice.text().startswith("1 saved version in this conversation point")
    assert _shown(window) == [("user", "a soup?", ""), ("assistant", "tomato", "2/2")]


def test_a_hand_made_file_keeps_its_order_whatever_its_ids(tmp_path: Path) -> None:
    store = Store()
    c = store.create_conversation("Order")
    store.add_message(c.id, "user", "first")
    store.add_message(c.id, "assistant", "second")
    data = store.export(c.id)
    data["messages"][0]["id"], data["messages"][1]["id"] = 7, 3  # ids that say another order
    path = tmp_path / "order.json"
    path.write_text(json.dumps(data))
    imported = store.import_conversation(read_conversation_file(path))
    assert _texts(store, imported.id) == ["first", "second"]
    store.close()


def test_a_regenerated_reply_the_same_as_the_one_it_replaces_says_so_and_why(
    qtbot, open_window, wait_reply, tiny_target
) -> None:  # type: ignore[no-untyped-def]
    """Found walking the real window: greedy, Regenerate wrote the same text again, a control that
    looked like it did nothing."""
    import dataclasses

    window = open_window(tiny_target, max_tokens=12)  # temperature 0
    window.presenter.send("Hello")
    wait_reply(window)
    first = window.chat.message_widgets()[-1]
    assert "Same as" not in first.note.text()
    window.presenter.regenerate()
    wait_reply(window)
    second = window.chat.message_widgets()[-1]
    assert second.text() == first.text() and second.version_label.text() == "2/2"
    said = (
        "Same as version 1: at temperature 0 the model writes the same reply each time; "
        "raise Variety (temperature) in Settings for a different one."
    )
    assert second.note.isVisible() and second.note.text().startswith(said)
    # Sampled but with one word to choose from: the same again, and no claim about temperature 0.
    window.apply_settings(dataclasses.replace(window.presenter.settings, temperature=0.8, top_k=1))
    window.presenter.regenerate()
    wait_reply(window)
    third = window.chat.message_widgets()[-1]
    assert third.text() == first.text()
    assert third.note.text().startswith("Same as version 2.") and "temperature 0" not in third.note.text()
    # A different reply (shorter) says nothing of the kind.
    window.apply_settings(dataclasses.replace(window.presenter.settings, max_tokens=4))
    window.presenter.regenerate()
    wait_reply(window)
    assert "Same as" not in window.chat.message_widgets()[-1].note.text()
