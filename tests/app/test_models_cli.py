"""`tandem models ...` through the command line's main, and once through a real process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import TINY_DRAFT_REPO, TINY_REPO, FakeHub, tiny_pair_catalog

from app import paths
from app.cli import cli_models
from app.cli.cli import main as tandem_main
from app.cli.cli_models import add_models_parser
from app.library.catalog import load_catalog
from tests.tiny import write_tiny_model

REPO, DRAFT_REPO = TINY_REPO, TINY_DRAFT_REPO  # served by the `hub` fixture (conftest.py)
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    try:
        code = tandem_main(["models", *argv])
    except SystemExit as e:  # a usage mistake: argparse's exit, as `tandem` ends with it
        code = int(str(e.code))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def assert_one_error_line(code: int, err: list[str], *fragments: str) -> None:
    assert code == 2
    assert err and err[-1].startswith("error: ")
    assert not any("Traceback" in line for line in err)
    for fragment in fragments:
        assert fragment in err[-1]


def test_download_prints_progress_to_stderr_and_the_path_last_on_stdout(
    hub: FakeHub, capsys: pytest.CaptureFixture[str], tiny_target: Path
) -> None:
    code, out, err = run(capsys, "download", REPO, "tiny-target.gguf")
    assert code == 0
    path = Path(out[-1])
    assert path == paths.models_dir() / "tandem-test--tiny-target-GGUF" / "tiny-target.gguf"
    assert path.read_bytes() == tiny_target.read_bytes()
    assert any("tiny-target.gguf: done" in line for line in err)


def test_download_with_revision(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    commit = hub.repos[REPO].commit
    code, out, _ = run(capsys, "download", REPO, "tiny-target.gguf", "--revision", commit)
    assert code == 0 and Path(out[-1]).exists()
    code, _, err = run(capsys, "download", REPO, "tiny-target.gguf", "--revision", "nope")
    assert_one_error_line(code, err, "has no revision 'nope'")


def test_download_errors_are_one_line_and_exit_code_2(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "download", REPO, "missing.gguf")
    assert_one_error_line(code, err, "missing.gguf was not found in the repository")
    assert out == []
    code, _, err = run(capsys, "download", "nobody/nothing", "x.gguf")
    assert_one_error_line(code, err, "repository nobody/nothing was not found")


def test_a_malformed_address_to_check_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # urlsplit raises ValueError on an unclosed IPv6 bracket: a sentence, not a traceback.
    code, out, err = run(capsys, "check", "http://[")
    assert_one_error_line(code, err, "http://[ is not an address Tandem can read")
    assert out == []


def test_download_of_a_catalog_pair(
    hub: FakeHub,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    tiny_target: Path,
    tiny_draft: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(
        json.dumps(
            tiny_pair_catalog(
                hub.repos[REPO].files["tiny-target.gguf"], hub.repos[DRAFT_REPO].files["tiny-draft.gguf"]
            )
        )
    )
    monkeypatch.setattr(cli_models, "load_catalog", lambda: load_catalog(catalog))
    code, out, err = run(capsys, "download", "--pair", "tiny-pair")
    assert code == 0, err
    assert [Path(line).name for line in out[-2:]] == ["tiny-target.gguf", "tiny-draft.gguf"]
    assert any("[2/2] tiny-draft.gguf: done" in line for line in err)
    code, _, err = run(capsys, "download", "--pair", "no-such-pair")
    assert_one_error_line(code, err, "no pair named 'no-such-pair'", "tiny-pair")


def test_download_needs_a_file_or_a_pair(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "download", REPO)
    assert_one_error_line(code, err, "REPO_ID FILENAME")


def test_usage_mistakes_end_with_an_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "frobnicate")
    assert_one_error_line(code, err, "invalid choice")


def test_list_shows_local_models_with_their_metadata(
    capsys: pytest.CaptureFixture[str], tiny_target: Path, tiny_draft: Path
) -> None:
    folder = paths.models_dir()
    shutil.copy(tiny_target, folder / "target.gguf")
    (folder / "sub").mkdir()
    shutil.copy(tiny_draft, folder / "sub" / "draft.gguf")
    (folder / "notes.gguf").write_text("not a model\n")
    (folder / "half.gguf.part").write_bytes(b"GGUF")  # partial downloads are not listed

    code, out, _ = run(capsys, "list")

    assert code == 0
    text = "\n".join(out)
    header = out[0].split()
    assert header[:6] == ["FILE", "SIZE", "ARCH", "QUANT", "PARAMS", "CONTEXT"]
    target_row = next(line for line in out if line.startswith("target.gguf")).split()
    assert target_row[1:3] == [f"{tiny_target.stat().st_size / 1000:.1f}", "kB"]
    assert target_row[3] == "llama" and target_row[4].endswith("F32")
    assert target_row[5].endswith("K") and target_row[6].replace(",", "").isdigit()
    assert any(line.startswith("sub/draft.gguf") for line in out)
    assert "notes.gguf: " in text and "is not a GGUF model file" in text
    assert "half.gguf" not in text
    assert out[-1].startswith("3 model file(s)")


def test_list_of_an_empty_folder_says_how_to_get_models(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list")
    assert code == 0 and "tandem models download" in out[0]


def test_pairs_lists_compatible_drafts_and_the_rule_the_others_break(
    capsys: pytest.CaptureFixture[str], tiny_target: Path, tiny_draft: Path, tiny_incompatible: Path
) -> None:
    folder = paths.models_dir()
    target = folder / "target.gguf"
    shutil.copy(tiny_target, target)
    shutil.copy(tiny_draft, folder / "draft.gguf")
    shutil.copy(tiny_incompatible, folder / "other-vocab.gguf")

    code, out, _ = run(capsys, "pairs", "target.gguf")

    assert code == 0
    compatible = out[out.index("compatible drafts:") + 1 : out.index("incompatible:")]
    assert any("ngram" in line for line in compatible)
    assert any(line.strip() == str(folder / "draft.gguf") for line in compatible)
    incompatible = out[out.index("incompatible:") + 1 :]
    assert len(incompatible) == 1
    assert "other-vocab.gguf" in incompatible[0] and "text of token 40" in incompatible[0]
    # A path works as well as a name.
    assert tandem_main(["models", "pairs", str(target)]) == 0


def test_pairs_with_an_unknown_target(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "pairs", "nothing.gguf")
    assert_one_error_line(code, err, "no model file 'nothing.gguf'")


def test_import_copies_a_valid_model(capsys: pytest.CaptureFixture[str], tiny_draft: Path) -> None:
    code, out, _ = run(capsys, "import", str(tiny_draft))
    assert code == 0
    dest = Path(out[-1])
    assert dest.parent == paths.models_dir() / "imported"
    assert dest.read_bytes() == tiny_draft.read_bytes()
    assert not list(dest.parent.glob("*.part"))


def test_import_of_a_text_file_says_it_is_not_gguf(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "readme.gguf"
    bad.write_text("hello, I am not a model\n")
    code, out, err = run(capsys, "import", str(bad))
    assert_one_error_line(code, err, "is not a GGUF model file")
    assert out == []
    assert not (paths.models_dir() / "imported" / "readme.gguf").exists()


def test_import_of_a_truncated_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    full = write_tiny_model(tmp_path / "full.gguf", seed=5)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full.read_bytes()[:300_000])
    code, _, err = run(capsys, "import", str(cut))
    assert_one_error_line(code, err, "is truncated")


def test_catalog_lists_the_pairs_and_what_does_not_work(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalog")
    assert code == 0
    text = "\n".join(out)
    assert "gemma-3-270m-ngram" in text and "built in" in text
    assert "qwen2.5-7b-0.5b" in text
    assert "Llama 3.1 8B Instruct + Qwen2.5 0.5B Instruct: add-BOS flag" in text
    code, out, _ = run(capsys, "catalog", "--json")
    pairs = json.loads("\n".join(out))
    assert {p["name"] for p in pairs} >= {"gemma-3-270m-ngram", "llama-3.1-8b-3.2-1b"}


def test_parser_plugs_into_another_argparse_tree(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="tandem")
    sub = parser.add_subparsers(dest="command")
    add_models_parser(sub)
    args = parser.parse_args(["models", "list"])
    assert args.run(args) == 0


def test_a_real_process_fails_with_exit_code_2_and_no_traceback(hub: FakeHub) -> None:
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "app.main", "models", "download", REPO, "missing.gguf"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("error: the file missing.gguf was not found")
    assert "Traceback" not in proc.stderr
