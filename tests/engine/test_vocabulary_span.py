"""A model file's vocabulary (and a BPE model's merges) jumped over, not walked, where that very file
was read before (issue 48, Why 5: every start walked 262k string lengths in Python for the target and
again for the draft; SmolLM2's 48,900 merges were still walked). Real GGUF files (tests/tiny.py, a
byte-level BPE vocabulary with merges), the real cost cache, the real Engine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine import gguf_info
from engine.config import EngineConfig
from engine.costcache import CostCache, file_identity
from engine.gguf_info import read_gguf_info
from engine.session import Engine


def _walked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What arrays of strings reads walk from now on (without keeping their texts)."""
    walked: list[str] = []
    real = gguf_info._Reader.strings

    def strings(self: gguf_info._Reader, count: int, what: str, keep: bool) -> object:
        if not keep:
            walked.append(what)
        return real(self, count, what, keep)

    monkeypatch.setattr(gguf_info._Reader, "strings", strings)
    return walked


def test_a_header_read_again_jumps_over_the_vocabulary_and_the_merges_and_reads_alike(
    tiny_target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = read_gguf_info(tiny_target, with_tokens=False)
    spans = first.string_spans
    vocabulary, merges = spans  # the tokens' texts, then tokenizer.ggml.merges
    assert vocabulary[1] == first.n_vocab > 0 and vocabulary[0] < vocabulary[2] <= merges[0]
    assert merges[1] == len(first.metadata["tokenizer.ggml.merges"]) > 0 and merges[0] < merges[2]
    walked = _walked(monkeypatch)
    again = read_gguf_info(tiny_target, with_tokens=False, string_spans=spans)
    assert walked == []  # neither walked again (before: the merges were, at every start)
    assert again == first and again.n_vocab == first.n_vocab and again.header_end == first.header_end
    assert again.string_spans == spans
    assert len(again.metadata["tokenizer.ggml.merges"]) == merges[1]
    # With the texts asked for, they are read whatever the spans say.
    assert len(read_gguf_info(tiny_target, string_spans=spans).tokens) == first.n_vocab


@pytest.mark.parametrize("wrong", ["start", "count", "past the end"])
def test_a_span_that_does_not_fit_the_file_is_not_used(
    tiny_target: Path, wrong: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = read_gguf_info(tiny_target, with_tokens=False)
    (start, count, end), merges = first.string_spans
    bad = {
        "start": (start + 1, count, end),
        "count": (start, count + 1, end),
        "past the end": (start, count, os.path.getsize(tiny_target) + 1),
    }[wrong]
    walked = _walked(monkeypatch)
    again = read_gguf_info(tiny_target, with_tokens=False, string_spans=(bad, merges))
    assert again == first and again.string_spans == first.string_spans
    assert walked == ["vocabulary"]  # walked, as before any span was kept


def test_an_engine_keeps_where_its_models_vocabulary_lies_and_the_next_one_jumps_over_it(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "costs"
    config = EngineConfig(str(tiny_target), n_ctx=256, cost_cache_dir=str(cache_dir))
    Engine(config).close()
    identity = file_identity(str(tiny_target))
    spans = CostCache(cache_dir).string_spans(identity)
    assert len(spans) == 2 and spans == read_gguf_info(tiny_target, with_tokens=False).string_spans
    walked = _walked(monkeypatch)
    engine = Engine(config)
    try:
        assert engine.info_target.n_vocab == spans[0][1]
    finally:
        engine.close()
    assert walked == []  # a start walked neither the vocabulary nor the merges it had read before
    # A span file of the release before holds the vocabulary's span alone: still a jump for it.
    span_file = next(cache_dir.glob("vocab-*.span"))
    span_file.write_text(json.dumps(list(spans[0])), encoding="utf-8")
    assert CostCache(cache_dir).string_spans(identity) == spans[:1]
    # A kept span that no longer reads as one is a miss, never an error.
    span_file.write_text("[1, 2", encoding="utf-8")
    assert CostCache(cache_dir).string_spans(identity) == ()
