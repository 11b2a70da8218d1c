"""What a user types for a model or a draft means the same everywhere (app/library/model_spec.py), and
the command line has one edge: exit code 2 and one last `error:` line (app/cli/cli_base.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import paths
from app.cli.cli_base import EXIT_BAD_INPUT, EXIT_INTERRUPTED, at_the_edge
from app.library.default_model import DEFAULT_MODEL_NAME
from app.library.model_spec import Embedded, ModelSpec, parse_model, resolve_draft
from app.settings import Settings
from engine.config import PLAIN_DECODING, DraftChoice
from engine.errors import ModelNotFoundError
from engine.events import Speculation
from tests.cli_process import last_error_line, tandem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("default", ModelSpec(Embedded.DEFAULT)),
        ("", ModelSpec(Embedded.DEFAULT)),
        (None, ModelSpec(Embedded.DEFAULT)),
        # The lab's models are the lab's names (tools/lab/models.py, tests/integration/test_lab_bench.py): paths here.
        ("default-f16", ModelSpec(None, "default-f16")),
        ("default-costly", ModelSpec(None, "default-costly")),
        ("/models/a.gguf", ModelSpec(None, "/models/a.gguf")),
        ("defaults.gguf", ModelSpec(None, "defaults.gguf")),
    ],
)
def test_a_model_is_an_embedded_name_or_a_path(text: str | None, spec: ModelSpec) -> None:
    assert parse_model(text) == spec
    assert parse_model(spec.text) == spec  # written back, read again: the same


@pytest.mark.parametrize(
    ("text", "kind", "engine_value"),
    [
        (None, Speculation.NONE, None),
        ("", Speculation.NONE, None),
        ("none", Speculation.NONE, None),
        ("ngram", Speculation.NGRAM, "ngram"),
        ("/models/d.gguf", Speculation.DRAFT, "/models/d.gguf"),
        ("default", Speculation.DRAFT, "default"),
    ],
)
def test_a_draft_is_none_ngram_or_a_model(
    text: str | None, kind: Speculation, engine_value: str | None
) -> None:
    spec = DraftChoice.parse(text)
    assert spec.kind is kind and (spec.text if spec != PLAIN_DECODING else None) == engine_value
    assert bool(spec.model) == (kind is Speculation.DRAFT)  # a draft model to resolve
    assert DraftChoice.parse(spec.text) == spec


def test_settings_hand_the_engine_the_same_reading() -> None:
    assert Settings(draft=DraftChoice.parse("none")).engine_config("t.gguf").draft == PLAIN_DECODING
    assert Settings(draft=DraftChoice.parse("ngram")).engine_config("t.gguf").speculation == "ngram"
    assert Settings(draft=DraftChoice.parse("/d.gguf")).engine_config("t.gguf").draft.model == "/d.gguf"


def test_a_missing_path_resolves_to_itself_and_the_engine_says_it_is_missing(tmp_path: Path) -> None:
    from engine.gguf_info import read_gguf_info

    missing = str(tmp_path / "nothing.gguf")
    assert parse_model(missing).resolve() == missing
    with pytest.raises(ModelNotFoundError):
        read_gguf_info(parse_model(missing).resolve())


@pytest.fixture
def default_in_home(gemma_q4: Path) -> Path:
    """The embedded model where `default` finds it in this test's TANDEM_HOME (no 240 MB copy)."""
    link = paths.models_dir() / DEFAULT_MODEL_NAME
    os.symlink(gemma_q4, link)
    return link


@pytest.mark.gemma
def test_default_means_the_embedded_model_everywhere(default_in_home: Path, tiny_target: Path) -> None:
    assert parse_model("default").resolve() == str(default_in_home)
    assert resolve_draft(DraftChoice.parse("default")).model == str(default_in_home)
    # `tandem models pairs default` reads the embedded model, not a file named "default".
    r = tandem("models", "pairs", "default")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("target: ") and str(default_in_home) in r.stdout.splitlines()[0]
    # `generate --draft default` with another vocabulary: the pair is refused by its rule.
    line = last_error_line(
        tandem("generate", "--model", str(tiny_target), "--draft", "default", "--prompt", "hi")
    )
    assert "cannot draft for this target" in line


@pytest.mark.gemma
def test_the_window_opens_on_default(open_window, default_in_home: Path) -> None:
    window = open_window("default", draft="none")
    info = window.controller.info
    assert info is not None, window.header.state_label.text()
    assert info.target_path == str(default_in_home)
    assert window.header.speed_combo.currentData() == "none"


# ---- one edge


@pytest.mark.parametrize(
    "args",
    [
        ("generate", "--bogus"),
        ("generate", "--model", "m.gguf", "--max-tokens", "many", "--prompt", "x"),
        ("models", "list", "--bogus"),
        ("models", "nothing"),
        ("serve", "--port", "eighty"),
        ("--model",),  # the window's own parser: refused before any window opens
        ("--draft",),
    ],
)
def test_every_usage_mistake_ends_with_code_2_and_one_error_line(args: tuple[str, ...]) -> None:
    line = last_error_line(tandem(*args))
    assert len(line) > len("error: ")


def test_the_edge_turns_a_bug_into_one_error_line(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("TANDEM_DEBUG", raising=False)

    def bug() -> int:
        raise ZeroDivisionError("division by zero")

    assert at_the_edge(bug) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: unexpected failure: ZeroDivisionError: division by zero")
    assert (paths.logs_dir() / "cli-errors.log").read_text().count("ZeroDivisionError") >= 1

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert at_the_edge(interrupted, interrupted="interrupted; kept") == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip().splitlines()[-1] == "error: interrupted; kept"
    monkeypatch.setenv("TANDEM_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        at_the_edge(bug)


def test_an_unexpected_failure_in_a_command_exits_2_like_any_other(tmp_path: Path) -> None:
    # A prompt file that is a FIFO with nobody writing would hang; a directory named like a
    # prompt file is refused by a sentence. An unexpected failure: a models folder that is a file.
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").write_text("not a folder")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TANDEM_HOME": str(home)}
    env.pop("TANDEM_DEBUG", None)
    r = subprocess.run(
        [sys.executable, "-m", "app.main", "models", "list"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip
    last_error_line(r)
