"""Measured costs outlive the process: a second engine on the same pair measures nothing up front,
and a corrupt, stale or foreign cache is ignored and rewritten, never an error."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from engine.adaptive import FIRST_REPLY_MIN_TOKENS
from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.costcache import CostCache, cost_key
from engine.errors import IncompatiblePairError
from engine.events import DraftingState, Finished
from engine.session import Engine

PROMPT = "one two three four five six seven eight nine ten. one two three four five six"


def generate(engine: Engine, max_tokens: int = 48) -> Finished:
    for event in engine.generate(PROMPT, SamplingParams(), max_tokens=max_tokens):
        if isinstance(event, Finished):
            return event
    raise AssertionError("no Finished event")


def config(target: Path, cache: Path, draft: str = "ngram", **kw: object) -> EngineConfig:
    return EngineConfig(
        str(target), draft=DraftChoice.parse(draft), n_ctx=512, n_threads=1, cost_cache_dir=str(cache), **kw
    )  # type: ignore[arg-type]


def test_the_second_engine_starts_from_what_the_first_measured(tiny_target: Path, tmp_path: Path) -> None:
    cache = tmp_path / "costs"
    first = Engine(config(tiny_target, cache))
    try:
        assert first._controller is not None and not first._controller.costs.median  # nothing timed at load
        generate(first)
    finally:
        first.close()
    files = list(cache.glob("*.json"))
    assert len(files) == 1
    second = Engine(config(tiny_target, cache))
    try:
        assert second._controller is not None
        assert second._controller.costs.median, "the second engine should start from the cached costs"
    finally:
        second.close()


@pytest.mark.parametrize(
    "content",
    [b"", b"not json", b"\xff\xfe", json.dumps({"format": 1, "step_s": {"1": -5}}).encode(), b"[1, 2]"],
)
def test_a_corrupt_cache_is_ignored_and_rewritten(tiny_target: Path, tmp_path: Path, content: bytes) -> None:
    cache = tmp_path / "costs"
    engine = Engine(config(tiny_target, cache))
    key = engine._cost_key()
    assert key is not None
    engine.close()
    path = cache / f"{key}.json"
    path.write_bytes(content)
    engine = Engine(config(tiny_target, cache))
    try:
        assert engine._controller is not None and not engine._controller.costs.median
        result = generate(engine)
    finally:
        engine.close()
    assert result.stats.n_generated > 0
    assert CostCache(cache).load(key) is not None  # rewritten with this run's measurements


def test_the_key_holds_everything_a_cost_depends_on(tiny_target: Path, tiny_draft: Path) -> None:
    base = cost_key(str(tiny_target), "ngram", 2, 512, 0)
    assert base == cost_key(str(tiny_target), "ngram", 2, 512, 0)
    assert base != cost_key(str(tiny_target), str(tiny_draft), 2, 512, 0)
    assert base != cost_key(str(tiny_target), "ngram", 1, 512, 0)
    assert base != cost_key(str(tiny_target), "ngram", 2, 256, 0)
    assert base != cost_key(str(tiny_target), "ngram", 2, 512, 10)
    assert base != cost_key(str(tiny_target), "ngram", 2, 512, 0, "127.0.0.1:50052")


def test_a_changed_model_file_is_a_new_key(tmp_path: Path, tiny_target: Path) -> None:
    copy = tmp_path / "t.gguf"
    copy.write_bytes(tiny_target.read_bytes())
    before = cost_key(str(copy), "ngram", 2, 512, 0)
    with copy.open("ab") as f:
        f.write(b"\0" * 32)
    assert cost_key(str(copy), "ngram", 2, 512, 0) != before


def test_an_unwritable_cache_is_no_error(tiny_target: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    engine = Engine(config(tiny_target, blocker / "costs"))
    try:
        unwritable = generate(engine)
    finally:
        engine.close()
    working = Engine(config(tiny_target, tmp_path / "costs"))
    try:
        usual = generate(working)
    finally:
        working.close()
    # The same reply as with a cache that works (nothing failed half-way), and the file left as it was.
    assert unwritable.stats.n_generated > 0 and unwritable.token_ids == usual.token_ids
    assert blocker.read_text() == "a file where the cache folder should be"


def test_a_draft_model_known_not_to_pay_is_never_loaded(
    tiny_target: Path, big_draft: Path, tmp_path: Path
) -> None:
    # A "draft" far larger than its target (same vocabulary): drafting can never beat plain
    # decoding. The first engine finds that out by measuring (one bounded probe, in a reply long
    # enough that a first use tries the pair); the second knows it from the cache and never even
    # loads it.
    cache = tmp_path / "costs"
    first = Engine(config(tiny_target, cache, draft=str(big_draft), draft_lookup=False))
    try:
        result = generate(first, max_tokens=FIRST_REPLY_MIN_TOKENS)
    finally:
        first.close()
    assert "too slow to help on this machine" in result.stats.note
    assert result.stats.n_drafted <= 8
    # What the first engine measured, made certain: a machine busy with other work when the next
    # one starts (step costs re-measured slower) must not blur what this test is about.
    key = first._cost_key()
    assert key is not None
    data = CostCache(cache).load(key)
    assert data is not None and data["draft_ratio"] is not None
    data["draft_ratio"] = max(data["draft_ratio"], 10.0)
    CostCache(cache).save(key, data)
    second = Engine(config(tiny_target, cache, draft=str(big_draft), draft_lookup=False))
    try:
        again = generate(second, max_tokens=FIRST_REPLY_MIN_TOKENS)
        assert second._model is not None and not second._model.loaded
    finally:
        second.close()
    assert again.stats.n_drafted == 0
    assert "too slow to help on this machine" in again.stats.note
    assert again.token_ids == result.token_ids
    # With n-gram drafts from the text beside it (the default), the model is still not loaded,
    # the reply says so, and the text's own repeats are drafted (this tiny model loops). Verify
    # rows made cheap, as on a real model: the tiny model's steps are Python's time (a 3-row
    # batch measured at 3x a 1-row one), and drafting its half-right loops would not pay.
    data = CostCache(cache).load(key)
    assert data is not None
    one = float(data["step_s"]["1"])
    data["step_s"] = {str(n): one * (1 + 0.05 * (n - 1)) for n in (1, 2, 3, 5, 9)}
    CostCache(cache).save(key, data)
    third = Engine(config(tiny_target, cache, draft=str(big_draft)))
    try:
        hybrid = generate(third, max_tokens=FIRST_REPLY_MIN_TOKENS)
        assert third._model is not None and not third._model.loaded
    finally:
        third.close()
    assert hybrid.stats.note.endswith("too slow to help on this machine: drafting from the text so far only")
    assert hybrid.stats.n_drafted > 0 and hybrid.stats.n_accepted > 0
    # ...every one of them from the text, and counted as such.
    assert hybrid.stats.n_drafted_text == hybrid.stats.n_drafted
    assert hybrid.stats.n_accepted_text == hybrid.stats.n_accepted
    assert hybrid.token_ids == result.token_ids


def test_a_short_reply_does_not_wait_for_a_draft_model_it_cannot_repay(
    slow_target: Path, tiny_draft: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first engine measures a pair whose draft is far cheaper than its target, including how
    # long the draft model takes to load.
    cache = tmp_path / "costs"
    first = Engine(config(slow_target, cache, draft=str(tiny_draft), draft_lookup=False))
    try:
        # (A first use tries the pair only in a reply that may run this long.)
        result = generate(first, max_tokens=FIRST_REPLY_MIN_TOKENS)
        key = first._cost_key()
    finally:
        first.close()
    assert key is not None
    data = CostCache(cache).load(key)
    assert data is not None and data["draft_load_s"] > 0
    # ...and what reading the prompt costs the draft beside the target (the one-off estimate).
    assert 0 < data["draft_prefill_ratio"] < 1
    # On a machine where that load took a minute, a 4-token reply is decoded plainly, without
    # waiting for the draft (loading beside it), and says why; the text is the target's own either way.
    data["draft_load_s"] = 60.0
    data["draft_ratio"] = 0.05  # a draft that would pay, given time (on a busy machine it may not)
    # ...its first token and the verify batches too: timed on this tiny target (a 2-row batch can
    # take 2-10x a 1-row one, by load), the pair can look too slow to ever pay, and the engine
    # then says that (DRAFT_TOO_SLOW) instead of the short reply this test is about.
    data["draft_first_ratio"] = 0.05
    t1 = data["step_s"]["1"]
    data["step_s"] = {"1": t1, "2": 1.1 * t1, "4": 1.3 * t1}
    CostCache(cache).save(key, data)
    # The load takes as long as the reply here: begun beside the target, it ends only after the
    # reply (the tiny draft would otherwise load in milliseconds, sometimes before the reply reads
    # its prompt, and a model loaded costs no wait: then drafting is right, and this test is moot).
    replied = threading.Event()
    real_load = Engine._load_draft

    def slow_load(self: Engine, info: object, n_ctx: int, cancel: threading.Event) -> object:
        replied.wait(30)
        return real_load(self, info, n_ctx, cancel)

    monkeypatch.setattr(Engine, "_load_draft", slow_load)
    second = Engine(config(slow_target, cache, draft=str(tiny_draft), draft_lookup=False))
    try:
        short = generate(second, max_tokens=4)
        replied.set()
    finally:
        replied.set()
        second.close()
    assert short.stats.n_drafted == 0 and short.stats.draft_catch_up_s == 0.0
    assert "cannot repay starting the draft model" in short.stats.note
    assert short.stats.note_kind is DraftingState.SHORT_REPLY
    assert short.token_ids == result.token_ids[: len(short.token_ids)]


def test_a_pair_found_compatible_is_not_checked_again_until_a_file_changes(
    tiny_target: Path, tiny_draft: Path, tiny_incompatible: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "costs"
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(tiny_draft.read_bytes())
    first = Engine(config(tiny_target, cache, draft=str(draft)))
    try:
        assert first.info_draft is not None and first.info_draft.tokens  # read and checked
        n_vocab = first.info_draft.n_vocab
    finally:
        first.close()
    second = Engine(config(tiny_target, cache, draft=str(draft)))
    try:  # known good: the draft's vocabulary texts are not read again
        assert second.info_draft is not None and not second.info_draft.tokens
        assert second.info_draft.n_vocab == n_vocab
    finally:
        second.close()
    # Another file in the same place (another size and time): checked again, and refused.
    draft.write_bytes(tiny_incompatible.read_bytes())
    with pytest.raises(IncompatiblePairError, match="text of token"):
        Engine(config(tiny_target, cache, draft=str(draft)))
