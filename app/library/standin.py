"""Stand-ins: GGUF files with a real model's shape and quantisation and random weights.

What llama.cpp pays to check k tokens at once depends on a model's shape (hidden size, layers,
heads, FFN, vocabulary, quantisation) and on the machine, not on the weights' values. So a file
with the real tensor table and random blocks, written here in seconds, times like the real model
(docs/findings.md), before any weight is downloaded.

A stand-in is planned from a header (the pair doctor's Range reads keep the real file's bytes
before its weights: metadata with the real tokenizer, and the tensor table, copied verbatim; the
lab plans them from a known shape too, tools/lab/shapes.py). It is written into the stand-ins
folder, only after the disk and the memory are checked, and deleted after use: it is never in
the models folder, so no list or picker offers it to chat with.

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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf.constants import GGML_QUANT_SIZES

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
