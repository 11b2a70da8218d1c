"""The shipped catalog, machine fit, and local draft choices."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app import paths
from app.library.catalog import (
    CatalogError,
    MachineInfo,
    UnknownPairError,
    catalog_path,
    draft_choices,
    fit_for,
    load_catalog,
    parse_catalog,
    scan_local_models,
    total_ram_bytes,
)
from engine.events import Speculation
from engine.gguf_info import read_gguf_info

GiB = 1024**3


def test_shipped_catalog_has_the_pairs_the_issue_asks_for() -> None:
    catalog = load_catalog()
    names = {p.name for p in catalog.pairs}
    assert names >= {
        "gemma-3-270m-ngram",
        "qwen2.5-7b-0.5b",
        "llama-3.1-8b-3.2-1b",
        "qwen3-8b-0.6b",
        "qwen2.5-coder-7b-0.5b",
        "gemma-3-12b-1b",
    }
    embedded = catalog.find_pair("gemma-3-270m-ngram")
    assert embedded.is_embedded and embedded.draft is None and embedded.download_bytes == 0
    qwen = catalog.find_pair("qwen2.5-7b-0.5b")
    assert qwen.target.filename == "Qwen2.5-7B-Instruct-Q4_K_M.gguf" and qwen.target.quantization == "Q4_K_M"
    assert qwen.draft is not None and qwen.draft.filename == "Qwen2.5-0.5B-Instruct-Q8_0.gguf"
    assert qwen.download_bytes == qwen.target.size_bytes + qwen.draft.size_bytes


def test_every_catalog_entry_is_complete_and_honest() -> None:
    catalog = load_catalog()
    for pair in catalog.pairs:
        for model in pair.models:
            assert model.filename.endswith(".gguf")
            assert model.size_bytes > 50_000_000 and model.context_length >= 2048 and model.license
            assert model.repo_id is not None or pair.is_embedded
        # A number only with where it came from; otherwise a note that says there is none.
        if pair.reported_speedup is not None:
            assert pair.reported_speedup.source and pair.reported_speedup.by and pair.reported_speedup.setup
        else:
            assert pair.speedup_note and "http" in pair.speedup_note
        assert pair.min_ram_bytes >= pair.download_bytes
    assert len(catalog.incompatible) >= 3
    assert all(bad.rule and bad.reason for bad in catalog.incompatible)


def test_catalog_file_is_valid_json_with_no_duplicate_files() -> None:
    data = json.loads(catalog_path().read_text())
    files = [(m["repo_id"], m["filename"]) for m in data["models"].values()]
    assert len(files) == len(set(files))


def test_unknown_pair_names_the_known_ones() -> None:
    with pytest.raises(UnknownPairError, match=r"no pair named 'nope'.*qwen3-8b-0.6b"):
        load_catalog().find_pair("nope")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("models"), "no 'models' table"),
        (lambda d: d["pairs"][0].update(target="missing"), "unknown target 'missing'"),
        (lambda d: d["pairs"][1].update(draft="missing"), "unknown draft 'missing'"),
        (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(size_bytes="big"), "size_bytes has the wrong type"),
        (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(filename="x.bin"), "is not a .gguf file"),
        (lambda d: d["models"]["qwen3-0.6b-q8_0"].update(repo_id="no-slash"), "must look like 'owner/name'"),
        (lambda d: d["pairs"].append(dict(d["pairs"][0])), "two pairs are named"),
    ],
)
def test_malformed_catalog_names_the_bad_entry(mutate, message: str) -> None:
    data = json.loads(catalog_path().read_text())
    mutate(data)
    with pytest.raises(CatalogError, match=message):
        parse_catalog(data)


def test_missing_catalog_file(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="missing"):
        load_catalog(tmp_path / "catalog.json")


def test_fit_compares_memory_and_gpu() -> None:
    pair = load_catalog().find_pair("llama-3.1-8b-3.2-1b")
    small = fit_for(pair, MachineInfo(total_ram_bytes=4 * GiB, has_gpu=False, gpu_label=""))
    assert not small.is_fitting and "needs 10.7 GB of memory" in small.reason and "has 4.3 GB" in small.reason
    cpu = fit_for(pair, MachineInfo(total_ram_bytes=32 * GiB, has_gpu=False, gpu_label=""))
    assert cpu.is_fitting and cpu.is_gpu_advised and "without a GPU" in cpu.reason
    gpu = fit_for(pair, MachineInfo(total_ram_bytes=32 * GiB, has_gpu=True, gpu_label="NVIDIA GPU"))
    assert gpu.is_fitting and not gpu.is_gpu_advised and "NVIDIA" in gpu.reason
    embedded = fit_for(load_catalog().find_pair("gemma-3-270m-ngram"), MachineInfo(2 * GiB, False, ""))
    assert embedded.is_fitting and not embedded.is_gpu_advised


def test_this_machine_reports_its_memory() -> None:
    assert total_ram_bytes() > 512 * 1024**2


def test_draft_choices_put_compatible_drafts_first_and_explain_the_others(
    tiny_target: Path, tiny_draft: Path, tiny_incompatible: Path
) -> None:
    folder = paths.models_dir()
    for f in (tiny_target, tiny_draft, tiny_incompatible):
        shutil.copy(f, folder / f.name)
    (folder / "broken.gguf").write_bytes(b"GGUF" + b"\0" * 10)
    target = read_gguf_info(folder / tiny_target.name)

    choices = draft_choices(target, scan_local_models())

    assert [c.path.name for c in choices][0] == "draft.gguf" and choices[0].is_compatible
    problems = {c.path.name: c.problem for c in choices[1:]}
    assert set(problems) == {"other-vocab.gguf", "broken.gguf"}
    assert "text of token 40" in (problems["other-vocab.gguf"] or "")
    assert problems["broken.gguf"]
    assert "target.gguf" not in {c.path.name for c in choices}  # a model never drafts for itself


def test_ngram_constant_matches_the_settings_value() -> None:
    from app.settings import Settings

    assert Settings().draft.text == Speculation.NGRAM


def test_catalog_corrections_checked_against_the_hub() -> None:
    """Facts checked against the hub's pages and llama.cpp's sources (issue 10)."""
    catalog = load_catalog()
    one_b = next(m for m in catalog.models if m.key == "gemma-3-1b-it-q4_k_m")
    assert one_b.repo_id == "ggml-org/gemma-3-1b-it-GGUF" and one_b.size_bytes == 806_058_240
    # Issue #10664 has no figure for Qwen2.5 7B + 0.5B: no number, and the note says none is known.
    qwen = catalog.find_pair("qwen2.5-7b-0.5b")
    assert qwen.reported_speedup is None and qwen.speedup_note and "no" in qwen.speedup_note.lower()
    # llama-server's --fim-qwen-7b-spec preset (PR 12287): the base Coder models from ggml-org.
    coder = catalog.find_pair("qwen2.5-coder-7b-0.5b")
    assert coder.draft is not None
    assert (coder.target.repo_id, coder.target.filename) == (
        "ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF",
        "qwen2.5-coder-7b-q8_0.gguf",
    )
    assert (coder.draft.repo_id, coder.draft.filename) == (
        "ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF",
        "qwen2.5-coder-0.5b-q8_0.gguf",
    )
    assert "Instruct" not in coder.target.name and "12287" in (coder.speedup_note or "")
    gemma = catalog.find_pair("gemma-3-12b-1b")
    assert gemma.reported_speedup is None and "Transformers" in (gemma.speedup_note or "")
    # llama.cpp's compatibility check fails on the add-BOS flag before it compares vocabulary sizes.
    llama_qwen = next(
        bad
        for bad in catalog.incompatible
        if bad.target.startswith("Llama 3.1") and bad.draft.startswith("Qwen2.5")
    )
    assert llama_qwen.rule.startswith("add-BOS flag")


def test_every_shipped_pair_says_what_it_is_good_for() -> None:
    for pair in load_catalog().pairs:
        assert 20 < len(pair.good_for) < 200, pair.name  # one sentence, for the Models page's card
