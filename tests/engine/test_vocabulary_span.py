"""A model file's vocabulary jumped over, not walked, where that very file was read before (issue 48,
Why 5: every start walked 262k string lengths in Python for the target and again for the draft).
Real GGUF files (tests/tiny.py), the real cost cache, the real Engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import gguf_info
from engine.config import EngineConfig
from engine.costcache import CostCache, file_identity
from engine.gguf_info import read_gguf_info
from engine.session import Engine


def test_a_header_read_again_jumps_over_the_vocabulary_and_reads_alike(
    tiny_target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = read_gguf_info(tiny_target, with_tokens=False)
    span = first.vocabulary_span
    assert span is not None and span[1] == first.n_vocab > 0 and span[0] < span[2]

    real = gguf_info._Reader.strings

    def strings(self: gguf_info._Reader, count: int, what: str, keep: bool) -> object:
        assert what != "vocabulary", "the vocabulary was walked again"
        return real(self, count, what, keep)  # (other arrays of strings: a BPE model's merges)

    with monkeypatch.context() as m:
        m.setattr(gguf_info._Reader, "strings", strings)
        again = read_gguf_info(tiny_target, with_tokens=False, vocabulary_span=span)
    assert again == first and again.n_vocab == first.n_vocab and again.header_end == first.header_end
    assert again.vocabulary_span == span
    # With the texts asked for, they are read whatever the span says.
    assert len(read_gguf_info(tiny_target, vocabulary_span=span).tokens) == first.n_vocab


@pytest.mark.parametrize("wrong", ["start", "count", "past the end"])
def test_a_span_that_does_not_fit_the_file_is_not_used(tiny_target: Path, wrong: str) -> None:
    first = read_gguf_info(tiny_target, with_tokens=False)
    assert first.vocabulary_span is not None
    start, count, end = first.vocabulary_span
    bad = {
        "start": (start + 1, count, end),
        "count": (start, count + 1, end),
        "past the end": (start, count, os.path.getsize(tiny_target) + 1),
    }[wrong]
    assert read_gguf_info(tiny_target, with_tokens=False, vocabulary_span=bad) == first


def test_an_engine_keeps_where_its_models_vocabulary_lies_and_the_next_one_jumps_over_it(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "costs"
    config = EngineConfig(str(tiny_target), n_ctx=256, cost_cache_dir=str(cache_dir))
    Engine(config).close()
    span = CostCache(cache_dir).vocabulary_span(file_identity(str(tiny_target)))
    assert span is not None and span == read_gguf_info(tiny_target, with_tokens=False).vocabulary_span
    real = gguf_info._Reader.strings

    def strings(self: gguf_info._Reader, count: int, what: str, keep: bool) -> object:
        assert keep or what != "vocabulary", "a start walked the vocabulary it had read before"
        return real(self, count, what, keep)

    monkeypatch.setattr(gguf_info._Reader, "strings", strings)
    engine = Engine(config)
    try:
        assert engine.info_target.n_vocab == span[1]
    finally:
        engine.close()
    # A kept span that no longer reads as one is a miss, never an error.
    (next(cache_dir.glob("vocab-*.span"))).write_text("[1, 2", encoding="utf-8")
    assert CostCache(cache_dir).vocabulary_span(file_identity(str(tiny_target))) is None
