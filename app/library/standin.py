"""Stand-ins: GGUF files with a real model's shape and quantisation and random weights.

What llama.cpp pays to check k tokens at once depends on a model's shape (hidden size, layers,
heads, FFN, vocabulary, quantisation) and on the machine, not on the weights' values. So a file
with the real tensor table and random blocks, written here in seconds, times like the real model
(docs/findings.md), before any weight is downloaded.

A stand-in is planned from a header (the pair doctor's Range reads keep the real file's bytes
before its weights: metadata with the real tokenizer, and the tensor table, copied verbatim) or
from a known shape (KNOWN_SHAPES: the catalog's models, from their published config.json, with
a byte-level vocabulary of the right size). It is written into the stand-ins folder, only after
the disk and the memory are checked, and deleted after use: it is never in the models folder,
so no list or picker offers it to chat with.

Quantised blocks are random bytes with their scales set to small, finite values (the weights
then sit within a few hundredths of zero, and llama.cpp computes normally); types whose layout
is not known here are written as zeros, also finite. Data is written from one pattern buffer per
type, in large chunks: a 7B stand-in is a few seconds of disk writes.

The measuring that uses it is in app/library/measure.py and measure_run.py.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES
from gguf.vocab import bytes_to_unicode

from app.library.documents import kv_bytes_per_token
from engine.errors import TandemError

ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_STANDIN_BYTES = 1 << 40  # no real model's file is a terabyte
DISK_MARGIN_BYTES = 256 * 2**20  # left free on the disk after the stand-in is written
RAM_MARGIN_BYTES = 256 * 2**20
CHUNK_BYTES = 16 * 2**20  # one write
SUFFIX = ".standin.gguf"

# ggml type id -> (weights per block, bytes per block): the gguf package's table, the one
# engine/gguf_info.py checks a header's tensors against.
BLOCKS: dict[int, tuple[int, int]] = {int(k): v for k, v in GGML_QUANT_SIZES.items()}
# Where each known quantised block keeps its fp16 scales (byte offset -> value). Weights come out
# within a few hundredths of zero, as in a trained model, and centred: where a type adds a
# minimum (Q4_1, Q5_1, the K-quants' dmin), it is set to cancel the mean of d * scale * q, so
# activations do not drift from layer to layer.
_SCALES: dict[int, dict[int, float]] = {
    2: {0: 0.004},  # Q4_0: d * (q - 8)
    3: {0: 0.004, 2: -0.004 * 7.5},  # Q4_1: d * q + m, q in 0..15
    6: {0: 0.004},  # Q5_0: d * (q - 16)
    7: {0: 0.002, 2: -0.002 * 15.5},  # Q5_1: q in 0..31
    8: {0: 0.00025},  # Q8_0: d * q, q in -128..127
    9: {0: 0.00025, 2: 0.0},  # Q8_1
    10: {80: 0.0005, 82: 0.0005 * 1.5},  # Q2_K: d * sc * q - dmin * m, q in 0..3, sc and m in 0..15
    11: {108: 0.00025},  # Q3_K: signed
    12: {0: 0.000125, 2: 0.000125 * 7.5},  # Q4_K: q in 0..15, sc and m in 0..63
    13: {0: 0.0000625, 2: 0.0000625 * 15.5},  # Q5_K: q in 0..31
    14: {208: 0.0000625},  # Q6_K: signed
}


class StandinError(TandemError):
    """A stand-in that cannot or must not be written: an impossible shape, no room, or cancelled."""


class StandinCancelled(StandinError):
    pass


@dataclass(frozen=True)
class TensorSlot:
    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int  # from data_offset
    n_bytes: int


@dataclass(frozen=True)
class StandinPlan:
    """What a stand-in's file holds: the header's bytes (verbatim or written from a shape) and
    where each tensor's random blocks go."""

    label: str  # the model it stands for, as a person reads it
    header: bytes = field(repr=False)
    data_offset: int
    tensors: tuple[TensorSlot, ...] = field(repr=False)
    architecture: str
    n_vocab: int
    kv_bytes_per_token: int = 0

    @property
    def size_bytes(self) -> int:
        return self.data_offset + max((t.offset + t.n_bytes for t in self.tensors), default=0)

    def memory_bytes(self, n_ctx: int) -> int:
        """What llama.cpp needs to run it: the weights, the KV cache and its buffers (an allowance
        for the output rows of a 64-token verify batch and the graph)."""
        buffers = 64 * 2**20 + 64 * self.n_vocab * 4 * 2
        return self.size_bytes + self.kv_bytes_per_token * n_ctx + buffers


# --- planning from a header ------------------------------------------------------------------------


def _int(md: dict[str, Any], key: str) -> int | None:
    value = md.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def plan_from_header(label: str, header: bytes, info: Any) -> StandinPlan:
    """A stand-in with the real file's header: its metadata (the real tokenizer where the file
    has one) and tensor table copied byte for byte. `info`: the GGUFInfo read from those bytes.
    Raises StandinError with one sentence where the shape is one llama.cpp could not run."""
    if not header or info.header_end <= 0 or len(header) < info.header_end:
        raise StandinError(f"the header of {label} was not kept, so no stand-in can be made of it")
    md = info.metadata
    arch = info.architecture
    if (_int(md, "split.count") or 1) > 1:
        raise StandinError(f"{label} is split in parts; a stand-in is made from a model in one file")
    tensors = tuple(TensorSlot(t.name, tuple(t.shape), t.type_id, t.offset, t.n_bytes) for t in info.tensors)
    _check_shape(label, arch, md, tensors, info.n_vocab, info.data_offset)
    return StandinPlan(
        label=label,
        header=bytes(header[: info.header_end]),
        data_offset=info.data_offset,
        tensors=tensors,
        architecture=arch,
        n_vocab=info.n_vocab,
        kv_bytes_per_token=kv_bytes_per_token(md, arch),
    )


def _check_shape(
    label: str, arch: str, md: dict[str, Any], tensors: tuple[TensorSlot, ...], n_vocab: int, data_offset: int
) -> None:
    def refuse(why: str) -> StandinError:
        return StandinError(f"{label} has an impossible shape ({why}); no stand-in was written")

    if not tensors:
        raise refuse("no tensors")
    for key in ("block_count", "embedding_length"):
        value = _int(md, f"{arch}.{key}")
        if value is not None and value <= 0:
            raise refuse(f"{key.replace('_', ' ')} {value}")
    n_head = _int(md, f"{arch}.attention.head_count")
    n_head_kv = _int(md, f"{arch}.attention.head_count_kv")
    if n_head is not None and n_head <= 0:
        raise refuse(f"{n_head} attention heads")
    if n_head and n_head_kv is not None and (n_head_kv <= 0 or n_head % n_head_kv):
        raise refuse(f"{n_head} attention heads cannot share {n_head_kv} key/value heads")
    if n_vocab <= 0:
        raise refuse("an empty vocabulary")
    end = data_offset
    for t in sorted(tensors, key=lambda t: t.offset):
        if t.type_id not in BLOCKS:
            raise refuse(f"tensor {t.name} has the unknown type {t.type_id}")
        if not 1 <= len(t.shape) <= MAX_DIMS or any(d <= 0 for d in t.shape):
            raise refuse(f"tensor {t.name} is {' x '.join(map(str, t.shape)) or 'empty'}")
        per_block, block_bytes = BLOCKS[t.type_id]
        if t.shape[0] % per_block:
            raise refuse(f"tensor {t.name}'s rows of {t.shape[0]} do not fill blocks of {per_block}")
        if math.prod(t.shape) // per_block * block_bytes != t.n_bytes:
            raise refuse(f"tensor {t.name}'s size does not match its shape")
        if t.offset % ALIGNMENT or data_offset + t.offset < end:
            raise refuse(f"tensor {t.name} overlaps another")
        end = data_offset + t.offset + t.n_bytes
        if end > MAX_STANDIN_BYTES:
            raise refuse(f"its weights would take {end / 2**40:.1f} TB")


# --- planning from a known shape ---------------------------------------------------------------------


@dataclass(frozen=True)
class KnownShape:
    """A transformer's shape as its config.json gives it (llama-like: llama, qwen2, qwen3)."""

    architecture: str  # llama, qwen2, qwen3
    n_embd: int
    n_layers: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    head_dim: int = 0  # 0: n_embd // n_head
    tied_embeddings: bool = False
    context_length: int = 32768
    rope_theta: float = 1e6


# From each model's config.json on the hub (hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size, head_dim, tie_word_embeddings).
KNOWN_SHAPES: dict[str, KnownShape] = {
    "qwen2.5-0.5b": KnownShape("qwen2", 896, 24, 14, 2, 4864, 151936, tied_embeddings=True),
    "qwen2.5-1.5b": KnownShape("qwen2", 1536, 28, 12, 2, 8960, 151936, tied_embeddings=True),
    "qwen2.5-7b": KnownShape("qwen2", 3584, 28, 28, 4, 18944, 152064),
    "llama-3.2-1b": KnownShape("llama", 2048, 16, 32, 8, 8192, 128256, tied_embeddings=True, rope_theta=5e5),
    "llama-3.1-8b": KnownShape("llama", 4096, 32, 32, 8, 14336, 128256, rope_theta=5e5),
    "qwen3-0.6b": KnownShape("qwen3", 1024, 28, 16, 8, 3072, 151936, head_dim=128, tied_embeddings=True),
    "qwen3-8b": KnownShape("qwen3", 4096, 36, 32, 8, 12288, 151936, head_dim=128),
}
# The catalog's models (resources/catalog.json keys) whose shape is known here.
CATALOG_SHAPES = {
    "qwen2.5-1.5b-instruct-q4_k_m": "qwen2.5-1.5b",
    "qwen2.5-7b-instruct-q4_k_m": "qwen2.5-7b",
    "qwen2.5-0.5b-instruct-q8_0": "qwen2.5-0.5b",
    "qwen2.5-coder-7b-q8_0": "qwen2.5-7b",
    "qwen2.5-coder-0.5b-q8_0": "qwen2.5-0.5b",
    "llama-3.1-8b-instruct-q4_k_m": "llama-3.1-8b",
    "llama-3.2-1b-instruct-q8_0": "llama-3.2-1b",
    "qwen3-8b-q4_k_m": "qwen3-8b",
    "qwen3-0.6b-q8_0": "qwen3-0.6b",
}
_FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "Q4_K_S": 14, "Q6_K": 18, "Q5_K_M": 17}


def _tensor_types(shape: KnownShape, quantization: str) -> Callable[[str, int, int], int]:
    """The type of each matrix, as llama.cpp's quantizer picks it for that file type (Q4_K_M:
    Q6_K for the output and for attn_v/ffn_down in the layers that get more bits; a K-quant
    whose rows do not fill 256-weight blocks falls back to Q5_0 / Q8_0, as llama.cpp's does)."""
    q = quantization.upper()
    simple = {"Q4_0": 2, "Q8_0": 8, "F16": 1, "F32": 0}
    if q not in simple and q not in ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K"):
        raise StandinError(
            f"a stand-in of a known shape is written as Q4_0, Q4_K_M, Q8_0 or F16, not {quantization}"
        )

    def more_bits(layer: int) -> bool:
        n = shape.n_layers
        return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2

    def pick(name: str, layer: int, row: int) -> int:
        if q in simple:
            t = simple[q]
        elif (
            name == "output"
            or (name == "token_embd" and shape.tied_embeddings)
            or q == "Q6_K"
            or (name in ("attn_v", "ffn_down") and q == "Q4_K_M" and more_bits(layer))
        ):
            t = 14
        else:
            t = 13 if q == "Q5_K_M" else 12
        if row % BLOCKS[t][0]:
            t = {12: 6, 13: 7, 14: 8}.get(t, 8)  # Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0
        if row % BLOCKS[t][0]:
            t = 1
        return t

    return pick


def plan_from_shape(label: str, shape: KnownShape, quantization: str = "Q4_K_M") -> StandinPlan:
    """A stand-in of a known shape, with a byte-level vocabulary of the real size."""
    s = shape
    if min(s.n_embd, s.n_layers, s.n_head, s.n_head_kv, s.n_ff, s.n_vocab) <= 0 or s.n_head % s.n_head_kv:
        raise StandinError(f"{label} has an impossible shape; no stand-in was written")
    pick = _tensor_types(shape, quantization)
    d = s.head_dim or s.n_embd // s.n_head
    mats: list[tuple[str, tuple[int, ...], int]] = []

    def mat(name: str, full: str, rows: int, cols: int, layer: int = -1) -> None:
        mats.append((full, (rows, cols), pick(name, layer, rows)))

    def vec(full: str, n: int) -> None:
        mats.append((full, (n,), 0))

    mat("token_embd", "token_embd.weight", s.n_embd, s.n_vocab)
    for i in range(s.n_layers):
        b = f"blk.{i}."
        vec(b + "attn_norm.weight", s.n_embd)
        mat("attn_q", b + "attn_q.weight", s.n_embd, s.n_head * d, i)
        mat("attn_k", b + "attn_k.weight", s.n_embd, s.n_head_kv * d, i)
        mat("attn_v", b + "attn_v.weight", s.n_embd, s.n_head_kv * d, i)
        if s.architecture == "qwen2":
            vec(b + "attn_q.bias", s.n_head * d)
            vec(b + "attn_k.bias", s.n_head_kv * d)
            vec(b + "attn_v.bias", s.n_head_kv * d)
        if s.architecture == "qwen3":
            vec(b + "attn_q_norm.weight", d)
            vec(b + "attn_k_norm.weight", d)
        mat("attn_output", b + "attn_output.weight", s.n_head * d, s.n_embd, i)
        vec(b + "ffn_norm.weight", s.n_embd)
        mat("ffn_gate", b + "ffn_gate.weight", s.n_embd, s.n_ff, i)
        mat("ffn_up", b + "ffn_up.weight", s.n_embd, s.n_ff, i)
        mat("ffn_down", b + "ffn_down.weight", s.n_ff, s.n_embd, i)
    vec("output_norm.weight", s.n_embd)
    if not s.tied_embeddings:
        mat("output", "output.weight", s.n_embd, s.n_vocab)

    tensors: list[TensorSlot] = []
    offset = 0
    for name, dims, type_id in mats:
        per_block, block_bytes = BLOCKS[type_id]
        n_bytes = math.prod(dims) // per_block * block_bytes
        tensors.append(TensorSlot(name, dims, type_id, offset, n_bytes))
        offset += (n_bytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT

    a = s.architecture
    tokens = _byte_level_vocab(s.n_vocab)
    kv: list[tuple[str, int, Any]] = [
        ("general.architecture", _STR, a),
        ("general.name", _STR, f"{label} (stand-in: random weights)"),
        ("general.file_type", _U32, _FILE_TYPES.get(quantization.upper(), 15)),
        (f"{a}.context_length", _U32, s.context_length),
        (f"{a}.embedding_length", _U32, s.n_embd),
        (f"{a}.block_count", _U32, s.n_layers),
        (f"{a}.feed_forward_length", _U32, s.n_ff),
        (f"{a}.attention.head_count", _U32, s.n_head),
        (f"{a}.attention.head_count_kv", _U32, s.n_head_kv),
        (f"{a}.attention.key_length", _U32, d),
        (f"{a}.attention.value_length", _U32, d),
        (f"{a}.rope.dimension_count", _U32, d),
        (f"{a}.rope.freq_base", _F32, s.rope_theta),
        (f"{a}.attention.layer_norm_rms_epsilon", _F32, 1e-6),
        ("tokenizer.ggml.model", _STR, "gpt2"),
        ("tokenizer.ggml.pre", _STR, "default"),
        ("tokenizer.ggml.tokens", _ARR_STR, tokens),
        ("tokenizer.ggml.merges", _ARR_STR, []),
        ("tokenizer.ggml.bos_token_id", _U32, 0),
        ("tokenizer.ggml.eos_token_id", _U32, 1),
        ("tokenizer.ggml.add_bos_token", _BOOL, False),
    ]
    header = _header_bytes(kv, tensors)
    data_offset = (len(header) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    return StandinPlan(
        label=label,
        header=header,
        data_offset=data_offset,
        tensors=tuple(tensors),
        architecture=a,
        n_vocab=s.n_vocab,
        kv_bytes_per_token=s.n_layers * s.n_head_kv * 2 * d * 2,
    )


def _byte_level_vocab(n_vocab: int) -> list[str]:
    """Two specials, GPT-2's 256 byte tokens, then fillers: any text tokenizes, and the output
    row has the real vocabulary's size (what a verify batch pays for)."""
    byte_tokens = bytes_to_unicode()
    tokens = ["<|bos|>", "<|eos|>"] + [byte_tokens[b] for b in range(256)]
    tokens += [f"<|filler{i}|>" for i in range(max(0, n_vocab - len(tokens)))]
    return tokens[:n_vocab]


_U32, _F32, _BOOL, _STR, _ARR_STR = 4, 6, 7, 8, 9


def _gguf_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _header_bytes(kv: list[tuple[str, int, Any]], tensors: list[TensorSlot]) -> bytes:
    parts = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), len(kv))]
    for key, kind, value in kv:
        parts.append(_gguf_string(key))
        if kind == _ARR_STR:
            parts.append(struct.pack("<IIQ", _ARR_STR, _STR, len(value)))
            parts.extend(_gguf_string(v) for v in value)
        elif kind == _STR:
            parts += [struct.pack("<I", _STR), _gguf_string(value)]
        else:
            fmt = {_U32: "<I", _F32: "<f", _BOOL: "<?"}[kind]
            parts += [struct.pack("<I", kind), struct.pack(fmt, value)]
    for t in tensors:
        parts += [_gguf_string(t.name), struct.pack("<I", len(t.shape))]
        parts += [struct.pack("<Q", d) for d in t.shape]
        parts.append(struct.pack("<IQ", t.type_id, t.offset))
    return b"".join(parts)


# --- room, and writing --------------------------------------------------------------------------------


MEMORY_FOLDER = Path("/dev/shm")  # Linux: a file system in memory


def standins_dir() -> Path:
    """Where stand-ins are written while they are timed: never the models folder. In memory
    where the system has a memory file system (Linux's /dev/shm): a file written to a disk is
    flushed to it while it is timed, and on 2 cores that flush slowed a 7B's single-token step
    by 15%; in memory nothing is flushed and the disk is not touched. Elsewhere in Tandem's
    folder. One folder per Tandem folder (TANDEM_HOME)."""
    import hashlib

    from app import paths

    home = paths.home()
    if MEMORY_FOLDER.is_dir() and os.access(MEMORY_FOLDER, os.W_OK):
        tag = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
        return MEMORY_FOLDER / f"tandem-standins-{os.getuid()}-{tag}"
    return home / "standins"


def check_room(plan: StandinPlan, folder: Path, n_ctx: int, *, free_ram: int | None = None) -> None:
    """Refuse, in one sentence and before anything is written, a stand-in that would not fit on
    the disk or in the memory free now."""
    from app.library.catalog import available_ram_bytes, format_bytes, total_ram_bytes

    folder.mkdir(parents=True, exist_ok=True)
    size = plan.size_bytes
    disk_free = shutil.disk_usage(folder).free
    if size + DISK_MARGIN_BYTES > disk_free:
        raise StandinError(
            f"a stand-in of {plan.label} needs {format_bytes(size)} of disk and only "
            f"{format_bytes(disk_free)} is free; nothing was written"
        )
    ram = free_ram if free_ram is not None else available_ram_bytes() or total_ram_bytes()
    # A file in memory holds its size of it, beside what llama.cpp loads (its own copy of
    # weights it repacks for this CPU).
    in_memory = MEMORY_FOLDER.exists() and folder.resolve().is_relative_to(MEMORY_FOLDER.resolve())
    need = plan.memory_bytes(n_ctx) + (size if in_memory else 0)
    if need + RAM_MARGIN_BYTES > ram:
        raise StandinError(
            f"timing a stand-in of {plan.label} needs {format_bytes(need)} of memory and only "
            f"{format_bytes(ram)} is free; nothing was written"
        )


def _pattern(type_id: int, name: str, shape: tuple[int, ...], rng: np.random.Generator) -> bytes:
    """One chunk of valid blocks of a type, repeated to fill a tensor."""
    per_block, block_bytes = BLOCKS[type_id]
    n_blocks = max(1, CHUNK_BYTES // block_bytes)
    if type_id in (0, 1, 30) and len(shape) == 1:
        # Norm weights 1, biases 0 (a 1-D tensor: a few kB; a divisor like rope_freqs stays 1).
        value = 0.0 if name.endswith(".bias") else 1.0
        dtype = {0: np.float32, 1: np.float16, 30: np.float32}[type_id]
        arr = np.full(min(shape[0], n_blocks), value, dtype=dtype)
        if type_id == 30:
            return (arr.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        return arr.tobytes()
    if type_id in (0, 1, 30):
        # Small random floats: sign and mantissa random, the exponent fixed near 2^-7.
        if type_id == 0:
            bits = rng.integers(0, 2**32, n_blocks, dtype=np.uint32)
            return ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3C000000)).tobytes()
        bits16 = rng.integers(0, 2**16, n_blocks, dtype=np.uint16)
        mask, exp = (0x83FF, 0x2000) if type_id == 1 else (0x807F, 0x3C00)
        return ((bits16 & np.uint16(mask)) | np.uint16(exp)).tobytes()
    if type_id not in _SCALES:
        return bytes(n_blocks * block_bytes)  # a layout not known here: zeros, finite everywhere
    blocks = (
        np.frombuffer(rng.bytes(n_blocks * block_bytes), dtype=np.uint8).reshape(n_blocks, block_bytes).copy()
    )
    for off, scale in _SCALES[type_id].items():
        blocks[:, off : off + 2] = np.frombuffer(np.float16(scale).tobytes(), dtype=np.uint8)
    return blocks.tobytes()


def write_standin(
    plan: StandinPlan,
    path: Path,
    *,
    cancel: threading.Event | None = None,
    on_progress: Callable[[float], None] | None = None,
    seed: int = 0,
) -> Path:
    """Write the stand-in; a cancel (asked between chunks) or a failure removes the partial file."""
    rng = np.random.default_rng(seed)
    patterns: dict[tuple[int, bool, str], bytes] = {}
    total = max(plan.size_bytes, 1)
    written = 0
    last_report = 0.0
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "wb") as f:
            f.write(plan.header)
            f.write(bytes(plan.data_offset - len(plan.header)))
            for t in sorted(plan.tensors, key=lambda t: t.offset):
                if f.tell() < plan.data_offset + t.offset:
                    f.write(bytes(plan.data_offset + t.offset - f.tell()))  # alignment padding
                one_d = len(t.shape) == 1
                key = (t.type_id, one_d, t.name.rsplit(".", 1)[-1] if one_d else "")
                pattern = patterns.get(key)
                if pattern is None:
                    pattern = patterns[key] = _pattern(t.type_id, t.name, t.shape, rng)
                view = memoryview(pattern)
                left = t.n_bytes
                while left > 0:
                    if cancel is not None and cancel.is_set():
                        raise StandinCancelled("cancelled")
                    n = min(left, len(view))
                    f.write(view[:n])
                    left -= n
                    written += n
                    now = time.monotonic()
                    if on_progress is not None and now - last_report > 0.1:
                        last_report = now
                        on_progress(written / total)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    if on_progress is not None:
        on_progress(1.0)
    return path


def clean_leftovers(folder: Path | None = None) -> None:
    """Remove stand-ins a killed measurement left behind (its process gone)."""
    folder = folder or standins_dir()
    if not folder.is_dir():
        return
    for run in folder.iterdir():
        pid_file = run / "pid"
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            pid = 0
        if pid and _is_alive(pid):
            continue
        shutil.rmtree(run, ignore_errors=True)
    with contextlib.suppress(OSError):
        folder.rmdir()  # where nothing else is under way


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
