"""A draft model loading on a thread of its own beside its target (engine.loading): the load can
be stopped, an engine closed or a reply stopped meanwhile leaves no thread behind, and two loads
at once keep the process's output where it was."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import engine.session
from engine.adaptive import FIRST_REPLY_MIN_TOKENS
from engine.backend import LlamaRunner, LoadCancelled
from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.drafters import ModelDrafter
from engine.errors import IncompatiblePairError
from engine.events import DraftSource, Finished, Speculation
from engine.loading import BackgroundLoad
from engine.session import Engine

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


def _load_threads() -> list[threading.Thread]:
    """The draft model's threads still running: its load, its header's check."""
    return [t for t in threading.enumerate() if t.name.startswith("tandem-draft-") and t.is_alive()]


def _reply(engine: Engine, max_tokens: int, **kwargs: Any) -> Finished:
    events = engine.generate(PROMPT, SamplingParams(), max_tokens=max_tokens, **kwargs)
    return next(e for e in events if isinstance(e, Finished))


def _hold_draft_loads(monkeypatch: pytest.MonkeyPatch, release: threading.Event | None = None) -> None:
    """The engine's draft model loads (the LlamaRunners made with a `cancel`: the target's has
    none) wait, after the header's check, until `release` is set (None: until the load is told
    to stop): a load still running when a reply starts or the engine closes, whatever the
    machine's speed. Then real llama.cpp loads (or, told to stop, stops at its first report)."""

    def runner(path: str, *args: Any, cancel: threading.Event | None = None, **kwargs: Any) -> LlamaRunner:
        if cancel is not None:
            (release or cancel).wait()
        return LlamaRunner(path, *args, cancel=cancel, **kwargs)

    monkeypatch.setattr(engine.session, "LlamaRunner", runner)


def test_a_load_told_to_stop_raises_and_leaves_nothing(tiny_draft: Path) -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(LoadCancelled):
        LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1, cancel=stop)
    # ...and one not told to stop loads as any other.
    LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1, cancel=threading.Event()).close()


def test_closing_a_draft_model_while_it_loads_stops_the_load_and_its_thread(tiny_draft: Path) -> None:
    def held(cancel: threading.Event) -> LlamaRunner:
        cancel.wait()  # still loading when closed
        return LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1, cancel=cancel)

    drafter = ModelDrafter(held)
    drafter.load_in_background()
    assert len(_load_threads()) == 1 and not drafter.loaded
    drafter.close()
    assert _load_threads() == []
    assert not drafter.loaded and drafter.load_error is None


def test_a_background_load_hands_its_error_to_whoever_takes_the_result() -> None:
    def fails(cancel: threading.Event) -> LlamaRunner:
        raise RuntimeError("no such model")

    load = BackgroundLoad(fails)
    assert load.wait()
    with pytest.raises(RuntimeError, match="no such model"):
        load.result()


def test_an_engine_closed_while_its_draft_model_loads_leaves_no_thread(
    tiny_target: Path, tiny_draft: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hold_draft_loads(monkeypatch)
    engine = Engine(EngineConfig(str(tiny_target), draft=DraftChoice.parse(str(tiny_draft)), n_ctx=512))
    model = engine._model
    assert engine.info_draft is not None and model is not None  # checked before Engine() returned
    assert len(_load_threads()) == 1 and not model.loaded
    engine.close()
    assert _load_threads() == []
    assert not model.loaded


def test_switching_drafts_while_one_loads_stops_that_load(
    tiny_target: Path, tiny_draft: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _hold_draft_loads(monkeypatch)
    engine = Engine(EngineConfig(str(tiny_target), draft=DraftChoice.parse(str(tiny_draft)), n_ctx=512))
    try:
        engine.set_draft(DraftChoice.parse("none"))
        assert _load_threads() == []
        plain = _reply(engine, 8)
    finally:
        engine.close()
    assert plain.stats.n_generated > 0


def test_a_reply_stopped_while_the_draft_model_loads_leaves_the_load_to_the_next(
    tiny_target: Path, tiny_draft: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    _hold_draft_loads(monkeypatch, release)
    engine = Engine(
        EngineConfig(
            str(tiny_target), draft=DraftChoice.parse(str(tiny_draft)), n_ctx=512, draft_lookup=False
        )
    )
    try:
        stop = threading.Event()
        stop.set()
        stopped = _reply(engine, FIRST_REPLY_MIN_TOKENS, cancel=stop)
        assert stopped.stop_reason == "cancelled" and stopped.stats.n_generated == 0
        assert len(_load_threads()) == 1  # the load goes on
        release.set()
        drafted = _reply(engine, FIRST_REPLY_MIN_TOKENS)  # waits for the load, then drafts with it
        plain = _reply(engine, FIRST_REPLY_MIN_TOKENS, speculate=False)
    finally:
        release.set()  # (a close waits for the load, which waits for this)
        engine.close()
    assert _load_threads() == []
    model_drafts = drafted.stats.by_source.get(DraftSource.MODEL)
    assert model_drafts is not None and model_drafts.n_drafted > 0
    assert drafted.token_ids == plain.token_ids


def test_a_refused_pair_is_still_refused_by_the_engine_and_leaves_no_thread(
    tiny_target: Path, tiny_incompatible: Path
) -> None:
    # (The pair is checked on the draft's loading thread, beside the target's load.)
    with pytest.raises(IncompatiblePairError, match="text of token 40"):
        Engine(EngineConfig(str(tiny_target), draft=DraftChoice.parse(str(tiny_incompatible)), n_ctx=256))
    assert _load_threads() == []


def test_a_refused_pair_can_keep_the_loaded_target_plain(tiny_target: Path, tiny_incompatible: Path) -> None:
    # The window's engine: the pair is refused after the target is in (the check runs beside the
    # load), so the target stays and decodes plain, the reason kept, instead of a second load.
    engine = Engine(
        EngineConfig(str(tiny_target), draft=DraftChoice.parse(str(tiny_incompatible)), n_ctx=256),
        keep_target_if_draft_refused=True,
    )
    try:
        assert isinstance(engine.draft_refused, IncompatiblePairError)
        assert "text of token 40" in str(engine.draft_refused)
        assert engine.speculation is Speculation.NONE and engine.info_draft is None
        assert engine.config.draft.kind is Speculation.NONE
        assert _load_threads() == []
        assert _reply(engine, 8).stats.n_drafted == 0  # it answers, plain
    finally:
        engine.close()


def test_a_load_leaves_the_process_output_where_it_is(tiny_draft: Path) -> None:
    # llama-cpp-python's quiet load points fds 1 and 2 at /dev/null and back; two loads at once
    # (a draft model beside its target) put them back wrongly, and everything the process wrote
    # afterwards was lost. So a load leaves them alone, seen from within (its progress reports).
    def where() -> list[tuple[int, int]]:
        return [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]

    before = where()
    during: list[list[tuple[int, int]]] = []
    LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1, on_progress=lambda _: during.append(where())).close()
    assert during and all(seen == before for seen in during)


def test_a_first_reply_too_short_for_the_draft_model_does_not_load_it_beside_the_target(
    tiny_target: Path, tiny_draft: Path
) -> None:
    # A first use (nothing measured) tries a pair only on a reply of FIRST_REPLY_MIN_TOKENS or
    # more: told its first reply is shorter (`tandem generate --max-tokens 32`), the engine does
    # not load the model at all, and takes no CPU from the target for it...
    config = EngineConfig(str(tiny_target), draft=DraftChoice.parse(str(tiny_draft)), n_ctx=512)
    engine = Engine(config, first_reply_tokens=32)
    try:
        assert engine._model is not None and engine._model.wait_loaded() and not engine._model.loaded
        short = _reply(engine, 32)
        assert not engine._model.loaded and DraftSource.MODEL not in short.stats.by_source
    finally:
        engine.close()
    # Told of a first reply long enough, it loads the model beside the target.
    engine = Engine(config, first_reply_tokens=FIRST_REPLY_MIN_TOKENS)
    try:
        assert engine._model is not None and engine._model.wait_loaded() and engine._model.loaded
    finally:
        engine.close()
    assert _load_threads() == []
