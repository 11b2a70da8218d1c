"""The conversation store (SQLite) and the settings file, without Qt."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from app import paths
from app.settings import Settings, load_settings, save_settings
from app.store import Store


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
    store.update_message(reply.id, "the reply", status="complete")
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
    assert reopened.message(reply.id).status == "streaming"  # type: ignore[union-attr]
    assert reopened.mark_unfinished_interrupted() == 1  # what the window does when it opens
    message = reopened.message(reply.id)
    assert message is not None and message.status == "interrupted" and message.content == "half a rep"


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
    store.update_message(
        m.id, "abcdef", status="complete", stats={"decode_tokens_per_s": 12.5}, draft_spans=[(1, 3)]
    )
    got = store.message(m.id)
    assert got is not None
    assert got.stats == {"decode_tokens_per_s": 12.5}
    assert got.draft_spans == ((1, 3),)


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
    settings = Settings(n_threads=3, temperature=0.7, draft="none", plain_tokens_per_s={"/m.gguf": 40.0})
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
