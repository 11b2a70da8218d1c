"""The engine times this machine's verify batches while idle (Engine.calibrate): once per machine,
build and model, kept in the cost cache, stopped by a request, and never a change to what the
KV cache holds or what a reply says. The app's worker does it while no request waits."""

from __future__ import annotations

import json
from pathlib import Path

from app.host.messages import ChatTurn, EngineLoaded, LoadRequest, ReplyRequest
from app.host.worker import WorkerProcess
from engine.adaptive import CALIBRATION_SIZES
from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.events import Finished
from engine.session import Engine
from engine.speculative import SpeculativeDecoder
from tests.app.test_worker import Inbox
from tests.waiting import wait_until

PROMPT = "one two three four five six seven eight nine ten. one two three four five six"


def config(target: Path, cache: Path | None, **kw: object) -> EngineConfig:
    settings: dict[str, object] = {"n_ctx": 512, "n_threads": 1, **kw}
    return EngineConfig(
        str(target),
        draft=DraftChoice.parse("ngram"),
        cost_cache_dir=str(cache) if cache else None,
        **settings,  # type: ignore[arg-type]
    )


def reply(engine: Engine) -> Finished:
    for event in engine.generate(PROMPT, SamplingParams(), max_tokens=32):
        if isinstance(event, Finished):
            return event
    raise AssertionError("no Finished event")


def timed_sizes(cache: Path) -> set[int]:
    sizes: set[int] = set()
    for path in cache.glob("*.json"):
        data = json.loads(path.read_text(encoding="utf-8"))
        sizes |= {int(n) for n in data.get("step_s", {})}
    return sizes


def test_every_size_is_timed_once_and_the_cost_cache_keeps_them(tiny_target: Path, tmp_path: Path) -> None:
    cache = tmp_path / "costs"
    engine = Engine(config(tiny_target, cache))
    try:
        assert engine.calibration_due
        assert engine.calibrate()
        assert not engine.calibration_due
        assert engine._controller is not None
        costs = engine._controller.costs.costs(64)
        assert all(costs[n] > 0 for n in CALIBRATION_SIZES)
    finally:
        engine.close()
    assert set(CALIBRATION_SIZES) <= timed_sizes(cache)
    again = Engine(config(tiny_target, cache))
    try:
        assert not again.calibration_due  # another process on the same machine and model
    finally:
        again.close()


def test_a_request_stops_it_between_batches_and_what_was_timed_is_kept(tiny_target: Path) -> None:
    engine = Engine(config(tiny_target, None))
    try:
        asks = []

        def request_waiting() -> bool:
            asks.append(1)
            return len(asks) > 6  # the seventh batch would wait for a request

        assert not engine.calibrate(request_waiting)
        assert engine._controller is not None
        left = engine._controller.costs.untimed(CALIBRATION_SIZES)
        assert 0 < len(left) < len(CALIBRATION_SIZES)
        assert engine.calibration_due
        assert engine.calibrate()
        assert not engine.calibration_due
    finally:
        engine.close()


def test_the_cached_text_and_the_reply_are_what_they_were(tiny_target: Path) -> None:
    engine = Engine(config(tiny_target, None))
    try:
        first = reply(engine)
        cached = list(engine.target.tokens)
        assert cached
        assert engine.calibrate()
        assert engine.target.tokens == cached  # timed after the conversation, then rolled back
        assert reply(engine).token_ids == first.token_ids
        plain = Engine(config(tiny_target, None))
        try:
            assert reply(plain).token_ids == first.token_ids
        finally:
            plain.close()
    finally:
        engine.close()


def test_a_context_too_small_to_time_a_64_row_batch_gives_up_without_an_error(tiny_target: Path) -> None:
    engine = Engine(config(tiny_target, None, n_ctx=48))
    try:
        assert engine.calibration_due
        assert not engine.calibrate()
        assert not engine.calibration_due  # not asked again in this process: the worker would spin
    finally:
        engine.close()


def test_a_conversation_that_fills_the_context_is_kept_and_timing_waits_for_room(tiny_target: Path) -> None:
    engine = Engine(config(tiny_target, None, n_ctx=512))
    try:
        long_prompt = engine.tokenize("one two three four " * 200)[:470]
        for _ in engine.generate(long_prompt, SamplingParams(), max_tokens=8):
            pass
        cached = list(engine.target.tokens)
        assert len(cached) + 65 > 512  # no room for a 64-row batch after it
        assert not engine.calibrate()
        assert engine.target.tokens == cached  # the conversation's cache is not touched for it
        assert engine.calibration_due  # asked again later, when there is room
        engine.reset_cache()
        assert engine.calibrate()
    finally:
        engine.close()


def test_the_worker_times_batches_while_idle_and_a_request_is_answered_meanwhile(
    slow_target: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "costs"
    inbox = Inbox()
    w = WorkerProcess(inbox)
    w.start()
    try:
        w.send(LoadRequest(config(slow_target, cache, n_ctx=1024)))
        inbox.wait_for(EngineLoaded)
        # Sent at once after the load, as the window sends a message that waited for the model:
        # answered first; the batches are timed once the worker has been idle a moment.
        w.send(ReplyRequest(1, (ChatTurn("user", "count one two three"),), max_tokens=16))
        finished = inbox.wait_event(Finished)
        assert isinstance(finished, Finished) and finished.stats.n_generated > 0
        # Answered before the idle timing, not after it: when the reply is in, the cost cache
        # holds at most what the reply's own steps timed, never every size yet.
        assert not set(CALIBRATION_SIZES) <= timed_sizes(cache)
        wait_until(lambda: set(CALIBRATION_SIZES) <= timed_sizes(cache), 60, "the batches timed while idle")
    finally:
        w.shutdown()


def test_a_first_reply_on_a_machine_never_timed_times_a_few_sizes_and_says_the_same(
    tiny_target: Path, tmp_path: Path
) -> None:
    # `tandem generate` or `tandem serve` on a new machine, before the window was ever idle there:
    # the first reply long enough to repay it times FIRST_REPLY_SIZES once after reading its
    # prompt (the cost cache keeps them), and its text is plain decoding's.
    from engine.adaptive import FIRST_REPLY_SIZES

    def run(engine: Engine, max_tokens: int, speculate: bool = True, prompt: str = PROMPT) -> Finished:
        for event in engine.generate(prompt, SamplingParams(), max_tokens=max_tokens, speculate=speculate):
            if isinstance(event, Finished):
                return event
        raise AssertionError("no Finished event")

    cache = tmp_path / "costs"
    engine = Engine(config(tiny_target, cache))
    try:
        controller = engine._controller
        assert controller is not None
        plain = run(engine, 160, speculate=False)
        assert controller.first_reply_sizes(512)  # a plain reply times nothing
        fresh = Engine(config(tiny_target, tmp_path / "other"))
        try:  # nor a reply whose text does not start by copying (its drafts could not repay it)
            decoder = SpeculativeDecoder(fresh.target, fresh._policy())
            decoder.policy.begin_reply(speculate=True, use_memory=False)
            prose = fresh.tokenize("Zebras graze quietly near the river")
            decoder.policy.start(prose)
            assert decoder._time_first_batches(prose, 256, None) == 0.0
            copy = fresh.tokenize(PROMPT)
            decoder.policy.start(copy)
            assert decoder._time_first_batches(copy, 32, None) == 0.0  # too short a reply to repay it
            assert decoder._time_first_batches(copy, 256, None) > 0.0
        finally:
            fresh.close()
        first = run(engine, 160)
        assert first.token_ids == plain.token_ids
        assert controller.first_reply_sizes(512) == []
    finally:
        engine.close()
    assert set(FIRST_REPLY_SIZES) <= timed_sizes(cache)
    # The next process knows them: nothing is timed before its first reply.
    again = Engine(config(tiny_target, cache))
    try:
        assert again._controller is not None and again._controller.first_reply_sizes(512) == []
    finally:
        again.close()
