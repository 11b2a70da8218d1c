"""Whether two model files are the same model: one entry per file wherever models are listed.

The same GGUF file reaches the lists by several roads: a built-in model's own file and a copy of
it downloaded into the models folder, a file opened by a path with a symlink or a "..", a hard
link. Paths cannot tell (a copy has its own), so a file is known by its content: its size and a
hash of its first and last MiB (a GGUF header holds the model's name, its vocabulary and its
tensors' layout; two different models do not share a size, a header and a tail). Reading 2 MiB
costs about a millisecond; the answer is kept per path, size and modification time, so a list
opened again reads nothing.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

_EDGE = 1 << 20  # bytes hashed at each end


def file_identity(path: Path | str) -> tuple[int, str] | None:
    """(size, hash of the file's two ends): equal for the same content wherever it lives; None
    for a file that cannot be read (it is then only itself)."""
    try:
        resolved = Path(path).resolve()
        st = resolved.stat()
    except OSError:
        return None
    return _identity(str(resolved), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=256)
def _identity(path: str, size: int, _mtime_ns: int) -> tuple[int, str] | None:
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            digest.update(f.read(_EDGE))
            f.seek(max(_EDGE, size - _EDGE), os.SEEK_SET)  # the tail (a small file: what is left)
            digest.update(f.read(_EDGE))
    except OSError:
        return None
    return size, digest.hexdigest()


def same_file(a: Path | str, b: Path | str) -> bool:
    """Whether two paths hold the same model file (the same path, a link to it, or a copy)."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    first = file_identity(a)
    return first is not None and first == file_identity(b)
