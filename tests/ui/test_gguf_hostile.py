"""Hostile GGUF files, written byte by byte by the tests: every one is refused with a sentence
naming the file, within a bounded amount of memory, and one of them in the models folder never
keeps the rest of the library from being listed (issue 28, item 3)."""

from __future__ import annotations

import io
import random
import shutil
import struct
import tracemalloc
from pathlib import Path

import pytest

from app import paths
from engine import gguf_info
from engine.errors import ModelFileError, NotGGUFError, TruncatedModelError
from engine.gguf_info import read_gguf_header, read_gguf_info

U8, U32, STRING, ARRAY, U64 = 0, 4, 8, 9, 10


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv_string(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", STRING) + s(value)


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<II", U32, value)


def header(n_kv: int, n_tensors: int = 0) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def gguf(*pairs: bytes) -> bytes:
    return header(len(pairs)) + b"".join(pairs)


LLAMA = kv_string("general.architecture", "llama")


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (
            (LLAMA, kv_string("general.alignment", "x")),
            "'general.alignment' should be an integer but is a string",
        ),
        ((LLAMA, kv_u32("general.alignment", 3)), "'general.alignment' must be a power of two"),
        ((LLAMA, kv_u32("general.alignment", 0)), "'general.alignment' must be a power of two"),
        ((LLAMA, kv_string("llama.context_length", "long")), "'llama.context_length' should be an integer"),
        ((LLAMA, kv_string("llama.block_count", "4")), "'llama.block_count' should be an integer"),
        ((LLAMA, kv_string("general.file_type", "Q4")), "'general.file_type' should be an integer"),
        ((s("general.architecture") + struct.pack("<IIQ", ARRAY, STRING, 0),), "should be a string"),
        (
            (LLAMA, s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, U32, 1) + bytes(4)),
            "array of strings",
        ),
        (
            (LLAMA, kv_u32("tokenizer.ggml.bos_token_id", 1)[:-8] + struct.pack("<I", STRING) + s("1")),
            "integer",
        ),
    ],
)
def test_a_well_known_key_of_the_wrong_type_is_named(
    tmp_path: Path, pairs: tuple[bytes, ...], says: str
) -> None:
    p = write(tmp_path, "wrong.gguf", gguf(*pairs))
    with pytest.raises(NotGGUFError) as e:
        read_gguf_info(p)
    assert str(e.value).startswith(f"{p} is not a valid GGUF file: ")
    assert says in str(e.value)


@pytest.mark.parametrize("item_type", [U8, U64, STRING, ARRAY])
def test_an_array_whose_count_is_beyond_the_file_is_refused_before_allocating(
    tmp_path: Path, item_type: int
) -> None:
    p = write(
        tmp_path, "count.gguf", gguf(LLAMA, s("x.list") + struct.pack("<IIQ", ARRAY, item_type, 10**15))
    )
    with pytest.raises(
        NotGGUFError, match=r"claims 1,000,000,000,000,000 items, more than the file can hold"
    ):
        read_gguf_info(p)


def test_a_string_longer_than_allowed_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "long.gguf", gguf(LLAMA, s("x.s") + struct.pack("<IQ", STRING, 1 << 40)))
    with pytest.raises(NotGGUFError, match="claims 1,099,511,627,776 bytes"):
        read_gguf_info(p)


def test_a_vocabulary_beyond_any_real_one_is_refused(tmp_path: Path) -> None:
    n = gguf_info.MAX_TOKENS + 1
    tokens = s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, n) + struct.pack("<Q", 0) * n
    p = write(tmp_path, "vocab.gguf", gguf(LLAMA, tokens))
    with pytest.raises(NotGGUFError, match=r"vocabulary claims 2,097,153 items \(at most 2,097,152"):
        read_gguf_info(p)


def test_arrays_nested_without_end_are_refused_not_a_recursion_error(tmp_path: Path) -> None:
    depth = 5000
    nested = struct.pack("<IQ", ARRAY, 1) * depth + struct.pack("<IQ", U8, 0)
    p = write(tmp_path, "nested.gguf", gguf(LLAMA, s("x.nested") + struct.pack("<I", ARRAY) + nested))
    with pytest.raises(NotGGUFError, match="arrays nested more than 2 deep"):
        read_gguf_info(p)


def test_an_unknown_value_type_inside_an_array_is_named(tmp_path: Path) -> None:
    p = write(tmp_path, "type.gguf", gguf(LLAMA, s("x.a") + struct.pack("<IIQ", ARRAY, 77, 1) + bytes(8)))
    with pytest.raises(NotGGUFError, match="unknown value type 77"):
        read_gguf_info(p)


def test_kept_arrays_cost_no_more_memory_than_the_file(tmp_path: Path) -> None:
    """A 16 MB token-type array used to cost about 17 times its size in the reading process."""
    n = 16_000_000
    data = gguf(LLAMA, s("tokenizer.ggml.token_type") + struct.pack("<IIQ", ARRAY, U8, n) + bytes(n))
    data += bytes(-len(data) % 32)  # the data section's alignment
    p = write(tmp_path, "amp.gguf", data)
    del data
    tracemalloc.start()
    try:
        info = read_gguf_info(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.architecture == "llama"
    assert peak < 4_000_000, f"reading a {n:,}-byte array allocated {peak:,} bytes"


def test_random_damage_to_a_real_header_is_always_a_sentence(tmp_path: Path, tiny_target: Path) -> None:
    """Bytes flipped anywhere in a real header: the result is a model or a ModelFileError, never
    another exception (ValueError, RecursionError, MemoryError...)."""
    original = tiny_target.read_bytes()
    header_end = 40_000  # the tiny model's header and vocabulary lie well inside this
    rng = random.Random(28)
    refused = 0
    for i in range(300):
        data = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(4, header_end)
            data[at] = rng.choice([0x00, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        try:
            read_gguf_header(bytes(data), len(data), f"damaged-{i}.gguf")
        except ModelFileError as e:
            assert str(e).startswith(f"damaged-{i}.gguf "), e
            refused += 1
    assert refused > 50


class CountingFile(io.RawIOBase):
    """A file-like object that only answers seek() and read(), and counts the bytes it gave: a
    stand-in for a file read over HTTP Range (the doctor's check reads headers that way)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0
        self.n_read = 0
        self.n_reads = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        assert whence == 0
        self.at = offset
        return offset

    def read(self, n: int = -1) -> bytes:
        chunk = self.data[self.at : self.at + n]
        self.at += len(chunk)
        self.n_read += len(chunk)
        self.n_reads += 1
        return chunk


def test_a_header_is_read_from_any_file_like_object_of_known_size(
    tiny_target: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_target.read_bytes()
    monkeypatch.setattr(gguf_info, "WINDOW_BYTES", 4096)
    source = CountingFile(data)
    remote = read_gguf_header(source, len(data), "https://example.org/target.gguf")
    local = read_gguf_info(tiny_target)
    assert (remote.architecture, remote.tokens, remote.tensors) == (
        local.architecture,
        local.tokens,
        local.tensors,
    )
    assert remote.metadata == local.metadata
    assert remote.path.name == "target.gguf"
    assert source.n_read < len(data) // 4, "only the header is read, never the weights"


def test_a_file_like_object_shorter_than_its_size_reads_as_truncated(tiny_target: Path) -> None:
    data = tiny_target.read_bytes()
    with pytest.raises(TruncatedModelError, match="remote.gguf is truncated"):
        read_gguf_header(CountingFile(data[:3000]), len(data), "remote.gguf")


def test_models_list_names_the_bad_file_and_lists_the_rest(
    capsys: pytest.CaptureFixture[str], tiny_target: Path, tmp_path: Path
) -> None:
    from app.cli.cli import main as tandem_main

    folder = paths.models_dir()
    shutil.copy(tiny_target, folder / "good.gguf")
    (folder / "bad-align.gguf").write_bytes(gguf(LLAMA, kv_string("general.alignment", "x")))
    (folder / "bad-ctx.gguf").write_bytes(gguf(LLAMA, kv_string("llama.context_length", "x")))

    code = tandem_main(["models", "list"])
    out, err = capsys.readouterr()

    assert code == 0, err
    assert "Traceback" not in out + err
    assert any(line.startswith("good.gguf") and "llama" in line for line in out.splitlines())
    assert "bad-align.gguf: " in out and "'general.alignment' should be an integer" in out
    assert "bad-ctx.gguf: " in out and "'llama.context_length' should be an integer" in out
    assert out.splitlines()[-1].startswith("3 model file(s)")


def test_the_models_page_lists_good_files_beside_a_bad_one(qtbot, tiny_target: Path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("pytestqt")
    from ui.models.models_page import ModelsPage

    folder = paths.models_dir()
    shutil.copy(tiny_target, folder / "good.gguf")
    (folder / "bad.gguf").write_bytes(gguf(LLAMA, kv_string("general.alignment", "x")))
    page = ModelsPage()
    qtbot.addWidget(page)
    by_name = {m.path.name: m for m in page.local_models}
    assert by_name["good.gguf"].info is not None
    assert by_name["bad.gguf"].info is None
    assert "'general.alignment' should be an integer" in (by_name["bad.gguf"].problem or "")
