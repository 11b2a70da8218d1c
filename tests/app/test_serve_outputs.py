"""`tandem serve` grows llama.cpp's logits buffer while it loads, before it listens, so that an API
client's first long verify batch does not pay the growth (issue 48, Why 4: +30-90 ms at 26-128 rows
with Gemma's 262k vocabulary). The window grows it while idle instead (tests/engine/
test_outputs_reserved.py). The worker's request loop on the real Engine and a tiny generated model."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.api.engine_bridge import ApiEngine
from app.host.messages import EngineLoaded, LoadRequest, WorkerRequest
from app.host.supervisor import EngineSupervisor
from app.host.worker import CancelBoard, WorkerProcess, _Child
from engine.config import NGRAM_LOOKUP, EngineConfig


def config(target: Path, home: Path) -> EngineConfig:
    return EngineConfig(
        str(target), draft=NGRAM_LOOKUP, n_ctx=512, n_threads=1, cost_cache_dir=str(home / "c")
    )


@pytest.fixture
def child() -> Iterator[_Child]:
    ctx = multiprocessing.get_context("spawn")
    parent_end, child_end = ctx.Pipe()
    worker = _Child(child_end, CancelBoard.create(ctx))
    try:
        yield worker
    finally:
        worker.close_engine()
        parent_end.close()


def test_a_load_asked_to_grow_the_buffer_grows_it_before_it_says_loaded(
    child: _Child, tiny_target: Path, tmp_path: Path
) -> None:
    child.handle(LoadRequest(config(tiny_target, tmp_path)))
    assert child.engine is not None and child.engine.outputs_due  # as a load leaves it (the window's)
    child.handle(LoadRequest(config(tiny_target, tmp_path), grow_outputs=True))
    engine = child.engine
    assert engine is not None and not engine.outputs_due  # a reply's longest verify batch: no growth
    assert engine.target.tokens == []  # the throw-away batch left nothing in the cache
    filler = engine.tokenize("one", add_special=False)[:1] * (engine.config.draft_max + 1)
    engine.target.decode(filler, n_logits=len(filler))
    assert not engine.target.outputs_grew


class _Recording(WorkerProcess):
    """The real worker process; what its parent sent it is kept."""

    sent: list[WorkerRequest]

    def send(self, request: WorkerRequest) -> None:
        type(self).sent.append(request)
        super().send(request)


@pytest.mark.parametrize("serve", [True, False])
def test_serve_asks_every_engine_it_starts_to_grow_the_buffer_and_the_window_does_not(
    serve: bool, tiny_target: Path, tmp_path: Path
) -> None:
    _Recording.sent = []
    supervisor = EngineSupervisor(_Recording)
    host = ApiEngine(supervisor, config(tiny_target, tmp_path)) if serve else None
    loaded: list[object] = []
    supervisor.listen(lambda _generation, message: loaded.append(message))
    try:
        if host is not None:
            host.start()  # as `tandem serve` does, before it listens
        else:
            supervisor.load(config(tiny_target, tmp_path))  # the window (the Serve API beside it)
            ApiEngine(supervisor, want_engine=lambda: None)
        supervisor.wait_loaded(timeout_s=60)
        assert any(isinstance(m, EngineLoaded) for m in loaded)
        loads = [r for r in _Recording.sent if isinstance(r, LoadRequest)]
        assert [r.grow_outputs for r in loads] == [serve]
    finally:
        supervisor.replace_engine("test over", timeout_s=3.0)
