# ruff: noqa: F811 - the hub fixtures are imported from test_pair_doctor and named as parameters
"""What replies measure per pair on this machine, and the pair doctor reading it back: the chat
keeps each reply's whole-request speedup per (target, drafter) in its SQLite store; after three
such replies `tandem models check` (text and --json) says "measured here" instead of its estimate.
Real runs on tiny generated models, a real store, the local hub stand-in."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
from hub_server import FakeHub

from app import paths
from app.library import pair_doctor as doctor
from app.store import (
    MIGRATIONS,
    MIN_PAIR_REPLIES,
    SCHEMA_V1,
    SCHEMA_V2_SEARCH,
    SCHEMA_V3_ATTACHMENTS,
    SCHEMA_V4_DRAFT_SOURCES,
    Store,
    model_key,
    model_key_of_file,
    read_pair_measurement,
)
from engine.events import Speculation
from tests.app.test_pair_doctor import (  # noqa: F401 - fixtures
    DRAFT,
    TARGET,
    file_of,
    hub,
    hub_files,
    run,
)


def hub_key(hub: FakeHub, ref: str) -> str:
    f = file_of(hub, ref)
    return model_key(ref.rsplit("/", 1)[1], len(f.data))


def keep(store: Store, target: str, drafter: str, *speedups: float, is_plain_estimate: bool = False) -> None:
    for s in speedups:
        store.add_pair_reply(target, drafter, s, is_plain_estimate=is_plain_estimate, n_generated=64)


# --- the store ------------------------------------------------------------------------------------


def test_a_store_of_version_4_gains_the_pair_table_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    db = sqlite3.connect(path)
    for n, step in enumerate(
        (SCHEMA_V1, SCHEMA_V2_SEARCH, SCHEMA_V3_ATTACHMENTS, SCHEMA_V4_DRAFT_SOURCES), 1
    ):
        db.executescript(f"BEGIN;\n{step}\nPRAGMA user_version = {n};\nCOMMIT;")
    db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES ('kept', 0, 0)")
    db.commit()
    db.close()
    assert read_pair_measurement("t.gguf:1", Speculation.NGRAM, path) is None  # no table yet: nothing
    store = Store(path)
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) > 4
    assert [c.title for c in store.conversations()] == ["kept"]
    keep(store, "t.gguf:1", Speculation.NGRAM, 2.0, 1.0, 3.0)
    measured = read_pair_measurement("t.gguf:1", Speculation.NGRAM, path)
    assert measured is not None and measured.n_replies == 3 and measured.speedup == 2.0
    store.close()


def test_a_pair_is_measured_from_three_replies_by_their_median(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(path)
    keep(store, "t.gguf:10", "d.gguf:5", 2.0, 2.4)
    assert read_pair_measurement("t.gguf:10", "d.gguf:5", path) is None  # two replies: too few
    keep(store, "t.gguf:10", "d.gguf:5", 9.0)
    keep(store, "t.gguf:10", Speculation.NGRAM, 1.2, 1.2, 1.2, is_plain_estimate=True)
    m = read_pair_measurement("t.gguf:10", "d.gguf:5", path)  # read-only, beside the open store
    assert m is not None and (m.speedup, m.n_replies, m.is_plain_estimate) == (2.4, 3, False)
    ngram = read_pair_measurement("t.gguf:10", Speculation.NGRAM, path)
    assert ngram is not None and ngram.is_plain_estimate
    assert read_pair_measurement("t.gguf:11", "d.gguf:5", path) is None  # another file size: another model
    assert read_pair_measurement("t.gguf:10", "d.gguf:5", tmp_path / "none.db") is None
    assert not (tmp_path / "none.db").exists()  # looking never makes a store
    store.close()


def test_a_split_model_is_known_by_all_its_parts(tmp_path: Path) -> None:
    for i, size in ((1, 100), (2, 50)):
        (tmp_path / f"m-{i:05d}-of-00002.gguf").write_bytes(b"x" * size)
    (tmp_path / "single.gguf").write_bytes(b"x" * 7)
    assert model_key_of_file(tmp_path / "m-00001-of-00002.gguf") == "m-00001-of-00002.gguf:150"
    assert model_key_of_file(tmp_path / "single.gguf") == "single.gguf:7"
    assert model_key_of_file(tmp_path / "missing.gguf") is None


# --- real replies, kept by the chat, read by the doctor --------------------------------------------


def test_replies_with_a_pair_are_kept_and_the_doctor_reads_them_back(
    qtbot, tiny_target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three real n-gram replies on a tiny model, through the chat presenter into the store at its
    usual place; then `tandem models check` on the same target reads what they measured."""
    from app.host.controller import EngineController
    from app.settings import load_settings
    from ui.presenters.presenter import ChatPresenter
    from ui.presenters.verdict import headline

    code, out, _ = run(capsys, "check", str(tiny_target), "--no-drafts")
    assert code == 0 and not any("measured here" in line for line in out)  # before: nothing measured

    settings = dataclasses.replace(load_settings(), n_threads=1, temperature=0.0, max_tokens=40)
    store = Store(paths.database_path())
    presenter = ChatPresenter(EngineController(), store, settings, model=str(tiny_target), draft="ngram")
    try:
        presenter.engine.start_engine()
        qtbot.waitUntil(lambda: presenter.controller.info is not None, timeout=60_000)
        ended = []
        presenter.replies.reply_ended.connect(ended.append)
        for i in range(MIN_PAIR_REPLIES):
            presenter.send(f"Repeat after me {i}: one two three four five, one two three four five")
            qtbot.waitUntil(lambda i=i: len(ended) == i + 1, timeout=120_000)
        figures = [headline(e.stats, e.stats.plain_tokens_per_s, e.stats.note_kind).speedup for e in ended]
        assert all(f is not None for f in figures), [e.stats for e in ended]
        key = model_key_of_file(tiny_target)
        assert key is not None
        measured = read_pair_measurement(key, Speculation.NGRAM, store.path)
        assert measured is not None and measured.n_replies == MIN_PAIR_REPLIES
        assert measured.speedup == pytest.approx(sorted(f for f in figures if f is not None)[1])
    finally:
        presenter.replies.stop()
        presenter.controller.shutdown()
        presenter.close()

    code, out, _ = run(capsys, "check", str(tiny_target), "--no-drafts")
    assert code == 0
    [ngram] = [line for line in out if line.strip().startswith("ngram")]
    s = measured.speedup
    said = f"{s:.1f}× faster" if s >= 1 else f"{1 / s:.1f}× slower"
    assert f"measured here: {said} over 3 replies" in ngram
    code, out, _ = run(capsys, "check", str(tiny_target), "--no-drafts", "--json")
    assert json.loads("\n".join(out))["measured"]["n_replies"] == 3


def test_a_reply_cut_short_or_with_the_speed_up_off_is_not_kept() -> None:
    from app.host.messages import EngineInfo
    from engine.config import DraftChoice
    from engine.events import StatsRecord
    from ui.presenters.speed_presenter import pair_reply

    info = EngineInfo(
        str(Path(__file__)), "t", DraftChoice(Speculation.NGRAM), "", Speculation.NGRAM, 512, True, False, ""
    )
    long = StatsRecord(
        speculation=Speculation.NGRAM,
        n_generated=64,
        n_drafted=40,
        n_accepted=30,
        decode_s=1.0,
        prefill_s=0.1,
        plain_tokens_per_s=32.0,
        stop_reason="length",
    )
    kept = pair_reply(long, info)
    assert kept is not None and kept.drafter == Speculation.NGRAM and not kept.is_plain_estimate
    assert kept.speedup == pytest.approx((0.1 + 64 / 32) / 1.1)
    assert pair_reply(StatsRecord(**{**_fields(long), "stop_reason": "cancelled"}), info) is None
    assert pair_reply(StatsRecord(**{**_fields(long), "n_generated": 8}), info) is None  # too short
    assert pair_reply(StatsRecord(**{**_fields(long), "speculation": Speculation.NONE}), info) is None
    served = EngineInfo(**{**_fields(info), "server": "http://127.0.0.1:1/v1"})
    assert pair_reply(long, served) is None  # a server decides its own speculation


def _fields(value: object) -> dict[str, object]:
    import dataclasses

    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}  # type: ignore[arg-type]


# --- the doctor's words: the estimate before, the measured figure after -----------------------------


def test_check_says_the_estimate_then_what_was_measured_here(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "check", TARGET, "--draft", DRAFT)
    assert code == 0 and any(line.startswith("Estimate:") for line in out)
    assert not any("measured here" in line.lower() for line in out)
    code, out, _ = run(capsys, "check", TARGET, "--draft", DRAFT, "--json")
    data = json.loads("\n".join(out))
    assert data["measured"] is None and data["estimate"]["is_estimate"] is True

    store = Store(paths.database_path())
    keep(store, hub_key(hub, TARGET), hub_key(hub, DRAFT), 1.8, 2.1, 2.3)
    keep(store, hub_key(hub, TARGET), Speculation.NGRAM, 1.3, 1.4, 1.4, 1.6)
    store.close()

    code, out, _ = run(capsys, "check", TARGET, "--draft", DRAFT)
    assert code == 0
    assert "Measured here: 2.1× faster over 3 replies." in out
    assert not any(line.startswith("Estimate:") for line in out)  # replaced
    code, out, _ = run(capsys, "check", TARGET, "--draft", DRAFT, "--json")
    data = json.loads("\n".join(out))
    assert data["measured"] == {"speedup": 2.1, "n_replies": 3, "is_plain_estimate": False}
    assert data["estimate"]["is_estimate"] is True  # still there, labelled
    # Without a draft: n-gram lookup's own figure, and the draft found on the hub has its own.
    code, out, _ = run(capsys, "check", TARGET)
    drafts = out[out.index("drafts:") + 1 :]
    assert drafts[0].strip().startswith("ngram") and "measured here: 1.4× faster over 4 replies" in drafts[0]
    assert DRAFT in drafts[1] and "measured here: 2.1× faster over 3 replies" in drafts[1]
    assert "estimate" not in drafts[1]


def test_the_estimate_says_what_replaces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "memory_bandwidth_bytes_per_s", lambda: 20e9)
    e = doctor.estimate_speedup(4 * 10**9, 5 * 10**8)
    assert e.describe().startswith("Estimate:")
    assert (
        f"After {MIN_PAIR_REPLIES} replies with this pair in the chat, the measured figure replaces it"
        in e.describe()
    )
