"""The edges of issue 38 that are not a conversation file or the API: errors that escaped as
exceptions (a PDF bomb, a 50k-character search, a 100k-character link, a locked or read-only
store, a full disk), files that others could read (the store, its -wal, the log, exports), a
deleted conversation's words left in the search index, credentials in the log, a link socket any
user could write to, and text from files printed as terminal codes."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import subprocess
import zlib
from pathlib import Path

import pytest

from app.library.documents import DocumentError, DocumentProblem, read_document
from app.library.pair_doctor import parse_model_ref, parse_open_url
from app.store import Store
from engine.errors import TandemError


def _in_memory(store: Store) -> bool:
    """Whether the session's store is in memory (SQLite names no file for it)."""
    return str(store._db.execute("PRAGMA database_list").fetchone()[2]) == ""


# -- errors as sentences ---------------------------------------------------------------------------


def _pdf_bomb(path: Path, n_bytes: int = 200 * 1024 * 1024) -> Path:
    """A one-page PDF whose content stream inflates to n_bytes of spaces (a few hundred kB)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    squeeze = zlib.compressobj(9)
    block = b" " * (1 << 20)
    packed = b"".join(squeeze.compress(block) for _ in range(n_bytes // len(block))) + squeeze.flush()
    writer = PdfWriter()
    page = writer.add_blank_page(200, 200)
    stream = DecodedStreamObject()
    stream.set_data(b"")
    stream._data = packed  # already compressed: pypdf writes it as it is
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    page[NameObject("/Contents")] = writer._add_object(stream)
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject()})
    buf = io.BytesIO()
    writer.write(buf)
    path.write_bytes(buf.getvalue())
    return path


def test_a_pdf_decompression_bomb_is_one_sentence(tmp_path: Path) -> None:
    bomb = _pdf_bomb(tmp_path / "bomb.pdf")
    assert bomb.stat().st_size < 1_000_000
    with pytest.raises(DocumentError) as e:  # pypdf's LimitReachedError escaped before
        read_document(bomb)
    assert e.value.problem == DocumentProblem.TOO_LARGE
    assert "unpacks to more data than Tandem reads from a PDF" in str(e.value)


def test_a_50k_character_search_finds_nothing_and_says_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    store.create_conversation("glass")
    assert store.conversations("x" * 100_000) == []  # "LIKE or GLOB pattern too complex" before
    assert store.conversations("glass " + "x" * 60_000) == []
    assert [c.title for c in store.conversations("glass")] == ["glass"]
    assert store.conversations("\ud800") is not None  # a lone surrogate: no UnicodeEncodeError


def test_a_100k_character_link_or_reference_is_one_sentence() -> None:
    with pytest.raises(TandemError, match="characters long"):  # OSError File name too long before
        parse_model_ref("tandem://open_from_hf?model=a/b&file=" + "x" * 100_000)
    with pytest.raises(TandemError, match="characters long"):
        parse_model_ref("owner/repo/" + "x" * 100_000)
    assert parse_model_ref("./" + "x" * 3000).is_local  # long but allowed: no OSError from exists()


@pytest.mark.parametrize(
    "file",
    [
        "attach/good.pdf",
        "C:\\Windows\\win.ini",
        "../../etc/passwd.gguf",
        "a/../b.gguf",
        "/abs.gguf",
        "a\nb.gguf",
    ],
)
def test_a_link_names_only_a_gguf_file_on_the_hub(file: str) -> None:
    from urllib.parse import quote

    with pytest.raises(TandemError, match="names no .gguf file"):
        parse_open_url(f"tandem://open_from_hf?model=owner/repo&file={quote(file)}")


def test_a_good_link_still_opens() -> None:
    ref = parse_open_url("tandem://open_from_hf?model=owner/repo&file=sub/model-Q4_K_M.gguf")
    assert (ref.repo_id, ref.filename, ref.is_local) == ("owner/repo", "sub/model-Q4_K_M.gguf", False)


def test_a_locked_store_opens_in_memory_with_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "tandem.db"
    first = Store(path)
    first.add_message(first.create_conversation("kept").id, "user", "hello")
    first.close()
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")  # another program holds it
    try:
        # OperationalError "database is locked" escaped before (exit 1). The lock is held for sure:
        # no need to wait out SQLite's 5 s.
        store = Store(path, busy_timeout_s=0.1)
        assert _in_memory(store) and "locked" in store.notice and "\n" not in store.notice
        store.add_message(store.create_conversation("this session").id, "user", "still works")
        store.mark_unfinished_interrupted()
    finally:
        holder.rollback()
        holder.close()
    again = Store(path)  # the file was left as it was
    assert [c.title for c in again.conversations()] == ["kept"]


@pytest.fixture
def small_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    folder = tmp_path / "disk"
    folder.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {r.stderr.decode().strip()}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_read_only_store_opens_a_copy_with_a_notice(small_disk: Path) -> None:
    path = small_disk / "tandem.db"
    first = Store(path)
    first.add_message(first.create_conversation("kept").id, "user", "hello")
    first.close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    store = Store(path)  # opened with no notice, then "attempt to write a readonly database" before
    assert _in_memory(store) and "read-only" in store.notice
    assert [c.title for c in store.conversations()] == ["kept"]  # the history is there to read
    assert store.mark_unfinished_interrupted() == 0
    store.add_message(store.create_conversation("new").id, "user", "in memory")


def test_a_full_disk_when_a_message_is_saved_is_a_sentence_and_keeps_the_text(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch, open_window, tiny_target: Path
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TANDEM_HOME", str(small_disk))
    window = open_window(tiny_target, draft="ngram", max_tokens=4)
    filler = small_disk / "filler"
    try:  # fill the disk
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    text = "a message for a full disk " * 200
    window.chat.input.setPlainText(text)
    window.chat.on_input_submitted()  # OperationalError "database or disk is full" escaped before
    assert "could not be saved (the disk is full)" in window.chat.notice.text()
    assert window.chat.input.toPlainText() == text.strip()  # nothing typed is lost
    filler.unlink()


# -- the user's alone ------------------------------------------------------------------------------


def test_store_wal_log_and_exports_are_private(tmp_path: Path) -> None:
    from app import paths
    from app.library.logs import setup_file_logging

    store = Store()
    store.add_message(store.create_conversation("private").id, "user", "words")
    db = paths.database_path()
    for part in (db, db.with_name("tandem.db-wal"), db.with_name("tandem.db-shm")):
        assert part.exists() and part.stat().st_mode & 0o777 == 0o600, part  # 0644 before
    assert paths.home().stat().st_mode & 0o777 == 0o700 and paths.logs_dir().stat().st_mode & 0o777 == 0o700
    log_path = paths.logs_dir() / "test.log"
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        setup_file_logging(log_path, "%(message)s")
        logging.getLogger("test").warning("a line")
    finally:
        for h in root.handlers[len(handlers) :]:
            h.close()
            root.removeHandler(h)
    assert log_path.stat().st_mode & 0o777 == 0o600
    export = tmp_path / "export.json"
    export.write_text("old")
    export.chmod(0o644)
    paths.write_private_text(export, json.dumps(store.export(1)))
    assert export.stat().st_mode & 0o777 == 0o600


def test_an_old_store_left_0644_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "tandem.db"
    Store(path).close()
    path.chmod(0o644)
    Store(path).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_deleting_a_conversation_removes_its_words_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tandem.db"
    store = Store(path)
    keep = store.create_conversation("keep")
    store.add_message(keep.id, "user", "ordinary words " * 50)
    secret = store.create_conversation("zqxjtitle")
    for i in range(20):
        store.add_message(secret.id, "user", f"zqxjdiagnosis medical {i} " * 20)
    store.delete_conversation(secret.id)
    assert store.conversations("zqxjdiagnosis") == []
    store.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("tandem.db"))
    assert b"zqxjdiagnosis" not in raw and b"zqxjtitle" not in raw  # 4 hits in the index before
    assert b"ordinary" in raw


def test_credentials_in_a_url_are_not_logged(tmp_path: Path) -> None:
    import http.server
    import threading

    import httpx

    from app.library.logs import setup_file_logging

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log_path = tmp_path / "t.log"
    root = logging.getLogger()
    handlers = list(root.handlers)
    level = root.level
    try:
        setup_file_logging(log_path, "%(name)s %(message)s")
        httpx.get(f"http://user:pw-SECRET@127.0.0.1:{server.server_address[1]}/x", timeout=10)
    finally:
        server.shutdown()
        for h in root.handlers[len(handlers) :]:
            h.close()
            root.removeHandler(h)
        root.setLevel(level)
    assert "pw-SECRET" not in log_path.read_text()


def test_the_log_cannot_be_flooded(tmp_path: Path) -> None:
    from app.library.logs import setup_file_logging

    log_path = tmp_path / "t.log"
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        setup_file_logging(log_path, "%(name)s %(message)s")
        flood = logging.getLogger("asyncio")
        for _ in range(100_000):  # as asyncio logged "socket.accept() out of system resource"
            flood.error("socket.accept() out of system resource")
    finally:
        for h in root.handlers[len(handlers) :]:
            h.close()
            root.removeHandler(h)
    assert log_path.stat().st_size < 10_000


# -- the link socket -------------------------------------------------------------------------------


def _send_as(uid: int | None, address: str, line: bytes) -> None:
    """Send a second start's line from a forked process, as another user where uid is given."""
    from multiprocessing.connection import Client

    pid = os.fork()
    if pid == 0:  # the child: become uid, send, leave without running anything of pytest's
        code = 1
        try:
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            with Client(address) as conn:
                conn.send_bytes(line)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_link_socket_accepts_only_the_same_user(tmp_path: Path) -> None:
    from multiprocessing.connection import Listener

    from app.gui import instance_address, read_second_start

    address = instance_address(tmp_path)
    with Listener(address) as listener:
        _send_as(None, address, b"open tandem://open_from_hf?model=a/b&file=c.gguf")
        with listener.accept() as conn:
            assert read_second_start(conn) == "open tandem://open_from_hf?model=a/b&file=c.gguf"
        _send_as(None, address, b"rm -rf /")
        with listener.accept() as conn:
            assert read_second_start(conn) is None  # neither "raise" nor a link
        if os.getuid() != 0:
            return  # becoming another user needs root: the rest is checked where tests run as root
        _send_as(65534, address, b"open tandem://open_from_hf?model=attacker/repo&file=evil.gguf")
        with listener.accept() as conn:
            assert read_second_start(conn) is None  # uid 65534 was accepted before


# -- text from files shown as text -----------------------------------------------------------------


def test_models_list_prints_no_terminal_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import gguf

    from app import paths
    from app.cli.cli import main as tandem_main

    path = paths.models_dir() / "evil.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("\x1b[31mRED\x1b]0;title\x07\nsecond line\u202e")
    w.add_context_length(128)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert tandem_main(["models", "list"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[31mRED" in text  # shown, as text
    table = [line for line in out.out.splitlines() if "evil.gguf" in line]
    assert len(table) == 1 and "second line" in table[0]  # the name's line break stays in its row


def test_notice_and_doctor_labels_are_plain_text(open_window, tiny_target: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    window = open_window(tiny_target, draft="ngram", max_tokens=4)
    title = '<a href="https://evil.example">Click to update Tandem</a>'
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps({"format": "tandem-conversation", "version": 1, "title": title, "messages": []}),
        encoding="utf-8",
    )
    window.conversation_actions.import_conversation(str(path))
    assert window.chat.notice.textFormat() == Qt.TextFormat.PlainText
    assert title in window.chat.notice.text()
    from ui.models.pair_doctor_panel import PairDoctorPanel

    panel = window.findChild(PairDoctorPanel)
    if panel is not None:
        assert panel.status_label.textFormat() == Qt.TextFormat.PlainText


@pytest.mark.parametrize("ref", ["~0", "~no-such-user-here/model.gguf"])
def test_a_home_of_no_user_here_is_a_path_as_written(ref: str) -> None:
    # Path.expanduser raises RuntimeError for "~name" of an unknown user (the fuzzer's "~0"):
    # the reference is the path as written, and reading it says it is not there.
    from engine.errors import ModelNotFoundError
    from engine.gguf_info import read_gguf_info

    parsed = parse_model_ref(ref)
    assert parsed.path == Path(ref)
    with pytest.raises(ModelNotFoundError):
        read_gguf_info(ref)


def test_a_document_or_prompt_file_under_a_home_of_no_user_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(DocumentError):
        read_document(Path("~no-such-user-here/notes.txt"))
    from tests.integration.test_cli import tandem

    r = tandem("generate", "--model", "~no-such-user-here/m.gguf", "--prompt", "hi")
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
