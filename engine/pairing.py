"""Can this draft model draft for this target? Decided from GGUF metadata, before loading.

The rules are llama.cpp's own (common/speculative.cpp, common_speculative_are_compatible):
same vocabulary type, same BOS/EOS ids and add-BOS/EOS flags, vocabulary sizes within 128,
and identical token text from id 5 on. The error names the rule that failed, with both values.
"""

from __future__ import annotations

from engine.errors import IncompatiblePairError
from engine.gguf_info import GGUFInfo

VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def _add_bos_default(info: GGUFInfo) -> bool:
    # llama.cpp adds BOS by default for SentencePiece vocabularies ("llama") only.
    return info.vocab_type == "llama"


def _flag(info: GGUFInfo, key: str, default: bool) -> bool:
    value = info.metadata.get(key)
    return bool(value) if value is not None else default


def check_pair(target: GGUFInfo, draft: GGUFInfo) -> None:
    """Raise IncompatiblePairError naming the first rule the pair breaks."""
    rules: list[tuple[str, object, object]] = [
        ("vocabulary type (tokenizer.ggml.model)", target.vocab_type, draft.vocab_type),
        (
            "add-BOS flag (tokenizer.ggml.add_bos_token)",
            _flag(target, "tokenizer.ggml.add_bos_token", _add_bos_default(target)),
            _flag(draft, "tokenizer.ggml.add_bos_token", _add_bos_default(draft)),
        ),
        (
            "add-EOS flag (tokenizer.ggml.add_eos_token)",
            _flag(target, "tokenizer.ggml.add_eos_token", False),
            _flag(draft, "tokenizer.ggml.add_eos_token", False),
        ),
        (
            "BOS token id (tokenizer.ggml.bos_token_id)",
            target.metadata.get("tokenizer.ggml.bos_token_id"),
            draft.metadata.get("tokenizer.ggml.bos_token_id"),
        ),
        (
            "EOS token id (tokenizer.ggml.eos_token_id)",
            target.metadata.get("tokenizer.ggml.eos_token_id"),
            draft.metadata.get("tokenizer.ggml.eos_token_id"),
        ),
    ]
    for rule, t, d in rules:
        if t != d:
            raise IncompatiblePairError(rule, t, d)
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise IncompatiblePairError(
            f"vocabulary size (more than {VOCAB_MAX_SIZE_DIFFERENCE} apart)",
            target.n_vocab,
            draft.n_vocab,
        )
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        if target.tokens[i] != draft.tokens[i]:
            raise IncompatiblePairError(f"text of token {i}", target.tokens[i], draft.tokens[i])


def pair_problem(target: GGUFInfo, draft: GGUFInfo) -> str | None:
    """The rule a pair breaks, as a sentence, or None when the draft can draft for the target."""
    try:
        check_pair(target, draft)
    except IncompatiblePairError as e:
        return str(e)
    return None
