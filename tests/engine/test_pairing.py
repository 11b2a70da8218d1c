"""A draft is refused unless llama.cpp's vocabulary rules hold; the error names the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import DraftChoice, EngineConfig
from engine.errors import IncompatiblePairError
from engine.gguf_info import read_gguf_info
from engine.pairing import check_pair
from engine.session import Engine
from tests.tiny import write_tiny_model


def test_compatible_pair(tiny_target: Path, tiny_draft: Path) -> None:
    check_pair(read_gguf_info(tiny_target), read_gguf_info(tiny_draft))  # raises where a rule fails


def test_token_text_rule_names_token_and_both_values(tiny_target: Path, tiny_incompatible: Path) -> None:
    with pytest.raises(IncompatiblePairError) as e:
        check_pair(read_gguf_info(tiny_target), read_gguf_info(tiny_incompatible))
    assert e.value.refusal.rule == "text of token 40"
    assert "target: '%'" in str(e.value) and "draft: '%_x'" in str(e.value)


def test_first_ids_are_not_compared(tmp_path: Path, tiny_target: Path) -> None:
    # llama.cpp compares token text from id 5 on: specials at 0-4 may differ.
    other = write_tiny_model(tmp_path / "d.gguf", seed=9, rename_token=2)
    check_pair(read_gguf_info(tiny_target), read_gguf_info(other))


def test_eos_id_matters_only_where_eos_is_added(tmp_path: Path, tiny_target: Path) -> None:
    # llama.cpp compares EOS ids only when the tokenizer adds EOS to prompts (the tiny vocabulary
    # does not): a different EOS is accepted as it is, refused once both add EOS.
    target, draft = (
        read_gguf_info(tiny_target),
        read_gguf_info(write_tiny_model(tmp_path / "d.gguf", seed=9, eos_token_id=2)),
    )
    check_pair(target, draft)
    target.metadata["tokenizer.ggml.add_eos_token"] = True
    draft.metadata["tokenizer.ggml.add_eos_token"] = True
    with pytest.raises(IncompatiblePairError, match=r"EOS token id .*target: 1, draft: 2"):
        check_pair(target, draft)


def test_bos_id_matters_where_bos_is_added(tiny_target: Path) -> None:
    target, draft = read_gguf_info(tiny_target), read_gguf_info(tiny_target)
    draft.metadata["tokenizer.ggml.bos_token_id"] = 2  # the tiny vocabulary adds BOS
    with pytest.raises(IncompatiblePairError, match=r"BOS token id .*target: 0, draft: 2"):
        check_pair(target, draft)
    target.metadata["tokenizer.ggml.add_bos_token"] = False
    draft.metadata["tokenizer.ggml.add_bos_token"] = False
    check_pair(target, draft)


def _header_only_gguf(path: Path, arch: str, tokens: list[str], meta: dict[str, object]) -> Path:
    """A GGUF file with a real model's tokenizer metadata and no weights (pairing reads no more)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(str(meta["model"]))
    w.add_token_list(tokens)
    w.add_bos_token_id(int(meta["bos"]))  # type: ignore[call-overload]
    w.add_eos_token_id(int(meta["eos"]))  # type: ignore[call-overload]
    w.add_add_bos_token(bool(meta["add_bos"]))
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _qwen_tokens(n: int) -> list[str]:
    # Qwen2.5's files list 151,643 text tokens, then specials, then padding up to the model's
    # embedding size: 152,064 in the 7B, 151,936 in the 0.5B.
    return [f"t{i}" for i in range(151643)] + [f"<|special_{i}|>" for i in range(n - 151643)]


def test_qwen25_base_7b_accepts_the_instruct_05b_draft(tmp_path: Path) -> None:
    """The pair from the issue: EOS 151643 against 151645, add-EOS false on both, 152,064 against
    151,936 tokens. llama.cpp accepts it; Tandem used to refuse it on the EOS id."""
    target = _header_only_gguf(
        tmp_path / "qwen2.5-7b.gguf",
        "qwen2",
        _qwen_tokens(152064),
        {"model": "gpt2", "bos": 151643, "eos": 151643, "add_bos": False},
    )
    draft = _header_only_gguf(
        tmp_path / "qwen2.5-0.5b-instruct.gguf",
        "qwen2",
        _qwen_tokens(151936),
        {"model": "gpt2", "bos": 151643, "eos": 151645, "add_bos": False},
    )
    check_pair(read_gguf_info(target), read_gguf_info(draft))  # raises where a rule fails


def test_llama31_and_qwen25_fail_on_the_add_bos_flag(tmp_path: Path) -> None:
    llama = _header_only_gguf(
        tmp_path / "llama-3.1-8b.gguf",
        "llama",
        [f"l{i}" for i in range(1000)],
        {"model": "gpt2", "bos": 128000, "eos": 128009, "add_bos": True},
    )
    qwen = _header_only_gguf(
        tmp_path / "qwen2.5-0.5b.gguf",
        "qwen2",
        [f"q{i}" for i in range(1000)],
        {"model": "gpt2", "bos": 151643, "eos": 151645, "add_bos": False},
    )
    with pytest.raises(IncompatiblePairError, match=r"add-BOS flag .*target: True, draft: False"):
        check_pair(read_gguf_info(llama), read_gguf_info(qwen))


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
        Engine(EngineConfig(str(tiny_target), draft=DraftChoice.parse(str(tiny_incompatible)), n_ctx=256))
