"""Conversations and messages in SQLite, at paths.database_path().

Nothing the user wrote is lost: a user message is written before generation starts, a reply is
written as it streams and at its end, and regenerate/edit mark the messages they replace as
"superseded" instead of deleting them: each stays a version of its turn, shown again when
chosen (schema v6: a message's parent, Store.choose_version). Rows of `messages` are in the
order they were written (the autoincrement id). The GUI thread owns the connection; every write is a small transaction
in WAL mode, well under a millisecond on a local disk.

The schema has a version (SQLite's `PRAGMA user_version`) and a history, MIGRATIONS: opening a
store brings it up to the version this build writes, len(MIGRATIONS), one migration at a time,
each in its own transaction. A file that cannot be read as a store (damaged, or not a database
at all) is set aside, renamed beside itself and never deleted, and a fresh store is opened:
`Store.set_aside` says where it went and `Store.notice` says so in a sentence for the user. A
store a newer Tandem wrote is left where it is, untouched, and the session works in memory.

Why this file is long: the schema, its migrations and every query are one contract with the
database file; the conversation file (export and import, at the end) is the part that could leave.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import sqlite3
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from app import paths
from app.document import Document, DocumentKind
from engine.events import DraftSource, DraftSpan, ReplyText, known_sources

log = logging.getLogger(__name__)


class MessageStatus(StrEnum):
    """A message's state, as stored in `messages.status`."""

    COMPLETE = "complete"  # finished normally
    STREAMING = "streaming"  # being written
    CANCELLED = "cancelled"  # the user pressed Stop
    INTERRUPTED = "interrupted"  # the engine (or the app) stopped mid-reply
    SUPERSEDED = "superseded"  # replaced by regenerate/edit


def _status(text: str) -> MessageStatus:
    """A stored status; one this build does not know (a hand-edited row) reads as complete."""
    return MessageStatus(text) if text in list(MessageStatus) else MessageStatus.COMPLETE


# Version 1: the schema of every store written before versions existed (user_version 0), hence
# IF NOT EXISTS: on such a store it changes nothing but the version.
SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    content TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'complete',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    stats_json TEXT,          -- the reply's final numbers (engine.events.Stats.as_dict + extras)
    draft_spans_json TEXT     -- [[start, end], ...] character ranges of content that the draft wrote
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""

# Version 2: full-text search (SQLite FTS5) over conversation titles and message content, kept
# in step by triggers (external-content tables: the text is stored once, in its own table). A
# streaming reply's row is re-indexed at each save (every half second): tokenising 32k characters
# takes a few milliseconds.
SCHEMA_V2_SEARCH = """
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE VIRTUAL TABLE conversations_fts USING fts5(
    title, content='conversations', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER conversations_fts_insert AFTER INSERT ON conversations BEGIN
    INSERT INTO conversations_fts(rowid, title) VALUES (new.id, new.title);
END;
CREATE TRIGGER conversations_fts_delete AFTER DELETE ON conversations BEGIN
    INSERT INTO conversations_fts(conversations_fts, rowid, title) VALUES ('delete', old.id, old.title);
END;
CREATE TRIGGER conversations_fts_update AFTER UPDATE OF title ON conversations BEGIN
    INSERT INTO conversations_fts(conversations_fts, rowid, title) VALUES ('delete', old.id, old.title);
    INSERT INTO conversations_fts(rowid, title) VALUES (new.id, new.title);
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
INSERT INTO conversations_fts(conversations_fts) VALUES ('rebuild');
"""

# The schema's history: MIGRATIONS[n] takes a store from version n to n + 1. To change the schema,
# append one (SQL statements) and add a test that opens a store of the version before; never edit
# one that has shipped. Each runs in one transaction with its new version number, so a store is
# never half migrated.
# Version 3: documents attached to a user message, the text as read when it was sent (the copy that
# stands if the file changes or goes); position keeps their order within the message.
SCHEMA_V3_ATTACHMENTS = """
CREATE TABLE attachments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    n_bytes INTEGER NOT NULL,
    encoding TEXT NOT NULL DEFAULT '',
    language TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL
);
CREATE INDEX attachments_by_message ON attachments(message_id, position);
"""

# Version 4: where each drafted range came from (engine.events.DraftSource values, one per range of
# draft_spans_json): the document, the conversation, an earlier reply, the draft model.
SCHEMA_V4_DRAFT_SOURCES = "ALTER TABLE messages ADD COLUMN draft_sources_json TEXT;"

# Version 5: what replies measured on this machine per (target, drafter) pair, for the pair doctor's
# "measured here". A model is its file name and size (model_key): the same file wherever it lies, a
# different quantisation or a re-download of another revision is another key. Rows outlive the
# conversation they came from (no foreign key): a measurement is about the machine, not the chat.
SCHEMA_V5_PAIR_REPLIES = """
CREATE TABLE pair_replies (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    target TEXT NOT NULL,
    drafter TEXT NOT NULL,
    speedup REAL NOT NULL,
    is_plain_estimate INTEGER NOT NULL,
    n_generated INTEGER NOT NULL,
    message_id INTEGER,
    created_at REAL NOT NULL
);
CREATE INDEX pair_replies_by_pair ON pair_replies(target, drafter);
"""

# Version 6: versions of a turn (Regenerate, Edit): each message knows the one it follows in its
# branch (parent_id: the latest message shown before it when it was written, set by a trigger), so
# a turn's versions are the messages of one role with the same parent. Superseding keeps a
# message's status (kept_status) to restore when its branch is chosen again, and chosen_at says
# which branch below a version was seen last. Older rows: the shown ones chain in order; a
# superseded one follows the latest earlier message of the other role (its turn's question, or
# the reply it answered), its status read as complete.
SCHEMA_V6_VERSIONS = """
ALTER TABLE messages ADD COLUMN parent_id INTEGER;
ALTER TABLE messages ADD COLUMN kept_status TEXT;
ALTER TABLE messages ADD COLUMN chosen_at REAL;
UPDATE messages SET chosen_at = updated_at,
    kept_status = CASE WHEN status = 'superseded' THEN 'complete' END;
UPDATE messages SET parent_id = (
    SELECT MAX(p.id) FROM messages p WHERE p.conversation_id = messages.conversation_id
    AND p.id < messages.id AND p.status != 'superseded'
) WHERE status != 'superseded';
UPDATE messages SET parent_id = (
    SELECT MAX(p.id) FROM messages p WHERE p.conversation_id = messages.conversation_id
    AND p.id < messages.id AND p.role != messages.role
) WHERE status = 'superseded';
CREATE INDEX messages_by_parent ON messages(parent_id);
CREATE TRIGGER messages_version_insert AFTER INSERT ON messages BEGIN
    UPDATE messages SET
        parent_id = COALESCE(new.parent_id, (
            SELECT MAX(p.id) FROM messages p WHERE p.conversation_id = new.conversation_id
            AND p.id < new.id AND p.status != 'superseded'
        )),
        chosen_at = COALESCE(new.chosen_at, new.created_at)
    WHERE id = new.id;
END;
CREATE TRIGGER messages_version_hide AFTER UPDATE OF status ON messages
WHEN new.status = 'superseded' AND old.status != 'superseded' BEGIN
    UPDATE messages SET kept_status = old.status WHERE id = new.id;
END;
"""

MIGRATIONS: list[str] = [
    SCHEMA_V1,
    SCHEMA_V2_SEARCH,
    SCHEMA_V3_ATTACHMENTS,
    SCHEMA_V4_DRAFT_SOURCES,
    SCHEMA_V5_PAIR_REPLIES,
    SCHEMA_V6_VERSIONS,
]


MAX_SEARCH = 1000  # characters of a search that count (more finds nothing more)
EARLIER_VERSION = "earlier version: "  # a search's snippet from a version not shown (search_snippets)

_WORD_BEFORE, _WORD_AFTER = re.compile(r"\S*\Z"), re.compile(r"\S*")  # a snippet's edge words

MIN_PAIR_REPLIES = 3  # fewer measured replies than this: the pair doctor keeps its estimate
PAIR_REPLIES_KEPT = 50  # the latest replies of a pair that its measured figure is made of


def model_key(filename: str, size_bytes: int) -> str:
    """A model file as pair measurements know it: its name and size ("x-Q4_K_M.gguf:4683073536").
    The same on the hub (the doctor reads the size from the header request) and on disk."""
    return f"{Path(filename).name}:{int(size_bytes)}"


# A split model's part: `x-00001-of-00003.gguf` (the hub's listings and a split file on disk).
SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def shard_names(filename: str) -> list[str]:
    """Every part of a split model (`x-00001-of-00003.gguf` -> its three parts), or [filename]."""
    m = SHARD_RE.search(filename)
    if m is None:
        return [filename]
    n = int(m[2])
    return [f"{filename[: m.start()]}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]


def model_key_of_file(path: str | Path) -> str | None:
    """model_key of a file on disk, None where it cannot be read. A split model (its first part,
    `x-00001-of-00003.gguf`) counts all its parts, as the pair doctor counts it on the hub."""
    path = Path(path)
    try:
        size = sum(path.with_name(part).stat().st_size for part in shard_names(path.name))
    except OSError:
        return None
    return model_key(path.name, size)


@dataclass(frozen=True)
class PairMeasurement:
    """What replies with one pair measured on this machine: the median whole-request speedup
    (as each reply's headline computed it) over n_replies replies."""

    speedup: float
    n_replies: int
    is_plain_estimate: bool  # some replies were compared with the engine's estimate of plain speed


def read_pair_measurement(target: str, drafter: str, path: Path | None = None) -> PairMeasurement | None:
    """The measurement of a pair in the store at path (paths.database_path() by default): the
    median of its latest PAIR_REPLIES_KEPT replies, read without opening it as a Store: read-only,
    nothing migrated or set aside (the window may hold it open; the command line and the doctor's
    threads only look). None where the store, the table or enough replies are missing, or the
    file cannot be read."""
    path = path or paths.database_path()
    if not path.is_file():
        return None
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        rows = db.execute(
            "SELECT speedup, is_plain_estimate FROM pair_replies WHERE target = ? AND drafter = ? "
            "ORDER BY id DESC LIMIT ?",
            (target, drafter, PAIR_REPLIES_KEPT),
        ).fetchall()
    except sqlite3.Error:  # an older store (no table yet) or a damaged one: nothing measured
        return None
    finally:
        db.close()
    if len(rows) < MIN_PAIR_REPLIES:
        return None
    return PairMeasurement(statistics.median(float(r[0]) for r in rows), len(rows), any(r[1] for r in rows))


# A store that works but cannot be written (or opened) now: (SQLite's primary result code, words of
# its message, what it means for a sentence), in the order asked.
_ERROR_WORDS = (
    (sqlite3.SQLITE_FULL, "disk is full", "the disk is full"),
    (sqlite3.SQLITE_READONLY, "readonly", "the file is read-only"),
    (sqlite3.SQLITE_BUSY, "locked", "another program has it locked"),
    (sqlite3.SQLITE_CANTOPEN, "unable to open", "it cannot be opened (check the folder's permissions)"),
    (sqlite3.SQLITE_IOERR, None, "the disk could not be read or written"),
)


def store_error_sentence(error: sqlite3.Error) -> str:
    """Why the store could not be read or written, as words for a sentence ("the disk is full")."""
    code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
    text = str(error).lower()
    for error_code, words, said in _ERROR_WORDS:
        if code == error_code or (words is not None and words in text):
            return said
    return str(error).splitlines()[0] if str(error) else type(error).__name__


class StoreDamaged(Exception):
    """The file cannot be used as this build's store (the reason is the message)."""


class StoreFromNewerVersion(StoreDamaged):
    """A later Tandem wrote the store: not damaged, only not this build's to read or change."""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    updated_at: float


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    status: MessageStatus
    stats: dict[str, Any] | None
    spans: tuple[DraftSpan, ...] = ()  # the drafted stretches of content


def _stored_json(text: str | None) -> object:
    """A JSON column as read back; None where it is missing or not JSON (a hand-edited row)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


MAX_EXTRA_ITEMS = 1000  # a stored reply's extra list (its sparkline) keeps at most this many items
MAX_EXTRA_TEXT = 1000  # ... and an extra string at most this many characters


def _clean_extra(value: object, depth: int = 0) -> object:
    """An extra stats value (e.g. the window's sparkline) as plain, bounded JSON: finite numbers,
    short strings, booleans, and lists of them nested at most 2 deep; anything else is None."""
    if value is None or isinstance(value, bool) or _is_number(value):
        return value
    if isinstance(value, str):
        return value[:MAX_EXTRA_TEXT]
    if isinstance(value, list) and depth < 2:
        items = [_clean_extra(v, depth + 1) for v in value[:MAX_EXTRA_ITEMS]]
        return [v for v in items if v is not None]
    return None


def clean_stats(record: object) -> dict[str, Any] | None:
    """A reply's stats as read from outside (an imported file, a stored row): its known numbers
    finite and typed, its text short, its other keys plain bounded JSON (_clean_extra); None where
    it is not a JSON object. What engine.events.StatsRecord.from_dict is then given cannot fail."""
    if not isinstance(record, dict):
        return None
    from engine.events import StatsRecord

    known = {f.name: f for f in fields(StatsRecord) if f.name != "extras"}
    out: dict[str, Any] = {}
    for key, value in list(record.items())[:MAX_EXTRA_ITEMS]:
        if not isinstance(key, str) or len(key) > 100:
            continue
        f = known.get(key)
        if f is None or key in ("speculation", "note", "note_kind", "stop_reason", "reread"):
            cleaned = _clean_extra(value)
            if cleaned is not None:
                out[key] = cleaned
        elif value is None or _is_number(value):  # None: unknown (a plain speed not measured)
            out[key] = value
    return out


def _spans(content: str, spans: object, sources: object) -> tuple[DraftSpan, ...]:
    """The drafted stretches as the two columns keep them, read as an edge: [start, end) pairs of
    integers inside the content, sorted and disjoint (others dropped), with their sources where
    a known one is kept for every range (rows from before sources were kept have none)."""
    raw = spans if isinstance(spans, list) else []
    tags = sources if isinstance(sources, list) and len(sources) == len(raw) else [""] * len(raw)
    kept: list[tuple[int, int, str]] = []
    at = 0
    for span, tag in zip(raw, tags):
        if not (isinstance(span, list | tuple) and len(span) == 2 and all(type(v) is int for v in span)):
            continue
        a, b = span
        if not at <= a < b <= len(content):
            continue
        kept.append((a, b, tag if tag in DRAFT_STRETCH_SOURCES else ""))
        at = b
    every = all(tag for _, _, tag in kept)
    return tuple(DraftSpan(a, b, DraftSource(tag) if every else DraftSource.NONE) for a, b, tag in kept)


def _message(row: sqlite3.Row) -> Message:
    """A stored row of a role this build knows (_shown) as a Message; whatever else a hand-edited or
    older row holds, a Message the window can show (the store is read as an edge: its JSON columns
    are checked like an imported file)."""
    content = row["content"] if isinstance(row["content"], str) else ""
    return Message(
        id=row["id"],
        conversation_id=row["conversation_id"],
        role=row["role"],
        content=content,
        status=_status(row["status"]),
        stats=clean_stats(_stored_json(row["stats_json"])),
        spans=_spans(content, _stored_json(row["draft_spans_json"]), _stored_json(row["draft_sources_json"])),
    )


ROLES = ("user", "assistant", "system")


def _shown(rows: Iterable[sqlite3.Row]) -> list[Message]:
    """Rows of `messages` as Messages, less those whose role this build does not know (a row that
    broke the CHECK on it: the message of another program, not one to show as someone's)."""
    return [_message(r) for r in rows if r["role"] in ROLES]


def _field_text(value: object) -> str:
    """A TEXT column as read back whatever another program put there: a BLOB decoded (U+FFFD for
    bytes that are not UTF-8), a number as its digits, NULL as ""."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _conversation(row: sqlite3.Row) -> Conversation:
    """A stored conversation read as an edge, like _message: every field what its type says."""
    updated_at = row["updated_at"]
    return Conversation(
        int(row["id"]),
        _field_text(row["title"]),
        _field_text(row["system_prompt"]),
        float(updated_at) if _is_number(updated_at) else 0.0,
    )


def _attachment(row: sqlite3.Row) -> Document:
    """A stored attachment read as an edge: text fields as text, a size that is not a whole
    number of bytes as 0."""
    n_bytes = row["n_bytes"]
    return Document(
        _field_text(row["name"]) or "document",
        _field_text(row["text"]),
        DocumentKind(kind) if (kind := _field_text(row["kind"])) in list(DocumentKind) else DocumentKind.TEXT,
        n_bytes if type(n_bytes) is int and n_bytes >= 0 else 0,
        _field_text(row["encoding"]),
        _field_text(row["language"]),
    )


def _is_damage(error: sqlite3.DatabaseError) -> bool:
    """Corruption or not a database at all, as opposed to a lock, a full disk or a permission."""
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    return type(error) is sqlite3.DatabaseError


BUSY_TIMEOUT_S = 5.0  # a lock another program holds is waited on this long (SQLite's default)...
COPY_TIMEOUT_S = 1.0  # ...and, the file given up, its copy for a session in memory read within this


def _make_private(path: Path) -> None:
    """The store and its -wal and -shm are the user's alone (0600): created so (SQLite gives the
    -wal and -shm the main file's mode), or tightened where an older Tandem left them 0644."""
    try:
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        for suffix in ("", "-wal", "-shm"):
            part = path.with_name(path.name + suffix)
            if part.exists() and part.stat().st_mode & 0o077:
                part.chmod(0o600)
    except OSError as e:  # a read-only folder or file: opening says what is wrong
        log.warning("cannot make %s private: %s", path, e)


def _open(target: Path | str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A connection with foreign keys on, whose rows read by column name, and whose TEXT bytes
    that are not UTF-8 (written by another program) read as U+FFFD instead of failing the row.
    A lock another program holds is waited on for busy_timeout_s (SQLite's busy timeout)."""
    db = sqlite3.connect(target, timeout=busy_timeout_s)
    db.row_factory = sqlite3.Row
    db.text_factory = lambda value: value.decode("utf-8", "replace")
    db.execute("PRAGMA foreign_keys=ON")
    return db


# What quick_check says of a row that breaks a CHECK or NOT NULL rule (written with the checks off,
# by another program): the file itself is sound, and reading skips or cleans such rows.
_RULE_BREAK = re.compile(r"(CHECK constraint failed in |NULL value in )\S+$")

RULE_BREAK_NOTICE = (
    "A few saved messages in your conversation history break its rules (another program changed "
    "them); they are left out, and the rest of your history is shown as it was."
)


def _rule_breaks(db: sqlite3.Connection) -> list[str]:
    """quick_check's lines on rows that only break a CHECK or NOT NULL rule, [] where it finds
    nothing; StoreDamaged where it finds more. It reads every page once (milliseconds for a chat
    history): a damaged page is found now, while it can be set aside, not in the middle of a reply."""
    problems = [str(row[0]) for row in db.execute("PRAGMA quick_check(3)")]
    if problems == ["ok"]:
        return []
    if not all(_RULE_BREAK.match(p) for p in problems):
        raise StoreDamaged("; ".join(problems))
    return problems


def _connect(path: Path, busy_timeout_s: float = BUSY_TIMEOUT_S) -> tuple[sqlite3.Connection, list[str]]:
    """Open, check and migrate the store at path; StoreDamaged when it cannot be used. Rows that
    only break a CHECK or NOT NULL rule are not damage: quick_check's lines on them are returned
    with the connection (the rows are skipped or cleaned as they are read)."""
    _make_private(path)
    db = _open(path, busy_timeout_s)
    try:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA secure_delete=ON")  # deleted words are zeroed on disk, not left in free pages
            rule_breaks = _rule_breaks(db)
        except sqlite3.DatabaseError as e:
            if _is_damage(e):
                raise StoreDamaged(str(e)) from None
            raise
        if rule_breaks:
            log.warning("rows of %s break the schema's rules (skipped when read): %s", path, rule_breaks)
        migrate(db)
    except BaseException:
        db.close()
        raise
    return db, rule_breaks


def _is_read_only(path: Path) -> bool:
    """Is the store's file, or the disk it is on, read-only (SQLite then says only that it
    "cannot open" the file, as it cannot make the -shm beside it)?"""
    try:
        if hasattr(os, "statvfs") and os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return True
        return path.exists() and not os.access(path, os.W_OK)
    except OSError:
        return False


def _check_writable(db: sqlite3.Connection) -> None:
    """OperationalError where the store can be read but not written (a read-only file or disk): a
    real write, rolled back. A write lock alone is not enough: where the file cannot be opened for
    writing SQLite silently opens it read-only, and BEGIN IMMEDIATE passes on such a connection."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE _tandem_write_check (x)")
    finally:
        db.rollback()


def _memory_store(path: Path, busy_timeout_s: float = COPY_TIMEOUT_S) -> sqlite3.Connection:
    """A store in memory for a session whose file cannot be written: a copy of the file where it
    can be read (read-only), else empty; brought up to this build's schema."""
    db = _open(":memory:")
    # Read-only first; on a read-only disk SQLite cannot make the -shm a WAL store needs, so then
    # as an immutable file (what the last checkpoint wrote; a -wal left by a crash is not read).
    for query in ("mode=ro", "mode=ro&immutable=1"):
        try:
            source = sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, timeout=busy_timeout_s)
            try:
                # A read first, which gives up after the timeout: backup() waits on a lock for ever.
                source.execute("SELECT count(*) FROM sqlite_master").fetchone()
                source.backup(db)
            finally:
                source.close()
            break
        except sqlite3.Error as e:
            log.warning("the store %s cannot be read (%s, %s)", path, query, e)
    try:
        # An immutable read of a file another program is writing may be torn: checked first.
        _rule_breaks(db)
        migrate(db)
    except (sqlite3.Error, StoreDamaged):  # a copy this build cannot read: start empty
        db.close()
        db = _open(":memory:")
        migrate(db)
    return db


def migrate(db: sqlite3.Connection) -> None:
    """Bring a store up to the version this build writes (one per migration), one migration per
    transaction. A store of a newer version (a later Tandem wrote it) is StoreDamaged: not ours to read."""
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > len(MIGRATIONS):
        raise StoreFromNewerVersion(
            f"it was written by a newer version of Tandem (schema {version}; this one reads up to "
            f"{len(MIGRATIONS)})"
        )
    for n in range(version, len(MIGRATIONS)):
        try:
            # executescript commits whatever is open first; BEGIN..COMMIT inside makes the
            # statements and the new version one transaction.
            db.executescript(f"BEGIN IMMEDIATE;\n{MIGRATIONS[n]}\nPRAGMA user_version = {n + 1};\nCOMMIT;")
        except BaseException:
            if db.in_transaction:
                db.rollback()
            raise
        log.info("store migrated to schema version %d", n + 1)


def set_aside_file(path: Path) -> Path:
    """Rename a store that cannot be used (and its -wal and -shm files) beside itself; never delete."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    for suffix in ("-wal", "-shm", ""):  # the main file last: a crash here leaves it in place
        part = path.with_name(path.name + suffix)
        if part.exists():
            os.replace(part, aside.with_name(aside.name + suffix))
    return aside


class Store:
    def __init__(self, path: Path | None = None, *, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        """Open the store (paths.database_path() by default). A file that cannot be used as one
        is set aside and a fresh store opened: set_aside and notice say so. A file another program
        has locked is waited on busy_timeout_s, then worked on in memory (its copy read within
        at most a second)."""
        self.path = path or paths.database_path()
        self.set_aside: Path | None = None  # where an unusable file was moved at this opening
        self.notice = ""  # a sentence for the user about it, or ""
        self.last_import_skipped = 0  # versions the last import left out (their parent not in the file)
        try:
            self._db, rule_breaks = _connect(self.path, busy_timeout_s)
            _check_writable(self._db)
            if rule_breaks:
                self.notice = RULE_BREAK_NOTICE
        except (sqlite3.OperationalError, StoreFromNewerVersion) as e:
            # Locked by another program, read-only, a folder that cannot be written: not damage.
            # Nor is a store a newer Tandem wrote: setting it aside would empty that Tandem's history
            # when the user goes back to it. The file stays as it is; this session works on a copy in
            # memory, and the notice says so.
            log.error("the conversation store %s cannot be used here (%s); working in memory", self.path, e)
            self._db = _memory_store(self.path, min(COPY_TIMEOUT_S, busy_timeout_s))
            if isinstance(e, StoreFromNewerVersion):
                self.notice = (
                    "Your conversation history was saved by a newer version of Tandem, which this one "
                    "cannot read. It is left untouched for that version; what you write in this session "
                    "is kept only until Tandem closes."
                )
            else:
                why = (
                    "the file or its disk is read-only"
                    if _is_read_only(self.path)
                    else store_error_sentence(e)
                )
                self.notice = (
                    f"Your conversation history in {self.path.parent} cannot be saved to now ({why}). "
                    "It is left untouched; what you write in this session is kept only until Tandem closes."
                )
        except StoreDamaged as e:
            self.set_aside = set_aside_file(self.path)
            log.error(
                "the conversation store %s cannot be used (%s); kept it as %s", self.path, e, self.set_aside
            )
            # SQLite's own words (quick_check's page list) go to the log only.
            self.notice = (
                "Your conversation history could not be read, so a new one was started. The old file "
                f"is kept, untouched, as {self.set_aside.name} in {self.set_aside.parent}."
            )
            self._db, _ = _connect(self.path, busy_timeout_s)

    def mark_unfinished_interrupted(self) -> int:
        """At app start: a reply still "streaming" was cut off by a crash of the whole app."""
        with self._db:
            cur = self._db.execute("UPDATE messages SET status = 'interrupted' WHERE status = 'streaming'")
        return cur.rowcount

    def close(self) -> None:
        self._db.close()

    # conversations

    def create_conversation(self, title: str = "New conversation", system_prompt: str = "") -> Conversation:
        with self._db:
            return _new_conversation(self._db, title, system_prompt)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first. `search`: conversations whose title contains it (case-insensitively), or
        whose title or a message holds every word of it (full-text, words by their start: "recyc"
        finds "recycling"); an earlier version of a turn counts (Regenerate and Edit keep them:
        what a person read there is theirs to find again; search_snippets says where). Only its
        first MAX_SEARCH characters count (SQLite refuses a LIKE pattern over 50,000 bytes)."""
        search = search[:MAX_SEARCH].encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        # As an FTS5 query: each word, quoted (no FTS syntax reaches SQLite from what a person
        # types), as a prefix; all must match.
        query = " ".join('"' + word.replace('"', '""') + '"*' for word in re.findall(r"[^\W_]+", search))
        values: tuple[str, ...]
        if not query:
            where, values = "title LIKE ? ESCAPE '\\'", (pattern,)
        else:
            where = (
                "title LIKE ? ESCAPE '\\' OR id IN (SELECT rowid FROM conversations_fts "
                "WHERE conversations_fts MATCH ?) OR id IN (SELECT m.conversation_id FROM messages_fts "
                "JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts MATCH ?)"
            )
            values = (pattern, query, query)
        if not search:  # every one, whatever its title holds (a BLOB is not LIKE '%%')
            where, values = "1", ()
        rows = self._db.execute(
            "SELECT id, title, system_prompt, updated_at FROM conversations "
            f"WHERE {where} ORDER BY updated_at DESC, id DESC",
            values,
        ).fetchall()
        return [_conversation(r) for r in rows]

    def search_snippets(
        self, search: str, conversation_ids: Iterable[int], width: int = 70
    ) -> dict[int, str]:
        """Where each conversation's messages hold the search (the whole of it, else its first
        word): about `width` characters around the first match, on one line. The messages shown
        first; else an earlier version of a turn (one not shown, kept by Regenerate or Edit), its
        snippet starting EARLIER_VERSION."""
        out: dict[int, str] = {}
        for conversation_id in conversation_ids:
            found = _found(self._db, conversation_id, search)
            if found is not None:
                _, text, at, term = found
                # Out to whole words (a word cut at either edge reads as another: "the lifeboat
                # stati…"), at most 24 more characters at each edge, the match always inside.
                start = max(0, at - width // 3)
                start -= len(_WORD_BEFORE.findall(text, max(0, start - 24), start)[0])
                end = max(start + width, at + len(term))
                end += len(_WORD_AFTER.findall(text, end, end + 24)[0])
                piece = " ".join(text[start:end].split())
                snippet = ("…" if start else "") + piece + ("…" if end < len(text) else "")
                out[conversation_id] = (EARLIER_VERSION if found[0] is not None else "") + snippet
        return out

    def show_version_found(self, conversation_id: int, search: str) -> bool:
        """Where only an earlier version of a turn holds `search` (search_snippets' match), show it
        as choosing it with < > would, turn by turn down to it (kept: a restart shows the same).
        True where what the conversation shows changed."""
        found = _found(self._db, conversation_id, search)
        if found is None or found[0] is None:
            return False
        with self._db:
            return _show_version(self._db, found[0])

    def conversation(self, conversation_id: int) -> Conversation | None:
        r = self._db.execute(
            "SELECT id, title, system_prompt, updated_at FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return _conversation(r) if r else None

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        with self._db:
            self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def set_system_prompt(self, conversation_id: int, system_prompt: str) -> None:
        with self._db:
            self._db.execute(
                "UPDATE conversations SET system_prompt = ? WHERE id = ?", (system_prompt, conversation_id)
            )

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation and its words: its rows, and their entries in the search index
        (an FTS5 'optimize' merges the index, dropping what deleted rows left in older segments);
        secure_delete zeroes the freed pages and a checkpoint takes them out of the -wal file. No
        VACUUM runs (it rewrites the whole file): the file keeps its size, with zeros where the
        words were."""
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            self._db.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
            self._db.execute("INSERT INTO conversations_fts(conversations_fts) VALUES ('optimize')")
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as e:  # a reader holds the -wal: the next checkpoint clears it
            log.info("checkpoint after a deletion postponed: %s", e)

    # messages

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        status: MessageStatus = MessageStatus.COMPLETE,
        documents: Sequence[Document] = (),
    ) -> Message:
        """A message and the documents sent with it (their text as read: it stands if the file
        changes), in one transaction: both kept, or neither."""
        status = MessageStatus(status)
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, status, now, now),
            )
            assert cur.lastrowid is not None
            self._db.executemany(
                "INSERT INTO attachments (message_id, position, name, kind, n_bytes, encoding, language, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (cur.lastrowid, i, d.name, str(d.kind), d.n_bytes, d.encoding, d.language, d.text)
                    for i, d in enumerate(documents)
                ],
            )
            self._db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id))
        return Message(cur.lastrowid, conversation_id, role, content, status, None, ())

    def attachments(self, conversation_id: int, since_id: int = 0) -> dict[int, tuple[Document, ...]]:
        """The documents of a conversation's messages, by message id, in the order they were
        attached; since_id: only those of messages from that id on (a page of the conversation)."""
        rows = self._db.execute(
            "SELECT a.* FROM attachments a JOIN messages m ON m.id = a.message_id "
            "WHERE m.conversation_id = ? AND a.message_id >= ? ORDER BY a.message_id, a.position",
            (conversation_id, since_id),
        ).fetchall()
        found: dict[int, list[Document]] = {}
        for r in rows:
            found.setdefault(int(r["message_id"]), []).append(_attachment(r))
        return {k: tuple(v) for k, v in found.items()}

    def save_reply(
        self, message_id: int, reply: ReplyText, status: MessageStatus, stats: dict[str, Any] | None = None
    ) -> None:
        """Write a reply as it stands (app.host.reply.Reply.shown()): its text, its status, its
        numbers where given, and its drafted ranges in two columns (ranges; sources where every
        one is known), as since schema v4: older builds still read what this one writes."""
        sources = known_sources(reply.spans)
        with self._db:
            self._db.execute(
                "UPDATE messages SET content = ?, status = ?, stats_json = COALESCE(?, stats_json), "
                "draft_spans_json = ?, draft_sources_json = ?, updated_at = ? WHERE id = ?",
                (
                    reply.text,
                    status,
                    json.dumps(stats) if stats is not None else None,
                    json.dumps([[s.start, s.end] for s in reply.spans]),
                    json.dumps(sources) if sources else None,
                    time.time(),
                    message_id,
                ),
            )

    def set_status(self, message_ids: Iterable[int], status: MessageStatus) -> None:
        with self._db:
            self._db.executemany(
                "UPDATE messages SET status = ? WHERE id = ?", [(status, i) for i in message_ids]
            )

    def messages(self, conversation_id: int, include_superseded: bool = False) -> list[Message]:
        where = "" if include_superseded else "AND status != 'superseded'"
        rows = self._db.execute(
            f"SELECT * FROM messages WHERE conversation_id = ? {where} ORDER BY id", (conversation_id,)
        ).fetchall()
        return _shown(rows)

    def recent_messages(
        self, conversation_id: int, limit: int, before_id: int | None = None
    ) -> tuple[list[Message], bool]:
        """A page of the visible messages: the latest `limit` of them (those before message
        before_id, where given), oldest first, and whether earlier ones are left. Read by id
        through the (conversation_id, id) index: as quick at 20,000 messages as at 20."""
        rows = self._db.execute(
            "SELECT * FROM messages WHERE conversation_id = ? AND status != 'superseded' AND id < ? "
            "ORDER BY id DESC LIMIT ?",
            (conversation_id, before_id if before_id is not None else 2**63 - 1, limit + 1),
        ).fetchall()
        return _shown(reversed(rows[:limit])), len(rows) > limit

    def has_messages(self, conversation_id: int) -> bool:
        """Whether the conversation has a visible message (without reading them)."""
        row = self._db.execute(
            "SELECT 1 FROM messages WHERE conversation_id = ? AND status != 'superseded' LIMIT 1",
            (conversation_id,),
        ).fetchone()
        return row is not None

    def recent_exchanges(self, limit: int = 32) -> list[tuple[str, str]]:
        """The latest finished replies, each with the user message it answered, oldest first,
        across conversations; replies since replaced (regenerated, superseded) count too."""
        rows = self._db.execute(
            """
            SELECT u.content, a.content FROM messages a
            JOIN messages u ON u.id = (
                SELECT MAX(id) FROM messages
                WHERE conversation_id = a.conversation_id AND role = 'user' AND id < a.id
            )
            WHERE a.role = 'assistant' AND a.status IN ('complete', 'superseded') AND a.content != ''
            ORDER BY a.id DESC LIMIT ?
            """,
            (limit,),
        ).fetchall()
        return [(str(q), str(a)) for q, a in reversed(rows)]

    # what replies measured per pair (the pair doctor reads it back)

    def add_pair_reply(
        self,
        target: str,
        drafter: str,
        speedup: float,
        *,
        is_plain_estimate: bool,
        n_generated: int,
        message_id: int | None = None,
    ) -> None:
        """Keep one reply's whole-request speedup for a (target, drafter) pair: model_keys, the
        drafter's Speculation.NGRAM for n-gram lookup (kept as its text, "ngram")."""
        with self._db:
            self._db.execute(
                "INSERT INTO pair_replies (target, drafter, speedup, is_plain_estimate, n_generated, "
                "message_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    target,
                    drafter,
                    float(speedup),
                    int(is_plain_estimate),
                    n_generated,
                    message_id,
                    time.time(),
                ),
            )

    # versions of a turn (schema v6)

    def versions_shown(self, conversation_id: int, since_id: int = 0) -> dict[int, tuple[int, int]]:
        """For each message shown (from since_id on: a page) that has other versions: (which one
        it is, counting from 1, of how many). A message whose stored parent is not an earlier
        message of its conversation (a row another program wrote) counts as one alone."""
        siblings = (
            "FROM messages s WHERE s.conversation_id = m.conversation_id AND s.parent_id IS m.parent_id "
            "AND s.role = m.role AND s.id > COALESCE(s.parent_id, 0)"
        )
        rows = self._db.execute(
            f"SELECT m.id, (SELECT COUNT(*) {siblings} AND s.id <= m.id), (SELECT COUNT(*) {siblings}) "
            f"FROM messages m WHERE m.conversation_id = ? AND m.id >= ? AND m.status != 'superseded' "
            f"AND {_GOOD_PARENT}",
            (conversation_id, since_id),
        ).fetchall()
        return {int(r[0]): (int(r[1]), int(r[2])) for r in rows if int(r[2]) > 1}

    def bad_versions(self, conversation_id: int) -> int:
        """Messages whose stored parent is missing, later than them, or of another conversation:
        they are left out of the versions (never of the conversation)."""
        row = self._db.execute(
            f"SELECT COUNT(*) FROM messages m WHERE m.conversation_id = ? AND NOT {_GOOD_PARENT}",
            (conversation_id,),
        ).fetchone()
        return int(row[0])

    def choose_version(self, message_id: int, step: int) -> tuple[list[int], list[Message]]:
        """Show the version `step` away from a shown message (-1: the one before): the message and
        what followed it are hidden, the other version and the branch below it last seen shown.
        (ids hidden, messages shown, in order); nothing where there is no such version."""
        with self._db:
            return _choose_version(self._db, message_id, step)

    # a conversation as a file (below: its format)

    def export(self, conversation_id: int) -> dict[str, Any]:
        """The conversation as shown (superseded messages left out), each message with where
        each stretch came from: the JSON a file holds (conversation_markdown reads it too)."""
        conversation = self.conversation(conversation_id)
        if conversation is None:
            raise ConversationFileError(f"Conversation {conversation_id} does not exist.")
        shown, others = _export_versions(self, conversation_id)
        return {
            "format": CONVERSATION_FORMAT,
            "version": CONVERSATION_FORMAT_VERSION,
            "title": conversation.title,
            "system_prompt": conversation.system_prompt,
            "stretch_sources": STRETCH_SOURCES,
            "messages": shown,
            **({"other_versions": others} if others else {}),
        }

    def import_conversation(self, data: dict[str, Any]) -> Conversation:
        """A conversation from an exported file (checked by read_conversation_file), as a new one.
        All or nothing: the conversation and its messages in one transaction (a failure half-way
        leaves no half conversation behind). Stats are kept as clean_stats makes them."""
        with self._db:
            new = _new_conversation(self._db, str(data["title"]), str(data.get("system_prompt") or ""))
            self.last_import_skipped = _import_messages(self._db, new.id, data, new.updated_at)
        return self.conversation(new.id) or new


def _new_conversation(db: sqlite3.Connection, title: str, system_prompt: str) -> Conversation:
    now = time.time()
    cur = db.execute(
        "INSERT INTO conversations (title, system_prompt, created_at, updated_at) VALUES (?, ?, ?, ?)",
        (title, system_prompt, now, now),
    )
    assert cur.lastrowid is not None
    return Conversation(cur.lastrowid, title, system_prompt, now)


# ---- versions of a turn (schema v6)

# A message's parent as versions trust it: none, or an earlier message of the same conversation.
_GOOD_PARENT = """(m.parent_id IS NULL OR EXISTS (SELECT 1 FROM messages p WHERE p.id = m.parent_id
    AND p.conversation_id = m.conversation_id AND p.id < m.id))"""


def _found(
    db: sqlite3.Connection, conversation_id: int, search: str
) -> tuple[int | None, str, int, str] | None:
    """The first message holding the search (the whole of it, else its first word, case folded),
    the messages shown first, then the earlier versions: (the message's id where it is an earlier
    version, else None; its text; where the term is in it; the term)."""
    words = search.split()
    if not words:
        return None
    rows = db.execute(
        "SELECT id, content, status = 'superseded' AS earlier FROM messages WHERE conversation_id = ? "
        "ORDER BY earlier, id",
        (conversation_id,),
    ).fetchall()
    for term in dict.fromkeys([search.strip(), words[0]]):
        for r in rows:
            text = _field_text(r["content"])
            at = text.casefold().find(term.casefold())
            if at >= 0:
                return (int(r["id"]) if r["earlier"] else None), text, at, term
    return None


def _versions_of(db: sqlite3.Connection, m: sqlite3.Row) -> list[sqlite3.Row]:
    """The versions of a message's turn (itself among them), oldest first: (id, status) rows."""
    return db.execute(
        "SELECT id, status FROM messages WHERE conversation_id = ? AND parent_id IS ? AND role = ? "
        "AND id > COALESCE(parent_id, 0) ORDER BY id",
        (m["conversation_id"], m["parent_id"], m["role"]),
    ).fetchall()


def _show_version(db: sqlite3.Connection, message_id: int) -> bool:
    """Show a message not shown: from its first ancestor not shown down to it, each is chosen
    among its turn's versions in place of the one shown (_choose_version). False where one has no
    version shown to take the place of (a row another program wrote): nothing more is changed."""
    # It and its ancestors through good parents, the first first (a good parent's id is below its
    # child's: no cycle).
    path = db.execute(
        "WITH RECURSIVE up(id) AS (SELECT ? UNION ALL SELECT m.parent_id FROM messages m JOIN up "
        f"ON m.id = up.id WHERE m.parent_id IS NOT NULL AND {_GOOD_PARENT}) SELECT id FROM up ORDER BY id",
        (message_id,),
    ).fetchall()
    changed = False
    for (wanted,) in path:
        m = db.execute("SELECT * FROM messages WHERE id = ?", (wanted,)).fetchone()
        if m["status"] != "superseded":
            continue
        siblings = _versions_of(db, m)
        ids = [int(r[0]) for r in siblings]
        shown = next((int(r[0]) for r in siblings if r[1] != "superseded"), None)
        if shown is None or wanted not in ids:
            return changed
        hidden, _ = _choose_version(db, shown, ids.index(wanted) - ids.index(shown))
        if not hidden:
            return changed
        changed = True
    return changed


def _choose_version(db: sqlite3.Connection, message_id: int, step: int) -> tuple[list[int], list[Message]]:
    shown = db.execute(
        f"SELECT * FROM messages m WHERE id = ? AND status != 'superseded' AND {_GOOD_PARENT}", (message_id,)
    ).fetchone()
    if shown is None:
        return [], []
    conversation_id = int(shown["conversation_id"])
    siblings = [int(r[0]) for r in _versions_of(db, shown)]
    at = siblings.index(message_id) + step
    if not 0 <= at < len(siblings) or step == 0:
        return [], []
    hidden = [
        int(r[0])
        for r in db.execute(
            "SELECT id FROM messages WHERE conversation_id = ? AND id >= ? AND status != 'superseded' "
            "ORDER BY id",
            (conversation_id, message_id),
        )
    ]
    db.executemany("UPDATE messages SET status = 'superseded' WHERE id = ?", [(i,) for i in hidden])
    # The chosen version, then at each message the reply (or next question) seen last below it
    # (a child's id is above its parent's: no cycle).
    branch = [
        int(r[0])
        for r in db.execute(
            "WITH RECURSIVE down(id) AS (SELECT ? UNION ALL SELECT (SELECT c.id FROM messages c "
            "WHERE c.conversation_id = ? AND c.parent_id = down.id AND c.id > down.id "
            "ORDER BY c.chosen_at DESC, c.id DESC LIMIT 1) FROM down WHERE down.id IS NOT NULL) "
            "SELECT id FROM down WHERE id IS NOT NULL",
            (siblings[at], conversation_id),
        )
    ]
    now = time.time()
    db.executemany(
        "UPDATE messages SET status = COALESCE(kept_status, 'complete'), kept_status = NULL, chosen_at = ? "
        "WHERE id = ?",
        [(now, i) for i in branch],
    )
    rows = db.execute(
        f"SELECT * FROM messages WHERE id IN ({','.join('?' * len(branch))}) ORDER BY id", branch
    ).fetchall()
    return hidden, _shown(rows)


# ---- a conversation as a file: JSON (exact, imported back) and Markdown (to read)

CONVERSATION_FORMAT = "tandem-conversation"
CONVERSATION_FORMAT_VERSION = 1
# Where each stretch of a reply came from (a message's "stretches" in the JSON file).
STRETCH_SOURCES = {
    "model": "written by the model, token by token",
    "draft": "guessed ahead (from the text, or by a draft model) and confirmed by the model: "
    'the same words, sooner; its "source", where kept, says where the guess came from '
    "(document, text, memory: an earlier reply, model: a draft model)",
}
DRAFT_STRETCH_SOURCES = tuple(str(s) for s in DraftSource if s)  # "document", "text", "memory", "model"
IMPORTED_STATUSES = (MessageStatus.COMPLETE, MessageStatus.CANCELLED, MessageStatus.INTERRUPTED)


class ConversationFileError(ValueError):
    """A conversation file that cannot be imported; the message is one sentence for the user."""


def stretches(content: str, spans: Sequence[DraftSpan]) -> list[dict[str, str]]:
    """The content cut where its source changes: [{"text", "from": "model" | "draft"}, ...]; a
    draft stretch says its "source" too where it is known."""
    out: list[dict[str, str]] = []
    at = 0
    for a, b, tag in sorted((max(0, s.start), min(len(content), s.end), str(s.source)) for s in spans):
        if b <= a or a < at:
            continue
        if a > at:
            out.append({"text": content[at:a], "from": "model"})
        out.append({"text": content[a:b], "from": "draft", **({"source": tag} if tag else {})})
        at = b
    if at < len(content) or not out:
        out.append({"text": content[at:], "from": "model"})
    return out


STATUS_SAID = {"cancelled": "stopped", "interrupted": "interrupted: Tandem stopped before it was finished"}


def conversation_markdown(data: dict[str, Any]) -> str:
    """An exported conversation (Store.export) as Markdown to read; the share of each reply that
    was guessed ahead and confirmed is said under it (Markdown has no highlight)."""
    lines = [f"# {data['title']}", ""]
    if data.get("system_prompt"):
        lines += [f"*Instructions: {data['system_prompt']}*", ""]
    for m in data["messages"]:
        lines += [
            f"## {'You' if m['role'] == 'user' else 'Assistant' if m['role'] == 'assistant' else 'System'}"
        ]
        lines += ["", m["content"], ""]
        drafted = sum(len(s["text"]) for s in m["stretches"] if s["from"] == "draft")
        said = _reply_said(m.get("stats")) if m["role"] == "assistant" else ""
        if said:
            lines += [f"*{said}*", ""]
        if m["role"] == "assistant" and m["content"] and drafted:
            share = drafted / len(m["content"])
            lines += [f"*{share:.0%} of this reply was guessed ahead and confirmed by the model.*", ""]
        if m["status"] != MessageStatus.COMPLETE:
            # As the window says it: a reply the user stopped is "stopped".
            lines += [f"*({STATUS_SAID.get(m['status'], m['status'])})*", ""]
        n_other = m.get("versions", 1) - 1 if isinstance(m.get("versions"), int) else 0
        if n_other > 0:
            what = "reply" if m["role"] == "assistant" else "message"
            kept = f"{n_other} other version{'s' if n_other > 1 else ''} of this {what}"
            lines += [f"*({kept} {'are' if n_other > 1 else 'is'} kept in Tandem.)*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _reply_said(stats: object) -> str:
    """A reply's model, date and speed, as its export says them: "SmolLM2 135M Instruct ·
    2026-12-06 04:15 UTC · 120 tokens at 52.3 tokens/s, 1.8× the usual 29.0" ("" where unknown)."""
    if not isinstance(stats, dict):
        return ""
    parts = []
    if isinstance(stats.get("model"), str) and stats["model"]:
        parts.append(stats["model"])
    when = stats.get("finished_at")
    if isinstance(when, int | float) and not isinstance(when, bool):
        parts.append(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when)))
    n, rate = stats.get("n_generated"), stats.get("decode_tokens_per_s")
    if isinstance(n, int) and isinstance(rate, int | float) and n > 0 and rate > 0:
        speed = f"{n} tokens at {rate:.1f} tokens/s"
        plain = stats.get("plain_tokens_per_s")
        if isinstance(plain, int | float) and plain > 0 and stats.get("speculation") not in (None, "none"):
            speed += f", {rate / plain:.1f}× the usual {plain:.1f}"
        parts.append(speed)
    return " · ".join(parts)


# The largest conversation file read (checked with stat, before reading it) and the most messages
# it may hold. 20,000 messages is a long conversation (years of one thread; the window opens any
# length by pages); a file holds each text twice (content and its stretches), so 32 MB is such a
# conversation of 800-character messages. Parsing costs about 5 times the file in memory: a 32 MB
# file stays under the 300 MB an import may take, where review 5's 64 MB file of a million tiny
# messages took 1.15 GB and 44 s of the window's thread.
MAX_IMPORT_BYTES = 32 * 1024 * 1024
MAX_IMPORT_MESSAGES = 20_000


def _import_bounds(path: Path) -> bytes:
    """The file's bytes, where they are within the import's bounds (ConversationFileError, in one
    sentence, where not): its size from stat, then its messages counted by their "role" keys (a
    quote inside a JSON string is escaped, so each is a key) before any parsing."""
    name = path.name
    try:
        size = path.stat().st_size
        if size > MAX_IMPORT_BYTES:
            raise ConversationFileError(
                f"{name} is too large to import ({size / 1024 / 1024:,.0f} MB; Tandem imports "
                f"conversation files of up to {MAX_IMPORT_BYTES // 1024 // 1024} MB)."
            )
        with path.open("rb") as f:
            raw = f.read(MAX_IMPORT_BYTES + 1)
    except OSError as e:
        raise ConversationFileError(f"{name} cannot be read: {e.strerror or e}.") from None
    if len(raw) > MAX_IMPORT_BYTES:  # it grew since stat
        raise ConversationFileError(
            f"{name} is too large to import (more than {MAX_IMPORT_BYTES // 1024 // 1024} MB)."
        )
    if raw.count(b'"role"') > MAX_IMPORT_MESSAGES:
        raise ConversationFileError(_too_many_messages(name))
    return raw


def _too_many_messages(name: str) -> str:
    return (
        f"{name} holds too many messages to import (Tandem imports conversations of up to "
        f"{MAX_IMPORT_MESSAGES:,} messages)."
    )


def read_conversation_file(path: Path) -> dict[str, Any]:
    """A JSON conversation file, checked; ConversationFileError says in one sentence what is wrong."""
    name = path.name
    raw = _import_bounds(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConversationFileError(f"{name} is not a Tandem conversation file: it is not text.") from None
    del raw
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConversationFileError(
            f"{name} is not a Tandem conversation file: it is not JSON ({e.msg} at line {e.lineno})."
        ) from None
    except RecursionError:
        raise ConversationFileError(
            f"{name} is not a Tandem conversation file: its JSON is nested too deeply to be one."
        ) from None
    if not isinstance(data, dict) or data.get("format") != CONVERSATION_FORMAT:
        raise ConversationFileError(
            f'{name} is not a Tandem conversation file (it has no "format": "{CONVERSATION_FORMAT}").'
        )
    version = data.get("version")
    if not isinstance(version, int) or version > CONVERSATION_FORMAT_VERSION:
        raise ConversationFileError(
            f"{name} was written by a newer Tandem (conversation format {version}; this one reads "
            f"up to {CONVERSATION_FORMAT_VERSION})."
        )
    messages = data.get("messages")
    if not isinstance(data.get("title"), str) or not isinstance(messages, list):
        raise ConversationFileError(f'{name} has no "title" and "messages" list: nothing to import.')
    if len(messages) > MAX_IMPORT_MESSAGES:
        raise ConversationFileError(_too_many_messages(name))
    for i, m in enumerate(messages, 1):
        if (problem := _message_problem(m, is_shown=True)) is not None:
            raise ConversationFileError(f"{name}: message {i}{problem}.")
    for key in ("title", "system_prompt"):
        if not _is_text(data.get(key) or ""):
            raise ConversationFileError(f"{name}: its {key} is not valid Unicode text (a lone surrogate).")
    return data


_SURROGATE = re.compile("[\ud800-\udfff]")  # the code points UTF-8 cannot encode


def _is_text(value: object) -> bool:
    """A str that can be stored: valid Unicode (JSON's "\\ud800", a lone surrogate, is not)."""
    return isinstance(value, str) and _SURROGATE.search(value) is None


def _export_versions(store: Store, conversation_id: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages shown, then the other versions of their turns and what followed those (in the
    order written: a parent before its children), each with its id and its parent's: a reader
    that knows only "messages" reads the conversation as shown."""
    versions = store.versions_shown(conversation_id)
    shown: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    rows = store._db.execute(
        "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
    )
    for row in rows:
        if row["role"] not in ROLES:  # as _shown leaves it out
            continue
        m = _message(row)
        out: dict[str, Any] = {
            "role": m.role,
            "content": m.content,
            "status": str(m.status),
            "stretches": stretches(m.content, m.spans),
            **({"stats": m.stats} if m.stats else {}),
            "id": m.id,
            "parent": row["parent_id"],
        }
        if m.status != MessageStatus.SUPERSEDED:
            if m.id in versions:
                out["versions"] = versions[m.id][1]
            shown.append(out)
        else:
            out["status"] = _status(str(row["kept_status"] or MessageStatus.COMPLETE))
            others.append(out)
    return shown, others


def _import_messages(db: sqlite3.Connection, conversation_id: int, data: dict[str, Any], now: float) -> int:
    """The messages shown and the other versions of their turns (hidden behind them), in the order
    they were written where the file says it (its ids), so each turn's versions keep their order.
    A version that is not a message, or whose parent is not a message before it in the file
    (missing, a cycle, another conversation's), is skipped: how many were."""
    shown: list[dict[str, Any]] = data["messages"]
    others = data.get("other_versions")
    others = others[:MAX_IMPORT_MESSAGES] if isinstance(others, list) else []
    entries = [(m, False) for m in shown] + [(v, True) for v in others]
    file_ids = [_file_id(m.get("id")) if isinstance(m, dict) else None for m, _ in entries]
    shown_ids = [i for i in file_ids[: len(shown)] if i is not None]
    if None not in file_ids and shown_ids == sorted(shown_ids):  # (a hand-made file keeps its order)
        entries.sort(key=lambda e: e[0]["id"])
    ids: dict[int | None, int] = {}  # the file's message ids -> the new ones
    skipped = 0
    for m, is_other in entries:
        parent = _file_id(m.get("parent")) if isinstance(m, dict) else None
        if is_other and (
            _message_problem(m, is_shown=False) is not None
            or (m.get("parent") is not None and parent not in ids)
        ):
            skipped += 1
            continue
        new_id = _import_message(db, conversation_id, m, now)
        if is_other:  # hidden behind the version shown (the trigger keeps its status to restore)
            db.execute(
                "UPDATE messages SET parent_id = ?, status = 'superseded', chosen_at = 0 WHERE id = ?",
                (ids.get(parent), new_id),
            )
        file_id = _file_id(m.get("id"))
        if file_id is not None and file_id not in ids:
            ids[file_id] = new_id
    return skipped


def _file_id(value: object) -> int | None:
    return value if type(value) is int else None


def _message_problem(m: object, *, is_shown: bool) -> str | None:
    """What keeps a file's message out (" has no role ..."), or None: one shown refuses the file,
    another version is skipped (its content is not checked: the stretches are what is imported)."""
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        return " has no role (user, assistant or system)"
    parts = m.get("stretches")
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(p.get("text"), str) and p.get("from") in STRETCH_SOURCES
        for p in parts
    ):
        return ' has no "stretches" list of {"text", "from": "model" | "draft"}'
    if is_shown and isinstance(m.get("content"), str) and m["content"] != "".join(p["text"] for p in parts):
        return "'s content and its stretches differ"
    if not all(_is_text(p["text"]) for p in parts):
        return " holds text that is not valid Unicode (a lone surrogate)"
    return None


def _import_message(db: sqlite3.Connection, conversation_id: int, m: dict[str, Any], now: float) -> int:
    """One message of a file, inserted (its parent: the message shown before it, the trigger's)."""
    content, at, spans, sources = "", 0, [], []
    for part in m["stretches"]:
        if part["from"] == "draft" and part["text"]:
            spans.append((at, at + len(part["text"])))
            source = part.get("source")
            sources.append(source if source in DRAFT_STRETCH_SOURCES else "")
        content += part["text"]
        at += len(part["text"])
    status = _status(str(m.get("status", MessageStatus.COMPLETE)))
    stats = clean_stats(m.get("stats"))
    cur = db.execute(
        "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at, "
        "stats_json, draft_spans_json, draft_sources_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            conversation_id,
            m["role"],
            content,
            status if status in IMPORTED_STATUSES else MessageStatus.COMPLETE,
            now,
            now,
            json.dumps(stats, allow_nan=False) if stats is not None else None,
            json.dumps([list(s) for s in spans]) if spans else None,
            # Kept where the file says every stretch's source (a file from before: none).
            json.dumps(sources) if spans and all(sources) else None,
        ),
    )
    assert cur.lastrowid is not None
    return cur.lastrowid
