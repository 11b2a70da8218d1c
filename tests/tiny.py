"""Write tiny llama-architecture GGUF models with random weights, for tests and smoke checks.

A 4-layer, 64-wide model with a byte-level BPE vocabulary (3 specials, the 256 byte tokens
in GPT-2's byte-to-unicode order, a few merges) loads and generates through llama.cpp in
milliseconds. Two files with the same vocabulary and different seeds make a target/draft
pair; `rename_token` makes an incompatible one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPECIALS = ("<|bos|>", "<|eos|>", "<|pad|>")
MERGES = ("Ġ t", "h e", "Ġ a", "i n", "Ġt he", "e r", "o n", "Ġ s", "r e", "a n")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def tiny_vocab() -> list[str]:
    merged = ["".join(m.split(" ")) for m in MERGES]
    return list(SPECIALS) + _bytes_to_unicode() + merged


def write_tiny_model(
    path: str | Path,
    seed: int = 0,
    n_layers: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx: int = 2048,
    rename_token: int | None = None,
    weight_scale: float = 0.6,
    eos_token_id: int = 1,
    perturb: float = 0.0,
    perturb_seed: int = 99,
    without_tensor: str = "",
) -> Path:
    """Write a tiny model; `rename_token` changes one token's text (an incompatible vocabulary);
    `without_tensor` leaves that tensor out (a file Tandem's checks pass and llama.cpp refuses).

    `perturb` adds noise of that relative size to every weight of the `seed` model: a draft
    that mostly agrees with its target, like a quantized copy.
    """
    import gguf

    path = Path(path)
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(perturb_seed)
    tokens = tiny_vocab()
    if rename_token is not None:
        tokens[rename_token] = tokens[rename_token] + "_x"
    n_vocab = len(tokens)
    token_types = [3] * len(SPECIALS) + [1] * (n_vocab - len(SPECIALS))

    w = gguf.GGUFWriter(str(path), "llama")
    if without_tensor:
        add_tensor = w.add_tensor
        w.add_tensor = lambda name, *a, **k: None if name == without_tensor else add_tensor(name, *a, **k)  # type: ignore[method-assign]
    w.add_name(f"tiny-{seed}-{n_layers}L")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_file_type(0)  # ALL_F32
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(token_types)
    w.add_token_merges(list(MERGES))
    w.add_bos_token_id(0)
    w.add_eos_token_id(eos_token_id)
    w.add_pad_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template(CHAT_TEMPLATE)

    def noisy(a: np.ndarray) -> np.ndarray:
        if perturb:
            a = a + noise_rng.standard_normal(a.shape) * perturb * a.std()
        return a.astype(np.float32)

    def mat(rows: int, cols: int, scale: float) -> np.ndarray:
        return noisy(rng.standard_normal((rows, cols)) * scale / np.sqrt(cols))

    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", noisy(rng.standard_normal((n_vocab, n_embd))))
    for i in range(n_layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.attn_q.weight", mat(n_embd, n_embd, 1.0))
        w.add_tensor(f"blk.{i}.attn_k.weight", mat(n_embd, n_embd, 1.0))
        w.add_tensor(f"blk.{i}.attn_v.weight", mat(n_embd, n_embd, 1.0))
        w.add_tensor(f"blk.{i}.attn_output.weight", mat(n_embd, n_embd, 1.0))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_gate.weight", mat(n_ff, n_embd, 1.0))
        w.add_tensor(f"blk.{i}.ffn_up.weight", mat(n_ff, n_embd, 1.0))
        w.add_tensor(f"blk.{i}.ffn_down.weight", mat(n_embd, n_ff, 1.0))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", mat(n_vocab, n_embd, weight_scale * np.sqrt(n_embd)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
