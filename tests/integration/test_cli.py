"""`tandem generate` and `tandem bench` as a user runs them: real processes, real exit codes
(the lab bench's tests: tests/integration/test_lab_bench.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli_process import last_error_line, tandem
from tests.tiny import write_tiny_model

ROOT = Path(__file__).resolve().parents[2]
JSON_KEYS = {
    "text", "token_ids", "n_prompt_tokens", "n_generated", "n_drafted", "n_accepted",
    "acceptance_rate", "prefill_s", "decode_s", "decode_tokens_per_s", "speculation", "stop_reason",
}  # fmt: skip


@pytest.mark.parametrize("draft", ["none", "ngram", "model"])
def test_generate_json(tiny_target: Path, tiny_draft: Path, draft: str) -> None:
    spec = str(tiny_draft) if draft == "model" else draft
    r = tandem("generate", "--model", str(tiny_target), "--draft", spec, "--prompt", "the cat sat",
               "--max-tokens", "24", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out.keys() >= JSON_KEYS
    assert out["speculation"] == {"none": "none", "ngram": "ngram", "model": "draft"}[draft]
    assert out["n_generated"] == len(out["token_ids"]) == 24
    assert out["stop_reason"] == "length"
    assert 0.0 <= out["acceptance_rate"] <= 1.0
    # Its time to first token and what it read (it was 0.0 and "" outside the window and server).
    assert 0.0 < out["first_token_s"] <= out["prefill_s"] + out["decode_s"] + out["load_s"]
    assert out["reread"] == "first"


def test_generate_streams_text_and_prints_stats(tiny_target: Path, tmp_path: Path) -> None:
    prompt_file = tmp_path / "p.txt"
    prompt_file.write_text("the cat sat on the mat", encoding="utf-8")
    r = tandem("generate", "--model", str(tiny_target), "--prompt-file", str(prompt_file), "--max-tokens", "10",
               "--draft", "ngram")  # fmt: skip
    assert r.returncode == 0, r.stderr
    stats = r.stderr.strip().splitlines()[-1]
    assert stats.startswith("[ngram] 10 tokens") and "tok/s" in stats


def test_greedy_json_is_the_same_with_and_without_speculation(tiny_target: Path) -> None:
    common = (
        "generate",
        "--model",
        str(tiny_target),
        "--prompt",
        "abc abc abc abd",
        "--max-tokens",
        "40",
        "--json",
    )
    plain = json.loads(tandem(*common).stdout)
    fast = json.loads(tandem(*common, "--draft", "ngram").stdout)
    assert fast["token_ids"] == plain["token_ids"]
    # A first use drafts a short match only at batch sizes it has timed or once the reply repeats
    # itself, and this reply has nothing to copy: fixed drafts make sure verify batches judge it.
    fixed = json.loads(tandem(*common, "--draft", "ngram", "--fixed-draft").stdout)
    assert fixed["n_drafted"] > 0
    assert fixed["token_ids"] == plain["token_ids"]


def test_bad_model_files(tmp_path: Path, tiny_target: Path) -> None:
    cases = {
        "missing.gguf": (None, "model file not found"),
        "empty.gguf": (b"", "is empty"),
        "text.gguf": (b"just some text\n", "is not a GGUF model file"),
        "random.gguf": (os.urandom(4096), "is not a GGUF model file"),
        "cut.gguf": (tiny_target.read_bytes()[:300_000], "is truncated"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        line = last_error_line(tandem("generate", "--model", str(path), "--prompt", "hi"))
        assert message in line, (name, line)
        # The same checks guard the draft.
        line = last_error_line(
            tandem("generate", "--model", str(tiny_target), "--draft", str(path), "--prompt", "hi")
        )
        assert message in line, (name, line)


def test_incompatible_pair_names_the_rule(tiny_target: Path, tiny_incompatible: Path) -> None:
    line = last_error_line(
        tandem("generate", "--model", str(tiny_target), "--draft", str(tiny_incompatible), "--prompt", "hi")
    )
    assert "text of token 40 differs" in line and "'%'" in line and "'%_x'" in line


def test_token_text_mismatch_names_the_rule(tmp_path: Path, tiny_target: Path) -> None:
    other = write_tiny_model(tmp_path / "vocab.gguf", seed=4, rename_token=40)
    line = last_error_line(
        tandem("generate", "--model", str(tiny_target), "--draft", str(other), "--prompt", "hi")
    )
    assert "text of token 40" in line and "target: '%'" in line and "draft: '%_x'" in line


def test_a_different_eos_id_is_accepted_where_eos_is_not_added(tmp_path: Path, tiny_target: Path) -> None:
    # llama.cpp's rule: EOS ids are compared only when the tokenizer adds EOS (this one does not).
    other = write_tiny_model(tmp_path / "eos.gguf", seed=4, eos_token_id=2)
    r = tandem("generate", "--model", str(tiny_target), "--draft", str(other), "--prompt", "hi",
               "--max-tokens", "4", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["speculation"] == "draft"


def test_prompt_longer_than_context(tiny_target: Path) -> None:
    line = last_error_line(
        tandem("generate", "--model", str(tiny_target), "--prompt", "word " * 400, "--ctx", "128")
    )
    assert "the prompt is" in line and "tokens long but the context holds only 128" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--prompt", "   "), "the prompt is empty"),
        (("--prompt-file", "/nonexistent/prompt.txt"), "prompt file not found"),
        (("--prompt", "hi", "--max-tokens", "0"), "--max-tokens must be at least 1"),
        (("--prompt", "hi", "--temperature", "-1"), "--temperature must be 0 or more"),
        (("--prompt", "hi", "--top-p", "0"), "--top-p must be in (0, 1]"),
        (("--prompt", "hi", "--threads", "0"), "--threads must be at least 1"),
        (("--prompt", "hi", "--max-tokens", "many"), "invalid int value"),
        ((), "one of the arguments --prompt --prompt-file is required"),
    ],
)
def test_bad_arguments(tiny_target: Path, args: tuple[str, ...], message: str) -> None:
    line = last_error_line(tandem("generate", "--model", str(tiny_target), *args))
    assert message in line


def test_chat_needs_a_template(tmp_path: Path, tiny_target: Path) -> None:
    r = tandem(
        "generate", "--model", str(tiny_target), "--prompt", "hi", "--chat", "--max-tokens", "5", "--json"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["n_prompt_tokens"] > 3  # the template wrapped the message


def test_bench_runs_plain_against_sped_up(tiny_target: Path, tmp_path: Path) -> None:
    # The user's question: how much faster here, on this model and these prompts? One table, the
    # decode and the whole request, plain against sped up (the peers are the lab's: test_lab_bench).
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"name": "loop", "set": "copy", "prompt": "abc abc abc abc abc"}) + "\n")
    out = tmp_path / "report.md"
    r = tandem("bench", "--model", str(tiny_target), "--draft", "ngram", "--prompts", str(prompts),
               "--max-tokens", "32", "--repeat", "2", "--json", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    (row,) = report["prompts"]
    assert row["plain_tokens_per_s"] > 0 and row["spec_tokens_per_s"] > 0 and row["speedup"] > 0
    assert row["plain_request_s"] > 0 and row["spec_request_s"] > 0 and row["request_speedup"] > 0
    assert row["same_text"] is True and row["n_generated"] == 32
    assert (
        report["median_speedup"] == row["speedup"] and report["min_request_speedup"] == row["request_speedup"]
    )
    text = out.read_text()
    assert "| loop | copy |" in text and "decode speedup" in text and "whole request speedup" in text
    assert "llama-server" not in text and "ceiling" not in text  # the lab's columns stay in the lab


@pytest.mark.parametrize("flag", [("--no-peer",), ("--again",), ("--turns", "3"), ("--no-process",)])
def test_a_lab_flag_is_not_the_bench_s(tiny_target: Path, flag: tuple[str, ...]) -> None:
    # The lab bench's flags are the lab bench's (`python -m tools.lab.bench`, test_lab_bench):
    # `tandem bench` names one as it names any option it does not know, in one line.
    r = tandem("bench", "--model", str(tiny_target), *flag)
    line = last_error_line(r)
    assert r.stderr.strip().splitlines() == [line]
    assert line == f"error: unknown option '{flag[0]}' for bench (see tandem help bench)"


def test_bench_bad_prompt_file(tiny_target: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    line = last_error_line(tandem("bench", "--model", str(tiny_target), "--prompts", str(bad)))
    assert "line 1: not a JSON object" in line


def test_the_bench_says_when_a_different_text_is_expected() -> None:
    from app.cli.bench import same_text_note

    greedy = same_text_note({"temperature": 0.0, "draft": "/models/draft.gguf"})
    assert greedy.startswith("Same text: greedy output") and "NO is expected" not in greedy
    keyed = same_text_note({"temperature": 0.8, "draft": "ngram"})
    assert "same seed" in keyed and "NO is expected" not in keyed
    sampled = same_text_note({"temperature": 0.8, "draft": "/models/draft.gguf"})
    assert "keeps the target's distribution, not its tokens: NO is expected" in sampled


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("frobnicate",), "tandem: unknown command 'frobnicate' (see tandem help)"),
        (("--bogus",), "tandem: unknown option '--bogus' (see tandem help)"),
        (("--model", "default", "frobnicate"), "tandem: unknown command 'frobnicate' (see tandem help)"),
        (
            ("generate", "--promt", "hi"),
            "error: unknown option '--promt' for generate (see tandem help generate)",
        ),
    ],
)
def test_an_unknown_command_or_option_is_named_without_a_window(
    args: tuple[str, ...], line: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No display: before, the window's path loaded Qt and aborted (exit 134), or opened a second window.
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    r = tandem(*args, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [line]
    assert "Qt" not in r.stderr and r.stdout == ""
