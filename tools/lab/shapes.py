"""Stand-ins of a known shape, for the lab: a transformer's shape as its config.json gives it
(KNOWN_SHAPES), planned as a GGUF header with a byte-level vocabulary of the right size, so a
stand-in is written without any header read (python -m tools.lab.replay cost-curve --standin,
read_chunks, reading_progress, stop_reading, standin_timings). The product plans stand-ins
from a real file's header only (app.library.standin.plan_from_header), and writes both.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gguf.vocab import bytes_to_unicode

from app.library.standin import ALIGNMENT, BLOCKS, StandinError, StandinPlan, TensorSlot


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
# num_key_value_heads, intermediate_size, vocab_size, head_dim, tie_word_embeddings): the
# catalog's models, and two Qwen2.5 sizes the catalog has not, for the real-size curves of
# resources/replay/standins.
KNOWN_SHAPES: dict[str, KnownShape] = {
    "qwen2.5-0.5b": KnownShape("qwen2", 896, 24, 14, 2, 4864, 151936, tied_embeddings=True),
    "qwen2.5-1.5b": KnownShape("qwen2", 1536, 28, 12, 2, 8960, 151936, tied_embeddings=True),
    "qwen2.5-3b": KnownShape("qwen2", 2048, 36, 16, 2, 11008, 151936, tied_embeddings=True),
    "qwen2.5-7b": KnownShape("qwen2", 3584, 28, 28, 4, 18944, 152064),
    "qwen2.5-14b": KnownShape("qwen2", 5120, 48, 40, 8, 13824, 152064),
    "llama-3.2-1b": KnownShape("llama", 2048, 16, 32, 8, 8192, 128256, tied_embeddings=True, rope_theta=5e5),
    "llama-3.1-8b": KnownShape("llama", 4096, 32, 32, 8, 14336, 128256, rope_theta=5e5),
    "qwen3-0.6b": KnownShape("qwen3", 1024, 28, 16, 8, 3072, 151936, head_dim=128, tied_embeddings=True),
    "qwen3-8b": KnownShape("qwen3", 4096, 36, 32, 8, 12288, 151936, head_dim=128),
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
