"""The store's edges from review 5: a read-only tandem.db in a writable folder (F2), rows outside
`messages` as another program could leave them (F5), conversation files past the import's bounds
(F1) and an import on a full disk (F6). Real SQLite files, the real window."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from app.store import (
    MAX_IMPORT_BYTES,
    MAX_IMPORT_MESSAGES,
    ConversationFileError,
    Store,
    _check_writable,
    read_conversation_file,
)
from tests.app.test_hostile_conversations import write_hostile_rows


def _in_memory(store: Store) -> bool:
    """Whether the session's store is in memory (SQLite names no file for it)."""
    return str(store._db.execute("PRAGMA database_list").fetchone()[2]) == ""


# -- a read-only file in a writable folder


def test_a_read_only_connection_fails_the_write_check(tmp_path: Path) -> None:
    """What SQLite opens where the file cannot be written (its silent fallback): the lock alone
    passed the check (BEGIN IMMEDIATE), and the first real write stopped the window."""
    Store(tmp_path / "t.db").close()
    db = sqlite3.connect(f"{(tmp_path / 't.db').as_uri()}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError):
        _check_writable(db)
    db.close()


def _make_read_only(path: Path) -> None:
    """The file unwritable for this process: chattr +i where it runs as root (0444 binds no root)."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root where chattr +i is not available: the file cannot be made read-only")


def _writable_again(path: Path) -> None:
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o600)


def test_a_read_only_store_opens_in_memory_and_the_window_starts(
    open_window, wait_reply, tiny_target: Path
) -> None:  # type: ignore[no-untyped-def]
    from app import paths

    path = paths.database_path()
    store = Store(path)
    store.add_message(store.create_conversation("kept history").id, "user", "hello")
    store.close()
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    _make_read_only(path)
    try:
        readonly = Store(path)
        assert _in_memory(readonly) and readonly.notice
        assert [c.title for c in readonly.conversations()] == ["kept history"]
        readonly.close()
        # It raised in mark_unfinished_interrupted before:
        window = open_window(tiny_target, draft="ngram", max_tokens=4)
        assert _in_memory(window.presenter.store)
        window.presenter.send("still answered")
        wait_reply(window)
        assert window.presenter.store.messages(window.presenter.conversation_id)[-1].role == "assistant"
    finally:
        _writable_again(path)


# -- rows outside `messages`

MUTATIONS = {
    "system-prompt-blob": "UPDATE conversations SET system_prompt = X'00ff' WHERE id = :c",
    "attach-text-blob": "UPDATE attachments SET text = X'00ff', name = X'ff'",
    "attach-nbytes-text": "UPDATE attachments SET n_bytes = 'lots'",
    "title-blob": "UPDATE conversations SET title = X'41ff42' WHERE id = :c",
    "role-tool": "UPDATE messages SET role = 'tool' WHERE id = (SELECT MIN(id) FROM messages WHERE conversation_id = :c)",
}


def write_edge_rows(path: Path, mutation: str) -> tuple[int, int]:
    """An older conversation and a newer one with a document, then one mutation written as another
    program would (CHECK constraints off for 'role-tool'). Returns (older id, newer id)."""
    from app.document import Document, DocumentKind

    store = Store(path)
    older = store.create_conversation("an older, fine one")
    store.add_message(older.id, "user", "hello")
    newer = store.create_conversation("with a document")
    store.add_message(newer.id, "user", "before")
    store.add_message(newer.id, "assistant", "an answer")
    store.add_message(
        newer.id, "user", "read this", documents=(Document("notes.txt", "some notes", DocumentKind.TEXT, 10),)
    )
    store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA ignore_check_constraints = 1")
    db.execute(MUTATIONS[mutation], {"c": newer.id} if ":c" in MUTATIONS[mutation] else {})
    db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time() + 10, newer.id))
    db.commit()
    db.close()
    return older.id, newer.id


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_stored_row_of_any_kind_is_read_as_an_edge(tmp_path: Path, mutation: str) -> None:
    older, newer = write_edge_rows(tmp_path / "t.db", mutation)
    store = Store(tmp_path / "t.db")
    assert store.set_aside is None  # role-tool: the whole history was set aside as damaged
    assert [c.id for c in store.conversations()] == [newer, older]  # title-blob: it vanished
    conversation = store.conversation(newer)
    assert conversation is not None
    assert isinstance(conversation.title, str) and isinstance(conversation.system_prompt, str)
    for documents in store.attachments(newer).values():
        for d in documents:
            assert isinstance(d.name, str) and isinstance(d.text, str) and isinstance(d.n_bytes, int)
    assert all(m.role in ("user", "assistant", "system") for m in store.messages(newer))
    if mutation == "role-tool":
        assert "break its rules" in store.notice


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_window_starts_opens_and_answers_after_each_mutation(
    open_window, wait_reply, tiny_target: Path, mutation: str
) -> None:  # type: ignore[no-untyped-def]
    from app import paths

    older, newer = write_edge_rows(paths.database_path(), mutation)
    window = open_window(tiny_target, draft="ngram", max_tokens=4)
    assert window.presenter.conversation_id == newer  # opened, not replaced by a new one
    assert {c.id for c in window.presenter.store.conversations()} == {older, newer}
    assert not list(paths.database_path().parent.glob("*.damaged-*"))  # nothing set aside
    window.presenter.send("and now?")  # every send failed with a BLOB system prompt or attachment
    wait_reply(window)
    answer = window.presenter.store.messages(newer)[-1]
    assert answer.role == "assistant" and answer.content


def test_the_older_hostile_rows_still_hold(tmp_path: Path) -> None:
    conversation_id = write_hostile_rows(tmp_path / "t.db")
    assert len(Store(tmp_path / "t.db").messages(conversation_id)) == 7


# -- conversation files past the import's bounds


def _file(tmp_path: Path, n_messages: int, text: str = "m") -> Path:
    message = {"role": "user", "stretches": [{"text": text, "from": "model"}]}
    path = tmp_path / f"c{n_messages}.json"
    path.write_text(
        json.dumps(
            {"format": "tandem-conversation", "version": 1, "title": "t", "messages": [message] * n_messages}
        )
    )
    return path


def test_a_file_past_the_size_limit_is_refused_from_stat(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as f:
        f.truncate(200 * 1024 * 1024)  # 200 MB (sparse: nothing written, nothing read)
    started = time.monotonic()
    with pytest.raises(ConversationFileError) as e:
        read_conversation_file(path)
    assert time.monotonic() - started < 2
    assert str(e.value) == (
        f"big.json is too large to import (200 MB; Tandem imports conversation files of up to "
        f"{MAX_IMPORT_BYTES // 1024 // 1024} MB)."
    )


def test_a_file_of_too_many_messages_is_refused_before_parsing(tmp_path: Path) -> None:
    path = _file(tmp_path, 400_000)  # 25 MB of tiny messages: under the size limit
    assert path.stat().st_size < MAX_IMPORT_BYTES
    started = time.monotonic()
    with pytest.raises(ConversationFileError) as e:
        read_conversation_file(path)
    took = time.monotonic() - started
    print(f"\n400,000-message file refused in {took:.2f} s (under load)")
    assert took < 10  # well under 2 s alone
    assert "holds too many messages to import" in str(e.value) and f"{MAX_IMPORT_MESSAGES:,}" in str(e.value)
    assert read_conversation_file(_file(tmp_path, MAX_IMPORT_MESSAGES))["title"] == "t"  # the limit itself


def test_an_import_on_a_full_disk_says_so_in_one_sentence(
    open_window, tiny_target: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    window = open_window(tiny_target, draft="ngram", wait_loaded=False)
    db = window.presenter.store._db
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "database or disk is full"
    path = _file(tmp_path, 200, "x" * 2000)
    # OperationalError escaped before
    assert window.conversation_actions.import_conversation(str(path)) is None
    notice = window.chat.notice.text()
    assert notice.startswith(f"{path.name} was not imported") and "the disk is full" in notice
    assert "\n" not in notice
    assert [c.title for c in window.presenter.store.conversations()] == []  # nothing of it kept
