"""Every bad model file is refused by Tandem's own checks, with a sentence that says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import (
    EmptyModelError,
    ModelNotFoundError,
    NotGGUFError,
    TruncatedModelError,
    UnsupportedArchitectureError,
)
from engine.gguf_info import read_gguf_info
from tests.tiny import write_tiny_model


def test_reads_a_valid_model(tiny_target: Path) -> None:
    info = read_gguf_info(tiny_target)
    assert info.architecture == "llama"
    assert info.vocab_type == "gpt2"
    assert info.n_vocab == 269
    assert info.context_length == 2048
    assert info.metadata["llama.block_count"] == 4
    assert info.quantization == "ALL_F32"
    assert info.n_params > 100_000
    assert info.chat_template and "messages" in info.chat_template


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="model file not found"):
        read_gguf_info(tmp_path / "nope.gguf")


def test_folder_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="is a folder"):
        read_gguf_info(tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    with pytest.raises(EmptyModelError, match=r"is empty \(0 bytes\)"):
        read_gguf_info(p)


@pytest.mark.parametrize("content", [b"hello, I am a text file\n", bytes(range(256)) * 10])
def test_not_gguf(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    with pytest.raises(NotGGUFError, match="is not a GGUF model file"):
        read_gguf_info(p)


@pytest.mark.parametrize("keep_bytes", [6, 40, 5000, 700_000])
def test_truncated_anywhere(tmp_path: Path, tiny_target: Path, keep_bytes: int) -> None:
    p = tmp_path / "cut.gguf"
    p.write_bytes(tiny_target.read_bytes()[:keep_bytes])
    with pytest.raises(TruncatedModelError, match="is truncated"):
        read_gguf_info(p)


def test_truncated_by_one_byte(tmp_path: Path, tiny_target: Path) -> None:
    p = tmp_path / "cut.gguf"
    p.write_bytes(tiny_target.read_bytes()[:-1])
    with pytest.raises(TruncatedModelError, match="tensors need"):
        read_gguf_info(p)


def test_garbage_after_magic(tmp_path: Path) -> None:
    p = tmp_path / "garbage.gguf"
    p.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    with pytest.raises(NotGGUFError, match="not a valid GGUF file"):
        read_gguf_info(p)


def test_unknown_architecture(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    p = tmp_path / "alien.gguf"
    w = gguf.GGUFWriter(str(p), "not-a-real-arch")
    w.add_tensor("x.weight", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedArchitectureError, match="'not-a-real-arch' model"):
        read_gguf_info(p)


def test_tiny_models_are_deterministic(tmp_path: Path) -> None:
    a = write_tiny_model(tmp_path / "a.gguf", seed=5)
    b = write_tiny_model(tmp_path / "b.gguf", seed=5)
    assert a.read_bytes() == b.read_bytes()
