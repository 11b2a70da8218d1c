"""The lab's models, made offline from the embedded one (the lab bench and the tests take them by
name; the product knows only `default`, `smollm2` and paths):

- `default-f16`: an F16 copy of the embedded Gemma 3 270M Q4_K_M (same tokenizer, same function),
  a real target / draft pair with it where a draft model cannot pay;
- `default-costly`: that F16 copy with 72 zero-output layers appended, a target about 4x as costly
  per token as its Q4_K_M draft: the shape of a pair where a draft model can pay.

Each is made on first use into the models folder (or the folder given) and found there later.
(The shapes the lab writes stand-ins of are in tools/lab/shapes.py.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from app.library.default_model import ensure_default_model
from app.library.model_spec import parse_model
from app.paths import models_dir
from engine.config import DraftChoice

if TYPE_CHECKING:
    import gguf  # imported where a copy is made: numpy and gguf load slowly

F16 = "default-f16"
COSTLY = "default-costly"


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


def lab_model(text: str) -> str:
    """A model as the lab bench takes it: `default-f16`, `default-costly`, or anything `tandem`
    takes (`default`, `smollm2`, a path), as a GGUF path."""
    name = text.strip()
    if name == F16:
        return str(ensure_default_f16())
    if name == COSTLY:
        return str(ensure_default_costly())
    return parse_model(name).resolve()


def lab_draft(draft: DraftChoice) -> DraftChoice:
    """A draft choice with a lab model name as its file (other choices as they are)."""
    if draft.model in (F16, COSTLY):
        return DraftChoice.of_model(lab_model(draft.model))
    return draft
