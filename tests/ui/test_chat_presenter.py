"""The chat presenter without widgets: a real engine controller (a real worker process on a tiny
generated model), a real SQLite store under tmp_path, real settings in this test's TANDEM_HOME.
The Qt application exists for signals only: no QWidget is made."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from app.settings import load_settings
from app.store import Store

pytest.importorskip("pytestqt")

from app.host.controller import EngineController  # noqa: E402
from engine.config import DraftChoice  # noqa: E402
from engine.errors import ErrorKind, Failure, PairRefusal  # noqa: E402
from ui.presenters.engine_presenter import PairView, SpeculationView, pair_words  # noqa: E402
from ui.presenters.failures import UnexpectedFailure, failure_words  # noqa: E402
from ui.presenters.presenter import ChatPresenter  # noqa: E402
from ui.presenters.reply_presenter import MessageRow, ReplyEnded  # noqa: E402


class Seen:
    """Every signal the presenters emit (the chat's, the engine's, Compare's), in order: what a
    window would follow."""

    def __init__(self, presenter: ChatPresenter) -> None:
        self.events: list[tuple[str, Any]] = []
        signals = {
            name: getattr(presenter, name)
            for name in (
                "conversation_shown",
                "message_added",
                "messages_removed",
                "notice_changed",
            )
        }
        signals["speculation_changed"] = presenter.engine.speculation_changed
        signals["pair_changed"] = presenter.engine.pair_changed
        for name in ("started", "progressed", "finished", "failed"):
            signals[f"compare_{name}"] = getattr(presenter.comparison, name)
        # The window shows the engine's notices (a load failed) on the chat's notice line, and
        # Compare's state in the status bar as the chat's.
        shared = [
            ("notice_changed", presenter.engine.notice_changed),
            ("speed_line_changed", presenter.comparison.state_changed),
        ]
        # The reply being generated: its presenter's signals, which the window follows directly.
        replies = presenter.replies
        shared += [
            (name, getattr(replies, name))
            for name in (
                "message_added",
                "messages_removed",
                "notice_changed",
                "speed_line_changed",
                "reply_progressed",
                "reply_ended",
            )
        ]
        for name, signal in [*signals.items(), *shared]:
            signal.connect(lambda *args, name=name: self.events.append((name, args)))

    def of(self, name: str) -> list[Any]:
        return [args[0] if len(args) == 1 else args for n, args in self.events if n == name]


@pytest.fixture
def make(qtbot, tmp_path: Path):  # type: ignore[no-untyped-def]
    """make(model, draft, **settings) -> a presenter whose engine is loaded."""
    made: list[tuple[ChatPresenter, Store]] = []

    def make_(model: Path, draft: str | None = "ngram", **changes: Any) -> ChatPresenter:
        changes.setdefault("temperature", 0.0)
        settings = dataclasses.replace(load_settings(), n_threads=1, **changes)
        store = Store(tmp_path / f"tandem-{len(made)}.db")
        presenter = ChatPresenter(EngineController(), store, settings, model=str(model), draft=draft)
        made.append((presenter, store))
        presenter.engine.start_engine()
        qtbot.waitUntil(lambda: presenter.controller.info is not None, timeout=60_000)
        return presenter

    yield make_
    for presenter, _store in made:
        presenter.replies.stop()
        presenter.controller.shutdown()
        presenter.close()


def _idle(qtbot, presenter: ChatPresenter) -> None:  # type: ignore[no-untyped-def]
    qtbot.waitUntil(
        lambda: not presenter.controller.is_busy and presenter.replies.live is None, timeout=60_000
    )


def test_switching_speculation_keeps_one_state(
    qtbot, make, tiny_target: Path, tiny_incompatible: Path
) -> None:
    presenter = make(tiny_target, draft="ngram")
    seen = Seen(presenter)
    assert presenter.engine.speculation == SpeculationView("ngram", "ngram", True)

    presenter.engine.set_speculation(DraftChoice.parse("none"))
    # The choice is the state at once; saved; the engine follows and the pair says so.
    assert (
        presenter.engine.speculation.choice == "none"
        and seen.of("speculation_changed")[-1] == presenter.engine.speculation
    )
    assert load_settings().draft.text == "none" and presenter.engine.draft.text == "none"
    assert seen.of("pair_changed")[-1] == PairView("Switching the speed-up… (applies from the next reply)")
    qtbot.waitUntil(lambda: presenter.controller.info.speculation == "none", timeout=30_000)
    qtbot.waitUntil(lambda: "speed-up off" in seen.of("pair_changed")[-1].text.lower(), timeout=30_000)
    assert presenter.engine.speculation == SpeculationView("none", "none", True)
    assert presenter.engine.next_speculation() == "ngram"  # no draft model chosen: off <-> n-gram
    assert not presenter.engine.choose_speculation("draft")  # ... so the window must ask for a file

    # A refused draft: the engine keeps n-gram lookup; the choice, the settings and the state
    # shown all go back to what the engine runs, and the pair reports the rule as a problem.
    assert presenter.engine.choose_speculation("ngram")
    qtbot.waitUntil(lambda: presenter.controller.info.speculation == "ngram", timeout=30_000)
    presenter.engine.set_speculation(DraftChoice.parse(str(tiny_incompatible)))
    assert presenter.engine.speculation.choice == "draft"
    qtbot.waitUntil(lambda: "token 40" in seen.of("pair_changed")[-1].text, timeout=30_000)
    pair = seen.of("pair_changed")[-1]
    # The window words the refusal from its rule and both values, not from the worker's sentence.
    assert pair.is_problem and pair.text.startswith(pair_words(presenter.controller.info))
    assert "vocabulary does not match the target's: text of token 40 differs" in pair.text
    assert presenter.engine.speculation == SpeculationView("ngram", "ngram", True)
    assert presenter.settings.draft.text == "ngram" == load_settings().draft.text
    assert load_settings().draft_model_path == str(tiny_incompatible)  # the last file chosen stays offered
    # Every announcement was the one state as it stood then; the last one is the state now.
    views = seen.of("speculation_changed")
    assert views and views[-1] is presenter.engine.speculation
    assert all(isinstance(v, SpeculationView) for v in views)


def test_a_reply_is_saved_as_it_streams_and_recorded_when_it_ends(qtbot, make, tiny_target: Path) -> None:
    presenter = make(tiny_target, draft="none", max_tokens=24)
    seen = Seen(presenter)
    presenter.view_extras = lambda message_id: {"kept_by_the_window": message_id}
    presenter.send("Say something")
    assert presenter.replies.live is not None and presenter.conversation_id is not None
    rows = seen.of("message_added")
    assert [(r.role, r.status) for r in rows] == [("user", "complete"), ("assistant", "streaming")]
    assert rows[0] == MessageRow(rows[0].id, "user", "Say something")
    stored = presenter.store.messages(presenter.conversation_id)
    assert [(m.role, m.status) for m in stored] == [("user", "complete"), ("assistant", "streaming")]

    _idle(qtbot, presenter)
    (ended,) = seen.of("reply_ended")
    assert isinstance(ended, ReplyEnded) and ended.status == "complete" and ended.text.text
    reply = {m.id: m for m in presenter.store.messages(presenter.conversation_id)}[ended.message_id]
    assert reply.status == "complete"
    assert (
        reply.content == ended.text.text and ended.stats is not None and reply.stats == ended.stats.as_dict()
    )
    assert reply.stats is not None and reply.stats["stop_reason"] == "length"
    assert reply.stats["n_generated"] == 24 and reply.stats["kept_by_the_window"] == ended.message_id
    # A plain reply long enough is this target's speed baseline, saved in the settings.
    target = presenter.controller.info.target_path
    assert load_settings().plain_tokens_per_s[target] == pytest.approx(
        reply.stats["decode_tokens_per_s"], rel=1e-2
    )
    assert seen.of("speed_line_changed")[-1] == "Ready"  # the figures are the reply's own
    assert presenter.store.conversation(presenter.conversation_id).title == "Say something"
    # The next engine started (a restart, another model) gets it to draft from when asked again.
    assert presenter.controller.supervisor.earlier_exchanges()[-1] == ("Say something", ended.text.text)

    # Shown again, the conversation comes back from the store as rows.
    presenter.show_conversation(presenter.conversation_id)
    shown = seen.of("conversation_shown")[-1]
    assert [(m.role, m.text, m.status) for m in shown.messages] == [
        ("user", "Say something", "complete"),
        ("assistant", ended.text.text, "complete"),
    ]


def test_compare_runs_are_routed_to_compare_not_to_the_chat(qtbot, make, tiny_target: Path) -> None:
    presenter = make(tiny_target, draft="ngram", max_tokens=24)
    seen = Seen(presenter)
    presenter.comparison.run("Repeat: the cat sat on the mat, the cat sat on the mat.")
    assert seen.of("compare_started") == [()]
    (plain_id, plain), (speculative_id, speculative) = presenter.comparison.runs.items()
    assert (plain, speculative) == ("plain", "speculative")
    qtbot.waitUntil(lambda: len(seen.of("compare_finished")) == 2, timeout=60_000)
    assert [name for name, _ in seen.of("compare_finished")] == ["plain", "speculative"]
    finished = [reply for _, reply in seen.of("compare_finished")]
    assert [r.request_id for r in finished] == [plain_id, speculative_id]
    progressed = {(name, p.request_id) for name, p in seen.of("compare_progressed")}
    assert progressed <= {("plain", plain_id), ("speculative", speculative_id)}
    assert finished[0].finished.stats.speculation == "none"
    assert finished[1].finished.stats.speculation == "ngram"
    assert finished[0].text == finished[1].text  # greedy: the same text, only the speed differs
    # Nothing of it reached the chat or the store; the plain run became the baseline.
    assert not seen.of("reply_progressed") and not seen.of("reply_ended") and not seen.of("message_added")
    assert presenter.store.conversations() == [] and presenter.comparison.runs == {}
    assert presenter.speed.plain_tokens_per_s() == round(finished[0].finished.stats.decode_tokens_per_s, 3)
    assert seen.of("speed_line_changed")[-1] == "Ready"
    # Compared again: the speculative run drafts as it did, not from the earlier runs' answers
    # (kept, they would draft it whole: a comparison of the engine's memory, not of speculation).
    presenter.comparison.run("Repeat: the cat sat on the mat, the cat sat on the mat.")
    qtbot.waitUntil(lambda: len(seen.of("compare_finished")) == 4, timeout=60_000)
    again = seen.of("compare_finished")[3][1].finished
    assert again.stats.speculation == "ngram" and again.text == finished[1].finished.text
    assert again.stats.n_drafted_memory == 0


def test_a_failed_load_arrives_as_its_kind_and_is_worded_by_the_window(qtbot, tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    missing = tmp_path / "missing.gguf"
    presenter = ChatPresenter(
        EngineController(), store, dataclasses.replace(load_settings(), n_threads=1), model=str(missing)
    )
    seen = Seen(presenter)
    failures: list[Failure] = []
    presenter.controller.engine_failed.connect(failures.append)
    try:
        presenter.engine.start_engine()
        qtbot.waitUntil(lambda: bool(failures), timeout=60_000)
        (failure,) = failures
        assert failure.kind is ErrorKind.MODEL_NOT_FOUND and str(missing) in failure.sentence
        text, is_warning = seen.of("notice_changed")[-1]
        assert is_warning and text == f"The model could not be loaded: {failure.sentence}"
        assert seen.of("pair_changed")[-1] == PairView(
            "Model not loaded", is_problem=True, tooltip=failure.sentence
        )
        # A reply asked of no engine fails as NO_ENGINE, kept out of the chat, said in the notice.
        presenter.send("hello?")
        qtbot.waitUntil(
            lambda: presenter.replies.live is None and not presenter.controller.is_busy, timeout=30_000
        )
        assert seen.of("messages_removed") and seen.of("notice_changed")[-1][0].startswith("No reply: ")
    finally:
        presenter.controller.shutdown()
        presenter.close()


def test_the_window_words_a_refused_pair_from_its_values() -> None:
    refusal = Failure(
        ErrorKind.INCOMPATIBLE_PAIR, "(the worker's sentence)", PairRefusal("text of token 40", "abc", "abd")
    )
    words = failure_words(refusal)
    assert "worker's sentence" not in words
    assert words.endswith("text of token 40 differs (target: 'abc', draft: 'abd')")
    other = Failure(
        ErrorKind.PROMPT_TOO_LONG, "the prompt is 5000 tokens long but the context holds only 4096"
    )
    assert failure_words(other) == other.sentence


def test_an_unexpected_failure_raises_once_the_window_has_settled_it(qtbot, tmp_path: Path) -> None:
    store = Store(tmp_path / "t.db")
    presenter = ChatPresenter(EngineController(), store, load_settings())
    seen = Seen(presenter)
    try:
        presenter.comparison.runs = {7: "plain", 8: "speculative"}
        presenter.comparison.on_controller_reply_failed(
            7, Failure(ErrorKind.DECODE, "llama_decode returned -1"), False
        )
        assert seen.of("compare_failed") == [("plain", "llama_decode returned -1")]
        with pytest.raises(UnexpectedFailure, match="a bug"):
            presenter.comparison.on_controller_reply_failed(8, Failure(ErrorKind.UNEXPECTED, "a bug"), False)
        assert seen.of("compare_failed")[-1] == ("speculative", "a bug") and presenter.comparison.runs == {}
    finally:
        presenter.controller.shutdown()
        presenter.close()


def test_the_presenter_module_imports_no_widgets() -> None:
    source = Path(__file__).parents[2] / "ui" / "presenters" / "presenter.py"
    modules = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
    assert not {m for m in modules if "QtWidgets" in m or "QtGui" in m}
    presenters = {
        "ui.presenters.compare_presenter",
        "ui.presenters.engine_presenter",
        "ui.presenters.failures",
        "ui.presenters.reply_presenter",
        "ui.presenters.speed_presenter",
    }
    assert {m for m in modules if m.startswith("ui.")} <= presenters  # words and state, no widgets
    for name in presenters:  # ... and none of the presenters it is split into imports widgets
        path = Path(__file__).parents[2] / (name.replace(".", "/") + ".py")
        imported = {n.module for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m and ("QtWidgets" in m or "QtGui" in m)}, name
