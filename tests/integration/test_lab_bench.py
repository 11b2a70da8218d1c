"""The lab bench (tools/lab/bench.py, `make bench-lab`): Tandem beside the peers, whole processes,
a first use and warmed, a request asked again, the ceiling; and the lab's models by name. These
assertions moved here with the code from tests/integration/test_cli.py and tests/integration/test_documents.py, as they were."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engine.config import DraftChoice
from tests.cli_process import lab, last_error_line

# Real processes: the peers, `tandem generate`, llama-server. Each bench runs one thread: two
# spinning llama.cpp threads on two shared cores cost several times one.
pytestmark = pytest.mark.slow


def test_bench_runs_side_by_side(tiny_target: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"name": "loop", "set": "copy", "prompt": "abc abc abc abc abc"}) + "\n")
    out = tmp_path / "report.md"
    r = lab("bench", "--model", str(tiny_target), "--draft", "ngram", "--prompts", str(prompts),
            "--max-tokens", "32", "--turns", "3", "--threads", "1", "--json", "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    (row,) = report["prompts"]
    assert row["plain_tokens_per_s"] > 0 and row["spec_tokens_per_s"] > 0
    assert row["same_text"] is True  # in this process and across the two `tandem generate` processes
    assert row["ceiling"] > 1.0  # measured in the same run
    assert row["plain_process_s"] > 0 and row["spec_process_s"] > 0 and row["process_speedup"] > 0
    assert row["spec_load_s"] > 0 and row["spec_decode_s"] > 0
    assert row["peer_tokens_per_s"] > 0  # llama-cpp-python's prompt lookup, in its own process
    if (Path(sys.executable).parent / "llama-lookup").exists():
        assert row["lookup_tokens_per_s"] > 0 and row["lookup_process_s"] > 0
    # A first use on a new machine (an empty data folder) beside the warmed state, and
    # llama-server's four n-gram kinds, each against Tandem.
    assert row["first_use_tokens_per_s"] > 0 and row["warmed_tokens_per_s"] > 0
    if (Path(sys.executable).parent / "llama-server").exists():
        assert set(row["server_tokens_per_s"]) == {
            "ngram-simple",
            "ngram-map-k",
            "ngram-map-k4v",
            "ngram-mod",
        }
        assert all(v > 0 for v in row["server_tokens_per_s"].values())
        assert row["first_use_vs_server"] > 0 and row["warmed_vs_server"] > 0
        assert row["best_server"][0] in row["server_tokens_per_s"]
        # The best kind's share of the ceiling: what k times it asks of Tandem's share.
        assert row["server_of_ceiling"] > 0
    assert 0 <= row["copied"] <= 1 and 0 <= row["looped"] <= 1  # a copy prompt's plain reply is checked
    assert len(report["ttft_s"]) == 3
    text = out.read_text()
    assert "| loop | copy |" in text
    assert "## Whole process" in text and "## Decode" in text
    assert "## Does the model do the work the request names?" in text
    if (Path(sys.executable).parent / "llama-server").exists():
        assert "## Against llama-server's n-gram kinds" in text


def test_bench_again_drafts_the_second_answer_from_the_first(tiny_target: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompt = "in the beginning there was the word, and the word was"
    prompts.write_text(json.dumps({"name": "fresh", "set": "qa", "prompt": prompt}) + "\n")
    r = lab("bench", "--model", str(tiny_target), "--draft", "ngram", "--prompts", str(prompts),
            "--max-tokens", "48", "--turns", "0", "--no-peer", "--again", "--threads", "1", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    (row,) = report["prompts"]
    assert report["again"] is True and row["same_text"] is True
    assert row["accepted_from_memory"] > 0  # the second answer was drafted from the first
    assert row["plain_process_s"] is None  # earlier answers live in a process: none timed
    if (Path(sys.executable).parent / "llama-lookup").exists():
        assert row["lookup_tokens_per_s"] > 0  # with its dynamic cache from a first run


def test_the_lab_bench_names_a_bad_prompt_file_in_one_line(tiny_target: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    line = last_error_line(lab("bench", "--model", str(tiny_target), "--prompts", str(bad), "--no-peer"))
    assert "line 1: not a JSON object" in line


def test_a_reply_that_copies_loops_or_neither_is_told_apart() -> None:
    from tools.lab.bench import copy_and_loop_shares

    # A reply that copies, one that loops, one that does neither.
    source = list(range(100, 140))
    assert copy_and_loop_shares(tuple(source[5:25]), source) == (1.0, 0.0)
    copied, looped = copy_and_loop_shares((1, 2, 3, 4, 5, 6, 7, 8) * 4, source)
    assert copied == 0.0 and looped > 0.7
    assert copy_and_loop_shares(tuple(range(500, 520)), source) == (0.0, 0.0)


def test_the_bench_runs_the_documents_set_and_says_what_the_model_did(
    tiny_target: Path, tmp_path: Path
) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps(
            {
                "set": "documents",
                "name": "doc-copy",
                "documents": ["documents/mit.txt"],
                "request": "Copy it.",
            }
        )
        + "\n"
    )
    out = tmp_path / "report.md"
    r = lab(
        "bench", "--model", str(tiny_target), "--draft", "ngram", "--prompts", str(prompts), "--max-tokens", "16",
        "--turns", "0", "--no-peer", "--no-lookup", "--no-process", "--temperature", "0.7", "--repeat-penalty",
        "1.1", "--threads", "1", "--json", "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    (row,) = report["prompts"]
    assert (
        row["copied"] is not None and row["looped"] is not None and row["accepted_from_document"] is not None
    )
    text = out.read_text()
    assert "repeat penalty 1.1" in text and "## Documents: does the model do the work" in text
    assert "| doc-copy | 16 |" in text


def test_the_lab_takes_its_model_names_and_the_product_does_not(
    tiny_target: Path, tiny_draft: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.library.model_spec import parse_model
    from tools.lab import models

    # The product reads the lab's names as paths (none of its embedded models).
    assert parse_model(models.F16).embedded is None and parse_model(models.COSTLY).embedded is None
    # The lab makes each from the embedded model; here the makers hand back the tiny pair.
    monkeypatch.setattr(models, "ensure_default_f16", lambda: tiny_target)
    monkeypatch.setattr(models, "ensure_default_costly", lambda: tiny_draft)
    assert models.lab_model("default-f16") == str(tiny_target)
    assert models.lab_model("default-costly") == str(tiny_draft)
    assert models.lab_model(str(tiny_target)) == str(tiny_target)  # a path as it is
    assert models.lab_draft(DraftChoice.parse("default-costly")) == DraftChoice.of_model(str(tiny_draft))
    assert models.lab_draft(DraftChoice.parse("ngram")) == DraftChoice.parse("ngram")


def test_the_ceiling_is_timed_where_the_reply_runs(tiny_target: Path, tmp_path: Path) -> None:
    # A verify batch costs more after more text (its attention): timed after the prompt alone,
    # the ceiling would be one that no reply of that length could reach. Timed after half of it.
    from engine.config import EngineConfig
    from engine.session import Engine
    from tools.lab.bench import measure_ceiling

    config = EngineConfig(
        str(tiny_target),
        draft=DraftChoice.parse("ngram"),
        n_ctx=512,
        n_threads=1,
        cost_cache_dir=str(tmp_path),
    )
    engine = Engine(config)
    timed_after = []
    time_batches = engine.target.time_batches

    def timed(sizes: tuple[int, ...], context: list[int], repeats: int = 3) -> dict[int, float]:
        timed_after.append(len(context))
        return time_batches(sizes, context, repeats)

    engine.target.time_batches = timed  # type: ignore[method-assign]
    try:
        prompt = "one two three four five six seven eight"
        n_prompt = len(engine.tokenize(prompt))
        ceiling, costs = measure_ceiling(engine, prompt, max_tokens=64)
    finally:
        engine.close()
    assert timed_after == [n_prompt + 32]
    assert ceiling is not None and ceiling > 1.0 and 64 in costs
