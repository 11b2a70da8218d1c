"""Read and check a GGUF file's header before anything is handed to llama.cpp.

llama.cpp answers an empty file, a text file, random bytes and a truncated model with the
same bare "Failed to load model" (FINDINGS.md), and a truncated tensor table can crash it.
So the header, the metadata and the tensor table are read here, and the file's size is
checked against the end of every tensor, before a single weight is loaded.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from engine.errors import (
    EmptyModelError,
    ModelNotFoundError,
    NotGGUFError,
    TruncatedModelError,
    UnsupportedArchitectureError,
)

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value types -> struct format of a scalar (8 = string, 9 = array are handled apart).
_SCALAR_FORMATS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i",
    6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9


@lru_cache(maxsize=1)
def known_architectures() -> frozenset[str]:
    from gguf.constants import MODEL_ARCH_NAMES

    return frozenset(MODEL_ARCH_NAMES.values())


@lru_cache(maxsize=1)
def _quant_sizes() -> dict[int, tuple[int, int]]:
    from gguf.constants import GGML_QUANT_SIZES

    return {int(k): v for k, v in GGML_QUANT_SIZES.items()}


def _type_name(type_id: int) -> str:
    from gguf.constants import GGMLQuantizationType

    try:
        return GGMLQuantizationType(type_id).name
    except ValueError:
        return f"type {type_id}"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int
    n_bytes: int


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    size_bytes: int
    version: int
    architecture: str
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    tokens: tuple[str, ...] = field(repr=False, default=())  # empty when read without them
    vocab_size: int = 0

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    @property
    def n_params(self) -> int:
        total = 0
        for t in self.tensors:
            n = 1
            for d in t.shape:
                n *= d
            total += n
        return total

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if value is not None else None

    @property
    def n_layers(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.block_count")
        return int(value) if value is not None else None

    @property
    def quantization(self) -> str:
        """The file type llama.cpp's quantizer wrote (Q4_K_M, F16...), or the dominant tensor type."""
        file_type = self.metadata.get("general.file_type")
        if file_type is not None:
            from gguf.constants import LlamaFileType

            try:
                return LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
            except ValueError:
                pass
        by_bytes: dict[int, int] = {}
        for t in self.tensors:
            by_bytes[t.type_id] = by_bytes.get(t.type_id, 0) + t.n_bytes
        return _type_name(max(by_bytes, key=lambda k: by_bytes[k])) if by_bytes else "unknown"

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return str(value) if value else None

    @property
    def vocab_type(self) -> str | None:
        value = self.metadata.get("tokenizer.ggml.model")
        return str(value) if value is not None else None

    @property
    def n_vocab(self) -> int:
        return len(self.tokens) or self.vocab_size


_U64 = struct.Struct("<Q")


class _Reader:
    """Bounds-checked little-endian reads over a memory map; every overrun is a truncation."""

    def __init__(self, buf: mmap.mmap | bytes, path: Path) -> None:
        self.buf = buf
        self.pos = 0
        self.path = path
        self.size = len(buf)

    def _need(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            raise TruncatedModelError(
                f"{self.path} is truncated: the file ends inside its {what} "
                f"(at byte {self.size:,}); download it again"
            )

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self._need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.scalar("<Q", what)
        self._need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return bytes(raw).decode("utf-8", errors="replace")

    def strings(self, count: int, what: str, keep: bool) -> list[str] | _SkippedArray:
        """An array of strings (a vocabulary: 262,144 of them in Gemma 3), in one tight loop:
        every process that opens a model reads its header, so this is paid on each start."""
        buf, pos, size = self.buf, self.pos, self.size
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self._need(8, what)
            (n,) = unpack(buf, pos)
            pos += 8
            if pos + n > size:
                self.pos = pos
                self._need(n, what)
            if keep:
                append(buf[pos : pos + n].decode("utf-8", errors="replace"))
            pos += n
        self.pos = pos
        return out if keep else _SkippedArray(count)

    def skip(self, n: int, what: str) -> None:
        self._need(n, what)
        self.pos += n

    def value(self, type_id: int, what: str, keep_array: bool) -> Any:
        if type_id in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[type_id], what)
        if type_id == _STRING:
            return self.string(what)
        if type_id == _ARRAY:
            item_type = self.scalar("<I", what)
            count = self.scalar("<Q", what)
            if item_type in _SCALAR_FORMATS:
                item_size = struct.calcsize(_SCALAR_FORMATS[item_type])
                if not keep_array:
                    self.skip(item_size * count, what)
                    return _SkippedArray(count)
                self._need(item_size * count, what)
                fmt = "<" + _SCALAR_FORMATS[item_type][1] * count
                values = struct.unpack_from(fmt, self.buf, self.pos)
                self.pos += item_size * count
                return list(values)
            if item_type == _STRING:
                return self.strings(count, what, keep_array)
            return [self.value(item_type, what, keep_array) for _ in range(count)]
        raise NotGGUFError(f"{self.path} is not a valid GGUF file: unknown value type {type_id} in {what}")


@dataclass(frozen=True)
class _SkippedArray:
    count: int

    def __len__(self) -> int:
        return self.count


# Numeric arrays kept in memory; the rest (token scores, merges) are skipped over.
_KEPT_ARRAYS = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}


def read_gguf_info(
    path: str | os.PathLike[str], check_architecture: bool = True, with_tokens: bool = True
) -> GGUFInfo:
    """Read a GGUF file's header, metadata and tensor table, and check the file is whole.
    with_tokens=False skips decoding the vocabulary's texts (a third of the time with 262k of
    them; n_vocab is still known): for a draft model whose pairing is already known good.

    Raises a ModelFileError subclass with a sentence a user can act on.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelNotFoundError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelNotFoundError(f"{p} is a folder, not a model file")
    size = p.stat().st_size
    if size == 0:
        raise EmptyModelError(f"{p} is empty (0 bytes); download it again")
    with open(p, "rb") as f:
        head = f.read(4)
        if head != GGUF_MAGIC:
            raise NotGGUFError(f"{p} is not a GGUF model file (it starts with {head!r}, not b'GGUF')")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, p, size, check_architecture, with_tokens)


def _parse(buf: mmap.mmap, p: Path, size: int, check_architecture: bool, with_tokens: bool) -> GGUFInfo:
    r = _Reader(buf, p)
    r.pos = 4
    version = r.scalar("<I", "header")
    if version not in (2, 3):
        raise NotGGUFError(f"{p} is GGUF version {version}; Tandem reads versions 2 and 3")
    n_tensors = r.scalar("<Q", "header")
    n_kv = r.scalar("<Q", "header")
    # A count larger than the file can hold means garbage after a valid magic.
    if n_tensors > size or n_kv > size:
        raise NotGGUFError(f"{p} is not a valid GGUF file: its header counts are impossible")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string("metadata")
        type_id = r.scalar("<I", "metadata")
        keep = key in _KEPT_ARRAYS and (with_tokens or key != "tokenizer.ggml.tokens")
        metadata[key] = r.value(type_id, "metadata", keep_array=keep)
    tensors: list[TensorInfo] = []
    sizes = _quant_sizes()
    for _ in range(n_tensors):
        name = r.string("tensor table")
        n_dims = r.scalar("<I", "tensor table")
        if n_dims > 8:
            raise NotGGUFError(f"{p} is not a valid GGUF file: tensor {name} has {n_dims} dimensions")
        shape = tuple(r.scalar("<Q", "tensor table") for _ in range(n_dims))
        type_id = r.scalar("<I", "tensor table")
        offset = r.scalar("<Q", "tensor table")
        if type_id not in sizes:
            raise NotGGUFError(f"{p} is not a valid GGUF file: tensor {name} has unknown type {type_id}")
        block, type_size = sizes[type_id]
        n_elements = 1
        for d in shape:
            n_elements *= d
        tensors.append(TensorInfo(name, shape, type_id, offset, n_elements // block * type_size))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
    data_start = (r.pos + alignment - 1) // alignment * alignment
    data_end = max((data_start + t.offset + t.n_bytes for t in tensors), default=data_start)
    if data_end > size:
        raise TruncatedModelError(
            f"{p} is truncated: its tensors need {data_end:,} bytes but the file has {size:,}; "
            "download it again"
        )
    arch = str(metadata.get("general.architecture", ""))
    if not arch:
        raise UnsupportedArchitectureError(f"{p} does not say which model architecture it holds")
    if check_architecture and arch not in known_architectures():
        raise UnsupportedArchitectureError(
            f"{p} holds a '{arch}' model, an architecture this build of llama.cpp does not know"
        )
    tokens = metadata.pop("tokenizer.ggml.tokens", [])
    return GGUFInfo(
        path=p,
        size_bytes=size,
        version=version,
        architecture=arch,
        metadata=metadata,
        tensors=tuple(tensors),
        tokens=tuple(tokens) if isinstance(tokens, list) else (),
        vocab_size=len(tokens),
    )
