"""Can this draft model draft for this target? Decided from GGUF metadata, before loading, by
llama.cpp's own rules (common_speculative_are_compatible in common/speculative.cpp).
"""

from __future__ import annotations

from engine.errors import IncompatiblePairError
from engine.gguf_info import GGUFInfo

VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def _flag(info: GGUFInfo, key: str, default: bool) -> bool:
    value = info.metadata.get(key)
    return bool(value) if value is not None else default


def check_pair(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise IncompatiblePairError naming the first rule the pair breaks.

    As in llama.cpp, a BOS (EOS) id matters only when the tokenizer adds BOS (EOS) to prompts:
    a Qwen2.5 base target (EOS 151643) drafts with a Qwen2.5 instruct draft (EOS 151645).
    """
    if target.vocab_type != draft.vocab_type:
        raise IncompatiblePairError(
            "vocabulary type (tokenizer.ggml.model)", target.vocab_type, draft.vocab_type
        )
    # llama.cpp adds BOS by default for SentencePiece vocabularies ("llama", the draft's too) only.
    sentencepiece = target.vocab_type == "llama"
    for name, flag_key, id_key, default in (
        ("BOS", "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id", sentencepiece),
        ("EOS", "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id", False),
    ):
        add_t, add_d = _flag(target, flag_key, default), _flag(draft, flag_key, default)
        if add_t != add_d:
            raise IncompatiblePairError(f"add-{name} flag ({flag_key})", add_t, add_d)
        id_t, id_d = target.metadata.get(id_key), draft.metadata.get(id_key)
        if add_t and id_t != id_d:
            raise IncompatiblePairError(f"{name} token id ({id_key})", id_t, id_d)
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise IncompatiblePairError(
            f"vocabulary size (more than {VOCAB_MAX_SIZE_DIFFERENCE} apart)",
            target.n_vocab,
            draft.n_vocab,
        )
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        if target.tokens[i] != draft.tokens[i]:
            raise IncompatiblePairError(f"text of token {i}", target.tokens[i], draft.tokens[i])
