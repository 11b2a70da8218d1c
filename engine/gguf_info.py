"""Read and check a GGUF file's header before anything is handed to llama.cpp.

llama.cpp answers an empty file, a text file, random bytes and a truncated model with the
same bare "Failed to load model" (docs/findings.md), and a truncated tensor table can crash it.
So the header, the metadata and the tensor table are read here, and the file's size is
checked against the end of every tensor, before a single weight is loaded.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

from engine.errors import (
    EmptyModelError,
    ModelFileError,
    ModelNotFoundError,
    NotGGUFError,
    TruncatedModelError,
    UnsupportedArchitectureError,
)
from engine.user_path import user_path

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value types -> struct format of a scalar (8 = string, 9 = array are handled apart).
_SCALAR_FORMATS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i",
    6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}  # fmt: skip
_STRING, _ARRAY = 8, 9
_INTEGER_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})  # uint8 ... int64
# Short integer arrays are kept: a model whose layers differ says so per layer (OpenELM's
# attention.head_count and head_count_kv, one number a layer), and its KV cache is priced by them.
MAX_KEPT_INTEGERS = 4096


@lru_cache(maxsize=1)
def known_architectures() -> frozenset[str]:
    from gguf.constants import MODEL_ARCH_NAMES

    return frozenset(MODEL_ARCH_NAMES.values())


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
    architecture: str
    metadata: dict[str, Any]
    tensors: tuple[TensorInfo, ...] = field(repr=False)
    tokens: tuple[str, ...] = field(repr=False, default=())  # empty when read without them
    vocab_size: int = 0
    header_end: int = 0  # where the tensor table ends (app.library.standin copies the header)
    data_offset: int = 0  # where the weights begin (aligned)
    # (start, count, end) in the file of every array of strings the read walked (the vocabulary's
    # texts, a BPE model's merges): a read without the texts jumps over them (read_gguf_info).
    string_spans: tuple[tuple[int, int, int], ...] = field(default=(), repr=False, compare=False)

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name") or self.path.stem)

    @property
    def n_params(self) -> int:
        return sum(math.prod(t.shape) for t in self.tensors)

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if value is not None else None

    @property
    def quantization(self) -> str:
        """The file type llama.cpp's quantizer wrote (Q4_K_M, F16...), or the dominant tensor type
        where there is none or where either says float weights and they disagree (a header copied
        from a Q4_K_M file onto F16 weights says "Q4_K_M")."""
        from gguf.constants import GGMLQuantizationType, LlamaFileType

        by_bytes: dict[int, int] = {}
        for t in self.tensors:
            by_bytes[t.type_id] = by_bytes.get(t.type_id, 0) + t.n_bytes
        # (Every tensor's type is a known one: _parse refuses a file with another.)
        dominant = (
            GGMLQuantizationType(max(by_bytes, key=by_bytes.__getitem__)).name if by_bytes else "unknown"
        )
        file_type = self.metadata.get("general.file_type")
        if file_type is not None:
            try:
                said = LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_")
            except ValueError:
                return dominant
            floats = ("F32", "F16", "BF16")
            plain = said.removeprefix("ALL_")
            if by_bytes and (plain in floats or dominant in floats) and plain != dominant:
                return dominant
            return said
        return dominant

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


def with_vocabulary(info: GGUFInfo) -> GGUFInfo:
    """`info` with its vocabulary's texts (a pair's check compares them): read again where it was
    read without them (as a process that loads one model reads it: 0.1-0.2 s less with 262k)."""
    return info if info.tokens or not info.vocab_size else read_gguf_info(info.path)


_U64 = struct.Struct("<Q")

# Bounds on what a header may ask for, checked before anything is allocated. Real files sit far
# below them (Gemma 3: 262,144 tokens, a chat template of a few KB); a file beyond them is not
# one llama.cpp would load either.
MAX_KEY_BYTES = 65_535  # the GGUF spec's own limit on a key
MAX_STRING_BYTES = 16 * 1024 * 1024  # one metadata string (a chat template is a few KB)
MAX_ARRAY_COUNT = 1 << 24  # items in one metadata array
MAX_TOKENS = 1 << 21  # vocabulary kept in memory (2,097,152; the largest real ones are ~260k)
MAX_ARRAY_DEPTH = 2  # an array of arrays at most
MAX_TENSOR_DIMS = 8
# A file-like source (a file, a download read over HTTP Range) is read in windows of this size.
WINDOW_BYTES = 1 << 20

# The well-known keys Tandem reads, and the value types each may have: a wrong type is a bad file,
# named as such, never a ValueError from deep inside.
_EXPECTED: dict[str, tuple[str, frozenset[int]]] = {
    "general.architecture": ("a string", frozenset({_STRING})),
    "general.name": ("a string", frozenset({_STRING})),
    "general.alignment": ("an integer", _INTEGER_TYPES),
    "general.file_type": ("an integer", _INTEGER_TYPES),
    "tokenizer.ggml.model": ("a string", frozenset({_STRING})),
    "tokenizer.chat_template": ("a string", frozenset({_STRING})),
    "tokenizer.ggml.tokens": ("an array of strings", frozenset({_ARRAY})),
    "tokenizer.ggml.bos_token_id": ("an integer", _INTEGER_TYPES),
    "tokenizer.ggml.eos_token_id": ("an integer", _INTEGER_TYPES),
    "tokenizer.ggml.add_bos_token": ("true or false", frozenset({7})),
    "tokenizer.ggml.add_eos_token": ("true or false", frozenset({7})),
}
# Per architecture: "{arch}.context_length" and the like.
_EXPECTED_SUFFIXES = {
    ".context_length": ("an integer", _INTEGER_TYPES),
    ".block_count": ("an integer", _INTEGER_TYPES),
}


class _Reader:
    """Bounds-checked little-endian reads from a GGUF file: every length checked against the size
    (an overrun is a truncation) and every count against the bytes left (an impossible count is a
    bad file) before anything is allocated. The bytes come from a buffer holding the whole file (a
    memory map) or from a binary file-like object (a download read over HTTP Range), read in
    windows of WINDOW_BYTES."""

    def __init__(
        self,
        source: mmap.mmap | bytes | BinaryIO,
        size: int,
        name: str,
        window_bytes: int | None = None,
        spans: Iterable[tuple[int, int, int]] = (),
    ) -> None:
        self.name = name
        self.size = size
        self.pos = 0
        self.window_bytes = window_bytes
        # Arrays of strings an earlier read of this very file walked: start -> (count, end).
        self.jumps = {start: (count, end) for start, count, end in spans}
        self.spans: list[tuple[int, int, int]] = []  # those this read passed, in file order
        self.base = 0  # the file offset of buf[0]
        self.buf: Any = b""
        self._file: BinaryIO | None = None
        if isinstance(source, mmap.mmap | bytes | bytearray | memoryview):
            self.buf = source
        else:
            self._file = source

    def bad(self, reason: str) -> NotGGUFError:
        return NotGGUFError(f"{self.name} is not a valid GGUF file: {reason}")

    def _need(self, n: int, what: str) -> None:
        """Bytes [pos, pos + n) exist in the file (else TruncatedModelError) and in the window."""
        if self.pos + n > self.size:
            raise TruncatedModelError(
                f"{self.name} is truncated: the file ends inside its {what} "
                f"(at byte {self.size:,}); download it again"
            )
        if self._file is not None and not (
            self.base <= self.pos and self.pos + n <= self.base + len(self.buf)
        ):
            self._fill(n, what)

    def _fill(self, n: int, what: str) -> None:
        assert self._file is not None
        want = min(max(n, self.window_bytes or WINDOW_BYTES), self.size - self.pos)
        self._file.seek(self.pos)
        parts: list[bytes] = []
        got = 0
        while got < want:
            chunk = self._file.read(want - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        self.buf, self.base = b"".join(parts), self.pos
        if got < n:  # the file is shorter than its size said (it shrank, or a server lied)
            self.size = self.pos + got
            self._need(n, what)

    def scalar(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self._need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos - self.base)
        self.pos += n
        return value

    def count(self, what: str, limit: int, min_item_bytes: int) -> int:
        """A count, refused when the rest of the file cannot hold that many items or above limit."""
        n = self.scalar("<Q", what)
        if n * min_item_bytes > self.size - self.pos:
            raise self.bad(f"its {what} claims {n:,} items, more than the file can hold")
        if n > limit:
            raise self.bad(f"its {what} claims {n:,} items (at most {limit:,} are allowed)")
        return int(n)

    def string(self, what: str, limit: int = MAX_STRING_BYTES) -> str:
        n = self.scalar("<Q", what)
        if n > limit:
            raise self.bad(f"a string in its {what} claims {n:,} bytes (at most {limit:,} are allowed)")
        self._need(n, what)
        start = self.pos - self.base
        text = bytes(self.buf[start : start + n]).decode("utf-8", errors="replace")
        self.pos += n
        return text

    def strings(self, count: int, what: str, keep: bool) -> list[str] | _SkippedArray:
        """An array of strings (Gemma 3's vocabulary: 262,144), in one tight loop: paid on each start."""
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        buf, base, pos = self.buf, self.base, self.pos
        end = base + len(buf)
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                self._need(8, what)
                buf, base, end = self.buf, self.base, self.base + len(self.buf)
            (n,) = unpack(buf, pos - base)
            pos += 8
            if n > MAX_STRING_BYTES:
                raise self.bad(f"a string in its {what} claims {n:,} bytes")
            if keep:
                if pos + n > end:
                    self.pos = pos
                    self._need(n, what)
                    buf, base, end = self.buf, self.base, self.base + len(self.buf)
                append(buf[pos - base : pos - base + n].decode("utf-8", errors="replace"))
            elif pos + n > self.size:
                self.pos = pos
                self._need(n, what)
            pos += n
        self.pos = pos
        return out if keep else _SkippedArray(count)

    def skip_strings(self, count: int, what: str) -> None:
        """Pass an array of `count` strings whose texts are not kept: a jump where an earlier read
        of this file found where it ends, else a walk over every length (0.02-0.07 s of Python)."""
        start = self.pos
        count_end = self.jumps.get(start)
        if count_end is not None and count_end[0] == count and start < count_end[1] <= self.size:
            self.pos = count_end[1]
        else:
            self.strings(count, what, keep=False)
        self.spans.append((start, count, self.pos))

    def skip(self, n: int, what: str) -> None:
        if self.pos + n > self.size:
            self._need(n, what)  # raises
        self.pos += n

    def value(self, type_id: int, what: str, depth: int = 0) -> Any:
        """One metadata value. Arrays are skipped over, their counts checked against the bytes
        left, but short integer arrays (_INTEGER_TYPES) and the vocabulary (read apart: see _parse)."""
        if type_id in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[type_id], what)
        if type_id == _STRING:
            return self.string(what)
        if type_id != _ARRAY:
            raise self.bad(f"unknown value type {type_id} in its {what}")
        if depth >= MAX_ARRAY_DEPTH:
            raise self.bad(f"arrays nested more than {MAX_ARRAY_DEPTH} deep in its {what}")
        item_type = self.scalar("<I", what)
        if item_type in _SCALAR_FORMATS:
            item_size = struct.calcsize(_SCALAR_FORMATS[item_type])
            count = self.count(what, MAX_ARRAY_COUNT, item_size)
            if item_type in _INTEGER_TYPES and count <= MAX_KEPT_INTEGERS:
                return [self.scalar(_SCALAR_FORMATS[item_type], what) for _ in range(count)]
            self.skip(item_size * count, what)
        elif item_type == _STRING:
            count = self.count(what, MAX_ARRAY_COUNT, 8)
            self.skip_strings(count, what)
        elif item_type == _ARRAY:
            count = self.count(what, MAX_ARRAY_COUNT, 12)  # each inner array: a type and a count
            for _ in range(count):
                self.value(_ARRAY, what, depth + 1)
        else:
            raise self.bad(f"unknown value type {item_type} in an array in its {what}")
        return _SkippedArray(count)


@dataclass(frozen=True)
class _SkippedArray:
    count: int

    def __len__(self) -> int:
        return self.count


def read_gguf_info(
    path: str | os.PathLike[str],
    check_architecture: bool = True,
    with_tokens: bool = True,
    string_spans: Iterable[tuple[int, int, int]] = (),
) -> GGUFInfo:
    """Read a GGUF file's header, metadata and tensor table, and check the file is whole; raises a
    ModelFileError subclass with a sentence a user can act on, for any file whatever.
    with_tokens=False skips decoding the vocabulary's texts (a third of the time with 262k of
    them; n_vocab is still known). string_spans: an earlier read's GGUFInfo.string_spans of this
    very file (engine.costcache keeps them), jumped over without the texts."""
    p = user_path(path)
    if not p.exists():
        raise ModelNotFoundError(f"model file not found: {p}")
    if p.is_dir():
        raise ModelNotFoundError(f"{p} is a folder, not a model file")
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise EmptyModelError(f"{p} is empty (0 bytes); download it again")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return read_gguf_header(buf, size, p, check_architecture, with_tokens, spans=string_spans)
    except OSError as e:
        raise ModelFileError(f"{p} cannot be read: {e.strerror or e}") from None


def read_gguf_header(
    source: mmap.mmap | bytes | BinaryIO,
    size: int,
    path: str | os.PathLike[str],
    check_architecture: bool = True,
    with_tokens: bool = True,
    window_bytes: int | None = None,
    spans: Iterable[tuple[int, int, int]] = (),
) -> GGUFInfo:
    """read_gguf_info's reading, from a buffer holding the whole file or a binary file-like object
    of known size (a file on another machine read over HTTP Range); `path` names it in sentences.
    window_bytes: the least a file-like source is asked for at once (WINDOW_BYTES by default)."""
    p = Path(path)
    if size == 0:
        raise EmptyModelError(f"{p} is empty (0 bytes); download it again")
    r = _Reader(source, size, str(p), window_bytes, spans)
    try:
        r._need(min(4, size), "header")
        head = bytes(r.buf[:4])  # the magic (as much of it as a shorter file holds)
        if head != GGUF_MAGIC:
            raise NotGGUFError(f"{p} is not a GGUF model file (it starts with {head!r}, not b'GGUF')")
        r.pos = 4
        return _parse(r, p, check_architecture, with_tokens)
    except (ValueError, TypeError, OverflowError, struct.error, RecursionError, UnicodeError) as e:
        # A check above missed a shape of bad file: still a sentence, never a traceback.
        raise r.bad(f"{type(e).__name__}: {e}") from None
    except MemoryError:
        raise r.bad("its header asks for more memory than this computer has") from None


def _check_type(r: _Reader, key: str, type_id: int, architecture: str | None) -> None:
    expected = _EXPECTED.get(key)
    if expected is None:
        for suffix, wanted in _EXPECTED_SUFFIXES.items():
            if key.endswith(suffix) and (architecture is None or key == architecture + suffix):
                expected = wanted
    if expected is not None and type_id not in expected[1]:
        from gguf.constants import GGUFValueType

        got = GGUFValueType(type_id).name.lower() if type_id in set(GGUFValueType) else f"type {type_id}"
        raise r.bad(f"its '{key}' should be {expected[0]} but is a {got}")


def _parse(r: _Reader, p: Path, check_architecture: bool, with_tokens: bool) -> GGUFInfo:
    version = r.scalar("<I", "header")
    if version not in (2, 3):
        raise NotGGUFError(f"{p} is GGUF version {version}; Tandem reads versions 2 and 3")
    n_tensors = r.scalar("<Q", "header")
    n_kv = r.scalar("<Q", "header")
    # Counts beyond the file's size are garbage after a valid magic. (Not checked against what is
    # left: a truncated file must read as truncated; each entry read is bounds-checked.)
    if n_tensors > r.size or n_kv > r.size:
        raise r.bad("its header counts are impossible")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = r.string("metadata", MAX_KEY_BYTES)
        type_id = r.scalar("<I", "metadata")
        _check_type(r, key, type_id, metadata.get("general.architecture"))
        if key == "tokenizer.ggml.tokens":  # the vocabulary: kept (pairing compares its texts)
            if r.scalar("<I", "metadata") != _STRING:
                raise r.bad(f"its '{key}' should be an array of strings")
            count = r.count("vocabulary", MAX_TOKENS, 8)
            if with_tokens:
                metadata[key] = r.strings(count, "vocabulary", keep=True)
            else:
                r.skip_strings(count, "vocabulary")
                metadata[key] = _SkippedArray(count)
        else:
            metadata[key] = r.value(type_id, "metadata")
    arch = str(metadata.get("general.architecture", ""))
    tensors: list[TensorInfo] = []
    from gguf.constants import GGML_QUANT_SIZES as sizes  # keyed by an IntEnum: a type id finds it

    for _ in range(n_tensors):
        name = r.string("tensor table", MAX_KEY_BYTES)
        n_dims = r.scalar("<I", "tensor table")
        if n_dims > MAX_TENSOR_DIMS:
            raise r.bad(f"tensor {name} has {n_dims} dimensions")
        shape = tuple(r.scalar("<Q", "tensor table") for _ in range(n_dims))
        type_id = r.scalar("<I", "tensor table")
        offset = r.scalar("<Q", "tensor table")
        if type_id not in sizes:
            raise r.bad(f"tensor {name} has unknown type {type_id}")
        block, type_size = sizes[type_id]
        tensors.append(TensorInfo(name, shape, type_id, offset, math.prod(shape) // block * type_size))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)  # an integer (_check_type)
    if alignment <= 0 or alignment & (alignment - 1):
        raise r.bad(f"its 'general.alignment' must be a power of two (got {alignment!r})")
    data_start = (r.pos + alignment - 1) // alignment * alignment
    data_end = max((data_start + t.offset + t.n_bytes for t in tensors), default=data_start)
    if data_end > r.size:
        raise TruncatedModelError(
            f"{p} is truncated: its tensors need {data_end:,} bytes but the file has {r.size:,}; "
            "download it again"
        )
    if not arch:
        raise UnsupportedArchitectureError(f"{p} does not say which model architecture it holds")
    if check_architecture and arch not in known_architectures():
        raise UnsupportedArchitectureError(
            f"{p} holds a '{arch}' model, an architecture this build of llama.cpp does not know"
        )
    tokens = metadata.pop("tokenizer.ggml.tokens", [])
    return GGUFInfo(
        path=p,
        size_bytes=r.size,
        architecture=arch,
        metadata=metadata,
        tensors=tuple(tensors),
        tokens=tuple(tokens) if isinstance(tokens, list) else (),
        vocab_size=len(tokens),
        header_end=r.pos,
        data_offset=data_start,
        string_spans=tuple(r.spans),
    )
