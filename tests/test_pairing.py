"""A draft is refused unless llama.cpp's vocabulary rules hold; the error names the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.errors import IncompatiblePairError
from engine.gguf_info import read_gguf_info
from engine.pairing import check_pair, pair_problem
from engine.session import Engine
from engine.tiny import write_tiny_model


def test_compatible_pair(tiny_target: Path, tiny_draft: Path) -> None:
    check_pair(read_gguf_info(tiny_target), read_gguf_info(tiny_draft))
    assert pair_problem(read_gguf_info(tiny_target), read_gguf_info(tiny_draft)) is None


def test_token_text_rule_names_token_and_both_values(tiny_target: Path, tiny_incompatible: Path) -> None:
    with pytest.raises(IncompatiblePairError) as e:
        check_pair(read_gguf_info(tiny_target), read_gguf_info(tiny_incompatible))
    assert e.value.rule == "text of token 40"
    assert "target: '%'" in str(e.value) and "draft: '%_x'" in str(e.value)


def test_first_ids_are_not_compared(tmp_path: Path, tiny_target: Path) -> None:
    # llama.cpp compares token text from id 5 on: specials at 0-4 may differ.
    other = write_tiny_model(tmp_path / "d.gguf", seed=9, rename_token=2)
    check_pair(read_gguf_info(tiny_target), read_gguf_info(other))


def test_eos_rule(tmp_path: Path, tiny_target: Path) -> None:
    other = write_tiny_model(tmp_path / "d.gguf", seed=9, eos_token_id=2)
    with pytest.raises(IncompatiblePairError, match=r"EOS token id .*target: 1, draft: 2"):
        check_pair(read_gguf_info(tiny_target), read_gguf_info(other))


def test_vocab_type_rule(tmp_path: Path, tiny_target: Path) -> None:
    other = write_tiny_model(tmp_path / "d.gguf", seed=9)
    info = read_gguf_info(other)
    info.metadata["tokenizer.ggml.model"] = "llama"
    with pytest.raises(IncompatiblePairError, match=r"vocabulary type .*'gpt2'.*'llama'"):
        check_pair(read_gguf_info(tiny_target), info)


def test_vocab_size_rule(tiny_target: Path) -> None:
    from dataclasses import replace

    target = read_gguf_info(tiny_target)
    bigger = replace(target, tokens=target.tokens + tuple(f"extra{i}" for i in range(200)))
    with pytest.raises(IncompatiblePairError, match=r"vocabulary size .*269.*469"):
        check_pair(target, bigger)


def test_engine_refuses_incompatible_draft_before_loading(tiny_target: Path, tiny_incompatible: Path) -> None:
    with pytest.raises(IncompatiblePairError, match="text of token 40"):
        Engine(EngineConfig(str(tiny_target), draft=str(tiny_incompatible), n_ctx=256))
