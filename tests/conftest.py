"""Shared fixtures: tiny generated GGUF models and an isolated TANDEM_HOME for every test."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from engine.tiny import write_tiny_model  # noqa: E402


@pytest.fixture(autouse=True)
def tandem_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "tandem-home"
    home.mkdir()
    monkeypatch.setenv("TANDEM_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_target(models_dir: Path) -> Path:
    return write_tiny_model(models_dir / "target.gguf", seed=1, n_layers=4)


@pytest.fixture(scope="session")
def tiny_draft(models_dir: Path) -> Path:
    """The target plus noise: a compatible draft that accepts about half its tokens."""
    return write_tiny_model(models_dir / "draft.gguf", seed=1, perturb=0.1)


@pytest.fixture(scope="session")
def tiny_incompatible(models_dir: Path) -> Path:
    """Token 40's text differs from the target's: llama.cpp's pairing rule refuses it."""
    return write_tiny_model(models_dir / "other-vocab.gguf", seed=3, n_layers=2, rename_token=40)
