"""The store's schema version and migrations, and a damaged tandem.db set aside, never deleted,
with a fresh store opened and the user told (issue 28, item 4). Real SQLite files throughout."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app import paths, store
from app.store import Store


def _in_memory(store: Store) -> bool:
    """Whether the session's store is in memory (SQLite names no file for it)."""
    return str(store._db.execute("PRAGMA database_list").fetchone()[2]) == ""


# The schema as every Tandem before versions wrote it (user_version 0).
UNVERSIONED = store.SCHEMA_V1


def version_of(s: Store) -> int:
    """The schema version the store's file is at (SQLite's user_version)."""
    return int(s._db.execute("PRAGMA user_version").fetchone()[0])


def test_a_new_store_has_the_current_schema_version() -> None:
    s = Store()
    assert version_of(s) == len(store.MIGRATIONS) >= 1
    s.close()
    (version,) = sqlite3.connect(paths.database_path()).execute("PRAGMA user_version").fetchone()
    assert version == len(store.MIGRATIONS)


def test_a_store_from_before_versions_is_migrated_and_keeps_its_rows() -> None:
    db = sqlite3.connect(paths.database_path())
    db.executescript(UNVERSIONED)
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('old', 1, 1)")
    db.execute(
        "INSERT INTO messages (conversation_id, role, content, created_at, updated_at) VALUES (1, 'user', 'hi', 1, 1)"
    )
    db.commit()
    db.close()

    s = Store()
    assert s.set_aside is None and s.notice == ""
    assert version_of(s) == len(store.MIGRATIONS)
    assert [c.title for c in s.conversations()] == ["old"]
    assert [m.content for m in s.messages(1)] == ["hi"]


def test_a_new_migration_runs_once_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """How the next schema change is added: append to MIGRATIONS."""
    Store().close()
    # The second one counts its runs in the table the first one made.
    add_column = "ALTER TABLE conversations ADD COLUMN pinned INTEGER NOT NULL DEFAULT 0; INSERT INTO extra DEFAULT VALUES;"
    n = len(store.MIGRATIONS)
    monkeypatch.setattr(
        store,
        "MIGRATIONS",
        [*store.MIGRATIONS, "CREATE TABLE extra (id INTEGER PRIMARY KEY);", add_column],
    )
    s = Store()
    assert version_of(s) == n + 2
    s.close()
    s = Store()  # already there: nothing runs again
    calls = s._db.execute("SELECT COUNT(*) FROM extra").fetchone()[0]
    assert calls == 1 and version_of(s) == n + 2
    s._db.execute("SELECT pinned FROM conversations").fetchall()


def test_a_failing_migration_leaves_the_store_at_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store()
    s.create_conversation("kept")
    s.close()
    n = len(store.MIGRATIONS)
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, "CREATE TABLE half (x); SELECT nonsense();"])
    with pytest.raises(sqlite3.OperationalError):
        Store()
    db = sqlite3.connect(paths.database_path())
    assert db.execute("PRAGMA user_version").fetchone() == (n,)
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchall() == []
    assert db.execute("SELECT title FROM conversations").fetchall() == [("kept",)]


@pytest.mark.parametrize(
    "damage",
    ["not a database", "overwrite pages"],
)
def test_a_damaged_store_is_set_aside_and_a_fresh_one_opened(tandem_home: Path, damage: str) -> None:
    path = paths.database_path()
    if damage == "not a database":
        path.write_text("not a database\n" * 100)
    else:
        s = Store()
        c = s.create_conversation("precious")
        for i in range(400):
            s.add_message(c.id, "user", f"message {i} " + "x" * 300)
        s.close()
        data = bytearray(path.read_bytes())
        page = 4096
        for at in range(2 * page, len(data) - page, 3 * page):  # wreck some b-tree pages, not the header
            data[at : at + 64] = b"\xff" * 64
        path.write_bytes(bytes(data))
    before = path.read_bytes()

    s = Store()

    assert s.set_aside is not None and s.set_aside.parent == tandem_home
    assert s.set_aside.name.startswith("tandem.db.damaged-")
    assert s.set_aside.read_bytes() == before, "the damaged file is kept as it was"
    assert "could not be read" in s.notice and s.set_aside.name in s.notice
    assert "\n" not in s.notice and "***" not in s.notice, "SQLite's own report stays in the log"
    assert s.conversations() == []
    c = s.create_conversation("fresh")
    s.add_message(c.id, "user", "works")
    assert [m.content for m in s.messages(c.id)] == ["works"]


def test_a_store_from_a_newer_tandem_is_left_where_it_is(tandem_home: Path) -> None:
    """Setting it aside would leave the newer Tandem an empty history after a downgrade and an
    upgrade (review reliability-2, item 10): the file stays untouched, the session in memory."""
    path = paths.database_path()
    s = Store()
    s.add_message(s.create_conversation("precious").id, "user", "kept")
    s.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {len(store.MIGRATIONS) + 5}")
    db.commit()
    db.close()
    before = path.read_bytes()

    s = Store()
    assert s.set_aside is None and _in_memory(s)
    assert "newer version of Tandem" in s.notice and "\n" not in s.notice
    c = s.create_conversation("this session")
    s.add_message(c.id, "user", "works")
    assert [m.content for m in s.messages(c.id)] == ["works"]
    s.close()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tandem_home.iterdir() if p.name.startswith("tandem.db.damaged")) == []


def test_a_locked_store_is_not_taken_for_a_damaged_one(tandem_home: Path) -> None:
    """Locked by another program: not damage, the file stays where it is; this session works on
    a store in memory and says so (issue 38: it was a traceback and exit 1)."""
    Store().close()
    holder = sqlite3.connect(paths.database_path())
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        locked = Store(busy_timeout_s=0.1)  # the lock is held for sure: no need to wait out 5 s
        assert _in_memory(locked) and locked.set_aside is None
        assert "another program has it locked" in locked.notice
    finally:
        holder.rollback()
        holder.close()
    assert not list(tandem_home.glob("tandem.db.damaged-*"))
    assert Store().set_aside is None


def test_the_window_opens_on_a_damaged_store_and_says_so(
    open_window, tiny_target: Path, tandem_home: Path
) -> None:  # type: ignore[no-untyped-def]
    paths.database_path().write_bytes(b"this is not a database " * 200)
    window = open_window(tiny_target, wait_loaded=False)
    notice = window.chat.notice
    assert notice.isVisible()
    assert "could not be read" in notice.text() and "tandem.db.damaged-" in notice.text()
    assert "not a database" not in notice.text()  # words for people, not SQLite's
    assert list(tandem_home.glob("tandem.db.damaged-*"))
