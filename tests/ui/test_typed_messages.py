"""Data, not sentences, across boundaries: what the engine and the worker report carries a typed
kind (and for a refused pair the rule and both values); the window branches on those, never on
the wording of a sentence someone else composed."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from hub_server import FakeHub, tiny_pair_catalog

from app.library.downloads import DownloadStopped, HubUnreachableError
from engine.config import DraftChoice, EngineConfig
from engine.errors import (
    EmptyModelError,
    ErrorKind,
    Failure,
    IncompatiblePairError,
    ModelNotFoundError,
    NotGGUFError,
    PromptTooLongError,
    TandemError,
    TruncatedModelError,
)
from engine.events import DraftingState, Finished
from engine.rpc import RpcError
from engine.session import Engine

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from app import paths  # noqa: E402
from app.library.catalog import MachineInfo, draft_choices, parse_catalog, scan_local_models  # noqa: E402
from engine.config import NGRAM_LOOKUP
from engine.gguf_info import read_gguf_info  # noqa: E402
from ui.models.download_jobs import DownloadEnd  # noqa: E402
from ui.models.download_jobs import DownloadJob as _Job  # noqa: E402
from ui.models.models_page import ModelsPage  # noqa: E402


def _generate(engine: Engine, prompt: str, max_tokens: int) -> Finished:
    finished = None
    for event in engine.generate(prompt, max_tokens=max_tokens):
        if isinstance(event, Finished):
            finished = event
    assert finished is not None
    return finished


# ---- errors as values


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ModelNotFoundError("no file"), ErrorKind.MODEL_NOT_FOUND),
        (EmptyModelError("empty"), ErrorKind.EMPTY_MODEL),
        (NotGGUFError("text"), ErrorKind.NOT_GGUF),
        (TruncatedModelError("cut"), ErrorKind.TRUNCATED_MODEL),
        (PromptTooLongError(5000, 4096), ErrorKind.PROMPT_TOO_LONG),
        (RpcError("nothing listening"), ErrorKind.RPC),
        (HubUnreachableError("no hub"), ErrorKind.DOWNLOAD),
        (TandemError("something"), ErrorKind.OTHER),
        (ValueError("a bug"), ErrorKind.UNEXPECTED),
    ],
)
def test_every_error_has_its_kind(error: BaseException, kind: ErrorKind) -> None:
    failure = Failure.of(error)
    assert failure.kind is kind and failure.sentence == str(error) and failure.pair is None
    assert pickle.loads(pickle.dumps(failure)) == failure


def test_an_incompatible_pair_travels_as_its_rule_and_both_values() -> None:
    error = IncompatiblePairError("text of token 40", "abc", "abd")
    failure = Failure.of(error)
    assert failure.kind is ErrorKind.INCOMPATIBLE_PAIR
    assert failure.pair is not None
    assert (failure.pair.rule, failure.pair.target_value, failure.pair.draft_value) == (
        "text of token 40",
        "abc",
        "abd",
    )
    # The sentence the CLI prints is built from the same values.
    assert str(error) == f"the draft model cannot draft for this target: {failure.pair.describe()}"
    assert pickle.loads(pickle.dumps(failure)) == failure


def test_a_remote_error_names_the_input_to_change_as_data() -> None:
    from app.host.remote_client import RemoteError, RemoteFix, api_base

    with pytest.raises(RemoteError) as empty:
        api_base("  ")
    error = empty.value
    assert error.kind is ErrorKind.REMOTE and error.fix is RemoteFix.ADDRESS
    assert str(error).startswith("--remote is empty: ")  # the command line's words
    assert error.sentence("the server address", "-").startswith("the server address is empty: ")
    key = RemoteError("http://h/v1 needs an API key (HTTP 401: no)", RemoteFix.API_KEY)
    assert str(key) == "http://h/v1 needs an API key (HTTP 401: no); pass --api-key"
    assert key.sentence("-", "fill in the API key").endswith("(HTTP 401: no); fill in the API key")
    refused = RemoteError("http://h/v1 refused the API key (HTTP 401: no)")  # nothing to name
    assert refused.fix is None and refused.sentence("-", "-") == str(refused)


def test_draft_choices_carry_the_refusal_as_data(
    tiny_target: Path, tiny_draft: Path, tiny_incompatible: Path
) -> None:
    folder = paths.models_dir()
    for f in (tiny_target, tiny_draft, tiny_incompatible):
        shutil.copy(f, folder / f.name)
    choices = {
        c.path.name: c for c in draft_choices(read_gguf_info(folder / "target.gguf"), scan_local_models())
    }
    assert choices["draft.gguf"].refusal is None and choices["draft.gguf"].problem is None
    other = choices["other-vocab.gguf"]
    assert other.refusal is not None and other.refusal.rule == "text of token 40"
    assert other.problem is not None and other.problem.endswith(other.refusal.describe())


# ---- the drafting state


def test_a_suspended_drafter_says_so_as_data(tiny_target: Path) -> None:
    plain_engine = Engine(
        EngineConfig(str(tiny_target), draft=DraftChoice.parse(None), n_ctx=512, n_threads=1)
    )
    try:
        plain = _generate(plain_engine, "abc abc abc abc abc abc", max_tokens=8)
    finally:
        plain_engine.close()
    assert plain.stats.note_kind is DraftingState.DRAFTING and plain.stats.note == ""
    engine = Engine(EngineConfig(str(tiny_target), draft=DraftChoice.parse("ngram"), n_ctx=512, n_threads=1))
    try:
        controller = engine._controller
        assert controller is not None and controller.adaptive
        controller.guard.suspended_steps = 10_000  # as the throughput guard leaves it after a loss
        suspended = _generate(engine, "abc abc abc abc abc abc abc", max_tokens=12)
    finally:
        engine.close()
    assert suspended.stats.note_kind is DraftingState.SUSPENDED
    assert suspended.stats.n_drafted == 0 and suspended.stats.note
    assert suspended.stats.as_dict()["note_kind"] == "suspended"


# ---- the window


def test_the_pair_label_is_red_when_the_draft_was_refused_at_load(
    qtbot, open_window, tiny_target: Path, tiny_incompatible: Path
) -> None:
    window = open_window(tiny_target, draft=str(tiny_incompatible))
    info = window.controller.info
    assert info.draft_refusal is not None and info.draft_refusal.kind is ErrorKind.INCOMPATIBLE_PAIR
    assert window.header.state_label.property("tone") == "error"  # the theme's error colour
    window.presenter.engine.set_speculation(NGRAM_LOOKUP)
    qtbot.waitUntil(lambda: window.controller.info.speculation == "ngram", timeout=30_000)
    qtbot.waitUntil(lambda: "n-gram" in window.header.state_label.text(), timeout=30_000)
    assert window.controller.info.draft_refusal is None
    assert window.header.state_label.property("tone") == ""


def _page(qtbot, hub: FakeHub) -> ModelsPage:
    from hub_server import TINY_DRAFT_REPO, TINY_REPO

    data = tiny_pair_catalog(
        hub.repos[TINY_REPO].files["tiny-target.gguf"], hub.repos[TINY_DRAFT_REPO].files["tiny-draft.gguf"]
    )
    machine = MachineInfo(total_ram_bytes=16 * 1024**3, has_gpu=False, gpu_label="")
    page = ModelsPage(catalog=parse_catalog(data), machine=machine)
    qtbot.addWidget(page)
    page.show()
    return page


@pytest.mark.parametrize(
    ("stop", "end"),
    [
        (
            DownloadStopped("the download of x was cancelled", is_paused=False),
            DownloadEnd.CANCELLED,
        ),
        (DownloadStopped("paused at 3 MB", is_paused=True), DownloadEnd.PAUSED),
        (HubUnreachableError("the hub did not answer"), DownloadEnd.FAILED),
    ],
)
def test_a_download_job_reports_how_it_ended_as_data(qtbot, stop: Exception, end: DownloadEnd) -> None:
    def run(control, on_progress):  # type: ignore[no-untyped-def]
        raise stop

    job = _Job("k", run)
    with qtbot.waitSignal(job.signals.failed, timeout=10_000) as failed:
        job.thread.start()
    assert failed.args == ["k", str(stop), end]


def test_a_cancelled_download_is_not_shown_as_an_error(qtbot, hub: FakeHub) -> None:
    page = _page(qtbot, hub)
    hub.throttle_s = 0.02
    qtbot.mouseClick(page.download_view.rows["tiny-pair"].download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.download_view.rows["tiny-pair"].progress_bar.value() > 100, timeout=30_000)
    with qtbot.waitSignal(page.download_view.failed, timeout=30_000) as failed:
        qtbot.mouseClick(page.download_view.rows["tiny-pair"].cancel_button, Qt.MouseButton.LeftButton)
    assert failed.args[2] is False  # not paused
    label = page.download_view.rows["tiny-pair"].status_label
    assert "cancelled" in label.text()
    assert page.download_view.rows["tiny-pair"].progress_bar.value() == 0
    assert label.styleSheet() == ""


def test_a_replys_numbers_are_one_record_the_window_reads_by_name_and_old_records_still_read() -> None:
    import json

    from engine.events import Speculation, Stats, StatsRecord

    stats = Stats(Speculation.NGRAM, 10, 10, 40, 30, 24, 20, 8, 0.1, 0.5, 0.4, 8)
    record = StatsRecord.of(stats, "length", speed_points=[[0.5, 40]])
    assert record.speculation is Speculation.NGRAM and record.is_speculative
    assert (record.decode_tokens_per_s, record.acceptance_rate, record.stop_reason) == (80.0, 0.8, "length")
    assert record.extras == {"speed_points": [[0.5, 40]]}  # a key it does not know is kept
    stored = json.loads(json.dumps(record.as_dict()))  # as the conversation store keeps it
    assert StatsRecord.from_dict(stored) == record and stored == record.as_dict()
    # Records written by older code: fewer keys, a speculation kind it no longer knows.
    old = StatsRecord.from_dict({"speculation": "ngram", "decode_tokens_per_s": 12.5, "n_generated": 7})
    assert (old.speculation, old.decode_tokens_per_s, old.n_generated, old.n_drafted) == ("ngram", 12.5, 7, 0)
    assert old.stop_reason is None and old.plain_tokens_per_s is None and old.plain_tokens_per_s_est is None
    odd = StatsRecord.from_dict({"speculation": "medusa", "n_generated": "many", "note": None})
    assert (odd.speculation, odd.n_generated, odd.note) == (Speculation.NONE, 0, "")


def test_a_message_status_is_one_of_five_and_an_unknown_one_reads_as_complete(tmp_path: Path) -> None:
    import sqlite3

    from app.store import MessageStatus, Store

    store = Store(tmp_path / "t.db")
    conversation = store.create_conversation("c")
    reply = store.add_message(conversation.id, "assistant", "hi", status=MessageStatus.STREAMING)
    store.set_status([reply.id], MessageStatus.INTERRUPTED)
    (got,) = store.messages(conversation.id)
    assert got.status is MessageStatus.INTERRUPTED
    store.close()
    with sqlite3.connect(tmp_path / "t.db") as db:  # hand-edited
        db.execute("UPDATE messages SET status = 'archived'")
    store = Store(tmp_path / "t.db")
    assert store.messages(conversation.id)[0].status is MessageStatus.COMPLETE
    store.close()
