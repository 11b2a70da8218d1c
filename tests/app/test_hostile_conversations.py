"""Hostile saved conversations (issue 38, item 1 and 4): a conversation file or a store row holding
NaN/Infinity, highlight spans past the text, an unknown draft source, deep nesting or a lone
surrogate is refused in one sentence or read into values the window can show; an import is all or
nothing; and the window starts and answers with such a conversation as its newest."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from app.store import ConversationFileError, Store, read_conversation_file
from engine.events import StatsRecord, known_sources


def conversation_file(tmp_path: Path, name: str, messages: list[dict[str, Any]], **extra: Any) -> Path:
    data = {"format": "tandem-conversation", "version": 1, "title": "hostile", "messages": messages, **extra}
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")  # json.dumps writes NaN/Infinity as given
    return path


def reply(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "stretches": [{"text": text, "from": "model"}], **extra}


NAN_STATS = {
    "n_generated": float("nan"),
    "decode_s": float("inf"),
    "prefill_s": -float("inf"),
    "n_drafted": "12",
    "speed_points": [[0.1, float("nan")], ["x", 2], [0.2, 3]],
    "deep": [[[[[1]]]]],
}


def test_nan_stats_import_cleanly_and_show(tmp_path: Path) -> None:
    data = read_conversation_file(conversation_file(tmp_path, "nan.json", [reply("hello", stats=NAN_STATS)]))
    store = Store(tmp_path / "t.db")
    conversation = store.import_conversation(data)
    (message,) = store.messages(conversation.id)
    assert message.stats is not None
    record = StatsRecord.from_dict(message.stats)  # raised ValueError (cannot convert NaN) before
    assert record.n_generated == 0 and record.decode_s == 0.0 and record.prefill_s == 0.0
    assert record.extras["speed_points"] == [
        [0.1],
        ["x", 2],
        [0.2, 3],
    ]  # NaN dropped (the panel skips the rest)
    assert record.extras["deep"] == [[]]  # nested deeper than a sparkline: cut at 2 levels
    # what is stored is strict JSON (no NaN token for another reader to choke on)
    raw = store._db.execute("SELECT stats_json FROM messages").fetchone()[0]
    json.loads(raw, parse_constant=lambda c: pytest.fail(f"{c} stored"))


@pytest.mark.parametrize(
    ("text", "sentence"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (
            '{"format": "tandem-conversation", "version": 1, "title": "t", "messages": [{"role": "user",'
            ' "stretches": [{"text": "a", "from": "model", "x": ' + "[" * 100_000 + "]" * 100_000 + "}]}]}",
            "nested too deeply",
        ),
        (
            '{"format": "tandem-conversation", "version": 1, "title": "t", "messages": [{"role": "user",'
            ' "stretches": [{"text": "bad \\ud800 text", "from": "model"}]}]}',
            "lone surrogate",
        ),
        (
            '{"format": "tandem-conversation", "version": 1, "title": "\\udfff", "messages": []}',
            "lone surrogate",
        ),
    ],
)
def test_deep_or_surrogate_files_are_one_sentence(tmp_path: Path, text: str, sentence: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConversationFileError) as e:  # RecursionError / UnicodeEncodeError escaped before
        read_conversation_file(path)
    assert sentence in str(e.value) and "\n" not in str(e.value)


def test_import_is_all_or_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    data = {
        "title": "half",
        "messages": [
            {"role": "user", "stretches": [{"text": "first", "from": "model"}]},
            {"role": "user", "stretches": [{"text": "bad \ud800", "from": "model"}]},  # fails to encode
        ],
    }
    with pytest.raises(UnicodeEncodeError):
        store.import_conversation(data)
    assert store.conversations() == []  # left ('half', 1) behind before
    assert store._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 0


def write_hostile_rows(path: Path) -> int:
    """A store whose newest conversation holds every kind of bad row, written as another program
    (or a hand edit) would: straight into SQLite."""
    store = Store(path)
    conversation = store.create_conversation("hostile rows")
    store.add_message(conversation.id, "user", "question")
    ids = [store.add_message(conversation.id, "assistant", "short reply").id for _ in range(6)]
    store.close()
    db = sqlite3.connect(path)
    rows = [
        ("stats_json", json.dumps({"n_generated": float("nan"), "decode_s": float("inf")})),
        ("draft_spans_json", '[[0, 5], [3, 900], [-4, 2], [7, 7], ["a", 1], 5]'),
        ("draft_sources_json", '["telepathy", "model"]'),
        ("stats_json", "[" * 5000 + "]" * 5000),
        ("stats_json", "{not json"),
        ("stats_json", json.dumps({"speed_points": [["x", "y"], [float("nan"), 1]]})),
    ]
    for message_id, (column, value) in zip(ids, rows, strict=True):
        db.execute(f"UPDATE messages SET {column} = ? WHERE id = ?", (value, message_id))
    db.execute("UPDATE messages SET draft_spans_json = '[[0, 5], [6, 11]]' WHERE id = ?", (ids[2],))
    db.execute("UPDATE messages SET content = CAST(x'6f6b20eda080' AS TEXT) WHERE id = ?", (ids[5],))
    db.commit()
    db.close()
    return conversation.id


def test_hostile_store_rows_read_as_showable_values(tmp_path: Path) -> None:
    conversation_id = write_hostile_rows(tmp_path / "t.db")
    store = Store(tmp_path / "t.db")
    messages = store.messages(conversation_id)
    for m in messages:
        assert all(0 <= s.start < s.end <= len(m.content) for s in m.spans)
        if m.stats is not None:
            StatsRecord.from_dict(m.stats)
    # Past the text, negative, empty, not numbers: dropped.
    assert [(s.start, s.end) for s in messages[2].spans] == [(0, 5)]
    unknown_source = messages[3].spans
    assert [(s.start, s.end) for s in unknown_source] == [(0, 5), (6, 11)]
    assert known_sources(unknown_source) == ()
    assert messages[6].content.startswith("ok ") and "\ufffd" in messages[6].content  # not UTF-8


def test_window_starts_and_answers_with_hostile_conversation(
    open_window, wait_reply, tiny_target: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from app import paths

    write_hostile_rows(paths.database_path())
    window = open_window(tiny_target, draft="ngram", max_tokens=8)  # raised ValueError before
    assert window.presenter.store.conversation(window.presenter.conversation_id).title == "hostile rows"
    window.presenter.send("hello there")
    wait_reply(window)
    answer = window.presenter.store.messages(window.presenter.conversation_id)[-1]
    assert answer.role == "assistant" and answer.content


def test_window_imports_nan_file_and_starts_again(
    open_window, wait_reply, tiny_target: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = conversation_file(
        tmp_path,
        "stats-nan.json",
        [
            {"role": "user", "content": "q", "stretches": [{"text": "q", "from": "model"}]},
            reply("answer", stats=NAN_STATS),
        ],
    )
    window = open_window(tiny_target, draft="ngram", max_tokens=8)
    imported = window.conversation_actions.import_conversation(str(path))
    assert imported is not None and window.presenter.conversation_id == imported
    window.shutdown()
    again = open_window(tiny_target, draft="ngram", max_tokens=8)  # every later start exited 1 before
    assert again.presenter.conversation_id == imported
    again.presenter.new_conversation()
    again.presenter.send("hello")
    wait_reply(again)
    assert again.presenter.store.messages(again.presenter.conversation_id)[-1].content
