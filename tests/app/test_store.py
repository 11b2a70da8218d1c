"""The conversation store (SQLite) and the settings file, without Qt."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from app import paths
from app.settings import Settings, load_settings, save_settings
from app.store import EARLIER_VERSION, MessageStatus, Store
from engine.config import PLAIN_DECODING
from engine.events import DraftSource, DraftSpan, ReplyText, known_sources


def test_database_lives_in_tandem_home(tandem_home: Path) -> None:
    store = Store()
    store.create_conversation("hello")
    store.close()
    assert paths.database_path() == tandem_home / "tandem.db"
    assert (tandem_home / "tandem.db").exists()


def test_messages_table_keeps_role_and_content_in_write_order() -> None:
    store = Store()
    c = store.create_conversation("order")
    store.add_message(c.id, "user", "first")
    reply = store.add_message(c.id, "assistant", "", status="streaming")
    store.add_message(c.id, "user", "second")
    store.save_reply(reply.id, ReplyText("the reply"), MessageStatus.COMPLETE)
    store.close()

    db = sqlite3.connect(paths.database_path())
    rows = db.execute("SELECT role, content FROM messages ORDER BY rowid").fetchall()
    assert rows == [("user", "first"), ("assistant", "the reply"), ("user", "second")]


def test_role_must_be_user_assistant_or_system() -> None:
    store = Store()
    c = store.create_conversation()
    try:
        store.add_message(c.id, "robot", "x")
    except sqlite3.IntegrityError:
        pass
    else:
        raise AssertionError("a role outside user/assistant/system was stored")


def test_streaming_reply_left_by_a_crash_reads_as_interrupted_on_next_open() -> None:
    store = Store()
    c = store.create_conversation()
    reply = store.add_message(c.id, "assistant", "half a rep", status="streaming")
    store.close()  # the app "crashed" before the reply finished

    reopened = Store()
    assert [(m.id, m.status) for m in reopened.messages(c.id)] == [(reply.id, "streaming")]
    assert reopened.mark_unfinished_interrupted() == 1  # what the window does when it opens
    (message,) = reopened.messages(c.id)
    assert message.id == reply.id and message.status == "interrupted" and message.content == "half a rep"


def test_superseded_messages_are_kept_but_hidden() -> None:
    store = Store()
    c = store.create_conversation()
    user = store.add_message(c.id, "user", "question")
    old = store.add_message(c.id, "assistant", "old answer")
    store.set_status([old.id], "superseded")
    store.add_message(c.id, "assistant", "new answer")
    assert [m.content for m in store.messages(c.id)] == ["question", "new answer"]
    assert [m.content for m in store.messages(c.id, include_superseded=True)] == [
        "question",
        "old answer",
        "new answer",
    ]
    assert user.id < old.id


def test_recent_exchanges_pair_each_answer_with_its_question_across_conversations() -> None:
    store = Store()
    a, b = store.create_conversation(), store.create_conversation()
    store.add_message(a.id, "user", "first question")
    old = store.add_message(a.id, "assistant", "old answer")
    store.set_status([old.id], "superseded")  # regenerated: still an answer the model gave
    store.add_message(a.id, "assistant", "new answer")
    store.add_message(b.id, "user", "other question")
    store.add_message(b.id, "assistant", "", status="cancelled")  # nothing written: left out
    store.add_message(a.id, "user", "second question")
    store.add_message(a.id, "assistant", "second answer")
    store.add_message(b.id, "assistant", "cut short", status="interrupted")
    assert store.recent_exchanges() == [
        ("first question", "old answer"),
        ("first question", "new answer"),
        ("second question", "second answer"),
    ]
    assert store.recent_exchanges(limit=1) == [("second question", "second answer")]


def test_stats_and_draft_spans_round_trip() -> None:
    store = Store()
    c = store.create_conversation()
    m = store.add_message(c.id, "assistant", "")
    reply = ReplyText("abcdef", (DraftSpan(1, 3),))
    store.save_reply(m.id, reply, MessageStatus.COMPLETE, {"decode_tokens_per_s": 12.5})
    (got,) = store.messages(c.id)
    assert got.id == m.id
    assert got.stats == {"decode_tokens_per_s": 12.5}
    assert got.spans == (DraftSpan(1, 3),)


def test_search_rename_delete() -> None:
    store = Store()
    a = store.create_conversation("Python tips")
    b = store.create_conversation("Recipes 100%")
    store.add_message(a.id, "user", "x")
    assert [c.title for c in store.conversations("python")] == ["Python tips"]
    assert [c.title for c in store.conversations("100%")] == ["Recipes 100%"]
    assert store.conversations("_") == []  # LIKE wildcards are matched literally
    store.rename_conversation(b.id, "Soups")
    assert {c.title for c in store.conversations()} == {"Python tips", "Soups"}
    store.delete_conversation(a.id)
    assert [c.title for c in store.conversations()] == ["Soups"]
    assert store.messages(a.id) == []


def test_system_prompt_is_per_conversation() -> None:
    store = Store()
    a = store.create_conversation("a", system_prompt="Be brief.")
    b = store.create_conversation("b")
    store.set_system_prompt(b.id, "Talk like a pirate.")
    assert store.conversation(a.id).system_prompt == "Be brief."  # type: ignore[union-attr]
    assert store.conversation(b.id).system_prompt == "Talk like a pirate."  # type: ignore[union-attr]


# ---- settings


def test_settings_round_trip_beside_the_database(tandem_home: Path) -> None:
    settings = Settings(
        n_threads=3, temperature=0.7, draft=PLAIN_DECODING, plain_tokens_per_s={"/m.gguf": 40.0}
    )
    save_settings(settings)
    assert paths.settings_path() == tandem_home / "settings.json"
    assert load_settings() == settings


def test_corrupt_settings_fall_back_to_defaults_and_keep_the_database(tandem_home: Path) -> None:
    store = Store()
    c = store.create_conversation("keep me")
    store.add_message(c.id, "user", "precious words")
    store.close()
    paths.settings_path().write_text("{ this is not json", encoding="utf-8")

    assert load_settings() == Settings()
    assert (tandem_home / "settings.json.corrupt").read_text(encoding="utf-8") == "{ this is not json"
    store = Store()
    assert [m.content for m in store.messages(c.id)] == ["precious words"]


def test_settings_with_wrong_types_keep_only_the_valid_values() -> None:
    paths.settings_path().write_text(
        json.dumps(
            {"n_threads": True, "n_ctx": "big", "temperature": 1, "draft": "ngram", "top_k": 7, "x": 1}
        ),
        encoding="utf-8",
    )
    settings = load_settings()
    assert settings.n_threads is None and settings.n_ctx == Settings().n_ctx
    assert settings.temperature == 1.0 and settings.top_k == 7


def test_settings_that_are_not_an_object_fall_back_to_defaults() -> None:
    paths.settings_path().write_text("[1, 2, 3]", encoding="utf-8")
    assert load_settings() == Settings()


def test_search_finds_words_in_titles_and_in_what_was_written() -> None:
    store = Store()
    recycling = store.create_conversation("Council notes")
    store.add_message(recycling.id, "user", "Summarise the recycling programme for me")
    soup = store.create_conversation("Dinner")
    reply = store.add_message(soup.id, "assistant", "", MessageStatus.STREAMING)
    store.save_reply(
        reply.id, ReplyText("A leek and potato soup, then crème brûlée."), MessageStatus.COMPLETE
    )
    assert [c.title for c in store.conversations("recyc")] == ["Council notes"]  # a word's start
    assert [c.title for c in store.conversations("creme brulee")] == ["Dinner"]  # accents folded
    assert [c.title for c in store.conversations("POTATO leek")] == ["Dinner"]  # every word, any order
    assert store.conversations("potato recycling") == []
    assert [c.title for c in store.conversations("council")] == ["Council notes"]
    store.rename_conversation(soup.id, "Leftovers")
    assert [c.title for c in store.conversations("leftov")] == ["Leftovers"]
    # Text people type is never FTS syntax: quotes, operators and stars are just characters.
    for typed in ('"', "NOT", "soup*", "a OR b", "(x", "col:val", "-"):
        store.conversations(typed)
    # A superseded message (an earlier version: regenerated, edited) is found, and its snippet
    # says so: it was read once, and Regenerate and Edit keep it to be chosen again (issue 51).
    # A deleted conversation is not.
    store.set_status([reply.id], MessageStatus.SUPERSEDED)
    assert [c.title for c in store.conversations("potato")] == ["Leftovers"]
    assert store.search_snippets("potato", [soup.id]) == {
        soup.id: EARLIER_VERSION + "A leek and potato soup, then crème brûlée."
    }
    # Where the version shown holds it too, its snippet is from there.
    store.add_message(soup.id, "assistant", "Potato gratin.")
    assert store.search_snippets("potato", [soup.id]) == {soup.id: "Potato gratin."}
    store.delete_conversation(recycling.id)
    assert store.conversations("recycling") == []


def test_a_search_found_in_an_earlier_version_shows_that_version() -> None:
    """Opening a conversation found by a search (the window's list) shows the match: where only an
    earlier version of a turn holds it, that version is chosen as its < > would, turn by turn."""
    store = Store()
    c = store.create_conversation("Soup")
    question = store.add_message(c.id, "user", "What soup?")
    leek = store.add_message(c.id, "assistant", "Leek and potato.")
    store.set_status([leek.id], MessageStatus.SUPERSEDED)  # Regenerate
    tomato = store.add_message(c.id, "assistant", "Tomato.")
    store.set_status([question.id, tomato.id], MessageStatus.SUPERSEDED)  # Edit the question
    edited = store.add_message(c.id, "user", "What bread?")
    store.add_message(c.id, "assistant", "Rye.")
    shown = lambda: [m.content for m in store.messages(c.id)]  # noqa: E731
    assert shown() == ["What bread?", "Rye."]

    assert not store.show_version_found(c.id, "rye")  # shown already: nothing changes
    assert store.show_version_found(c.id, "leek")  # two turns down: the question, then the reply
    assert shown() == ["What soup?", "Leek and potato."]
    assert store.versions_shown(c.id) == {question.id: (1, 2), leek.id: (1, 2)}
    assert store.search_snippets("leek", [c.id]) == {c.id: "Leek and potato."}
    assert store.show_version_found(c.id, "bread") and shown() == ["What bread?", "Rye."]
    assert edited.id in [m.id for m in store.messages(c.id)]
    assert not store.show_version_found(c.id, "nowhere") and not store.show_version_found(c.id, " ")


def test_search_index_is_built_for_a_store_written_before_it(tmp_path: Path) -> None:
    import sqlite3

    from app.store import MIGRATIONS

    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.executescript(str(MIGRATIONS[0]) + "\nPRAGMA user_version = 1;")
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('Old one', 0, 0)")
    db.execute(
        "INSERT INTO messages (conversation_id, role, content, created_at, updated_at) "
        "VALUES (1, 'user', 'an elephant in the room', 0, 0)"
    )
    db.commit()
    db.close()
    store = Store(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert [c.title for c in store.conversations("elephant")] == ["Old one"]


def test_export_keeps_where_each_stretch_came_from_and_imports_back(tmp_path: Path) -> None:
    import json

    from app.store import conversation_markdown, read_conversation_file

    store = Store()
    c = store.create_conversation("Copy test", "Repeat exactly.")
    store.add_message(c.id, "user", "the cat sat")
    reply = store.add_message(c.id, "assistant", "", MessageStatus.STREAMING)
    reply_text = ReplyText("Sure: the cat sat.", (DraftSpan(6, 17),))
    store.save_reply(reply.id, reply_text, MessageStatus.COMPLETE, {"n_generated": 6})
    old = store.add_message(c.id, "assistant", "replaced")
    store.set_status([old.id], MessageStatus.SUPERSEDED)
    data = store.export(c.id)
    assert [m["content"] for m in data["messages"]] == ["the cat sat", "Sure: the cat sat."]
    assert data["messages"][1]["stretches"] == [
        {"text": "Sure: ", "from": "model"},
        {"text": "the cat sat", "from": "draft"},
        {"text": ".", "from": "model"},
    ]
    markdown = conversation_markdown(data)
    assert markdown.startswith("# Copy test\n") and "## Assistant\n\nSure: the cat sat.\n" in markdown
    assert "61% of this reply was guessed ahead and confirmed" in markdown
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    imported = store.import_conversation(read_conversation_file(path))
    assert imported.id != c.id and (imported.title, imported.system_prompt) == (
        "Copy test",
        "Repeat exactly.",
    )
    messages = store.messages(imported.id)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "the cat sat"),
        ("assistant", "Sure: the cat sat."),
    ]
    assert [(s.start, s.end) for s in messages[1].spans] == [(6, 17)]
    assert messages[1].stats == {"n_generated": 6}


def test_export_says_each_draft_stretchs_source_and_imports_it_back(tmp_path: Path) -> None:
    from app.host.reply import ReplyText
    from app.store import read_conversation_file

    store = Store()
    c = store.create_conversation("Sources")
    reply = store.add_message(c.id, "assistant", "", MessageStatus.STREAMING)
    text = "Copied words, then guessed ones."
    store.save_reply(
        reply.id,
        ReplyText(text, (DraftSpan(0, 12, DraftSource.DOCUMENT), DraftSpan(19, 31, DraftSource.MODEL))),
        MessageStatus.COMPLETE,
    )
    data = store.export(c.id)
    assert data["messages"][0]["stretches"] == [
        {"text": "Copied words", "from": "draft", "source": "document"},
        {"text": ", then ", "from": "model"},
        {"text": "guessed ones", "from": "draft", "source": "model"},
        {"text": ".", "from": "model"},
    ]
    path = tmp_path / "sources.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    imported = store.import_conversation(read_conversation_file(path))
    again = store.messages(imported.id)[0].spans
    assert [(s.start, s.end) for s in again] == [(0, 12), (19, 31)]
    assert known_sources(again) == ("document", "model")
    # A file from before sources were kept (or one that names a source not known): spans only.
    for part in data["messages"][0]["stretches"]:
        part.pop("source", None)
    data["messages"][0]["stretches"][0]["source"] = "somewhere"
    path.write_text(json.dumps(data), encoding="utf-8")
    older = store.messages(store.import_conversation(read_conversation_file(path)).id)[0].spans
    assert [(s.start, s.end) for s in older] == [(0, 12), (19, 31)] and known_sources(older) == ()
    store.close()


def test_a_file_that_is_not_a_conversation_is_refused_in_one_sentence(tmp_path: Path) -> None:
    import json

    import pytest

    from app.store import ConversationFileError, read_conversation_file

    good = {"format": "tandem-conversation", "version": 1, "title": "t", "messages": []}
    cases = {
        "bytes.json": (
            b"\xff\xfe\x00garbage",
            "bytes.json is not a Tandem conversation file: it is not text.",
        ),
        "notjson.json": (b"{nope", "notjson.json is not a Tandem conversation file: it is not JSON ("),
        "other.json": (b'{"a": 1}', 'other.json is not a Tandem conversation file (it has no "format"'),
        "newer.json": (
            json.dumps({**good, "version": 9}).encode(),
            "newer.json was written by a newer Tandem (conversation format 9; this one reads up to 1).",
        ),
        "role.json": (
            json.dumps({**good, "messages": [{"role": "robot", "stretches": []}]}).encode(),
            "role.json: message 1 has no role (user, assistant or system).",
        ),
        "parts.json": (
            json.dumps({**good, "messages": [{"role": "user", "stretches": [{"text": 1}]}]}).encode(),
            'parts.json: message 1 has no "stretches" list',
        ),
    }
    for name, (raw, sentence) in cases.items():
        path = tmp_path / name
        path.write_bytes(raw)
        with pytest.raises(ConversationFileError) as caught:
            read_conversation_file(path)
        message = str(caught.value)
        assert message.startswith(sentence) and "\n" not in message, message
    with pytest.raises(ConversationFileError, match=r"^missing.json cannot be read: "):
        read_conversation_file(tmp_path / "missing.json")
