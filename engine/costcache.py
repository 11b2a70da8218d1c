"""Measured step costs and acceptance that outlive a process, so no one pays to measure them twice.

The draft-length controller learns what a verify step of each size costs, what a drafted token
costs and how often drafts are accepted. Those depend on the models, the thread count, the batch
size, where the layers run, the llama.cpp build and the CPU, so the cache key holds all of them:
a figure is reused only where it was measured. A cache miss costs nothing up front (the controller
measures online, in the first reply); a corrupt or stale file is ignored and rewritten.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from engine.events import Speculation

FORMAT = 3  # 2: the draft model's prefill cost ratio; 3: n-gram bucket 5 (copying) apart from 4


def file_identity(path: str) -> str:
    """A model file as the cache sees it: where it is, its size and when it last changed."""
    if path == Speculation.NGRAM:
        return str(Speculation.NGRAM)  # drafts from the text: no file
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


@functools.cache
def build_identity() -> str:
    """llama-cpp-python's version and the features llama.cpp was compiled with (AVX2, AVX512...)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return f"{llama_cpp.__version__}|{info.decode(errors='replace') if isinstance(info, bytes) else info}"


@functools.cache
def cpu_identity() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cost_key(
    target_path: str,
    draft: str,
    n_threads: int,
    n_batch: int,
    n_gpu_layers: int,
    placement: str = "",
) -> str:
    """Everything a measured cost depends on, hashed. placement: where layers run (RPC servers)."""
    parts = {
        "format": FORMAT,
        "target": file_identity(target_path),
        "draft": file_identity(draft),
        "n_threads": n_threads,
        "n_batch": n_batch,
        "n_gpu_layers": n_gpu_layers,
        "placement": placement,
        "build": build_identity(),
        "cpu": cpu_identity(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


PAIRING_RULES = 1  # bump when engine.pairing's rules change: known-good pairs are checked again


def pair_key(target_path: str, draft_path: str) -> str:
    """A target/draft pair as the cache knows it: both files as they are now, and the rules."""
    parts = [PAIRING_RULES, file_identity(target_path), file_identity(draft_path)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def _between(value: Any, low: float, high: float) -> bool:
    return isinstance(value, int | float) and low < value < high


# The optional numbers DraftLengthController.export writes, and the bounds of a sane one.
_BOUNDS = {"draft_ratio": 100, "draft_first_ratio": 100, "draft_prefill_ratio": 100,
           "target_prefill_token_s": 60, "draft_load_s": 600, "plain_text_tokens": 1e7}  # fmt: skip


def _valid(data: Any) -> bool:
    """The shape DraftLengthController.export writes, with sane numbers."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return False
    step_s = data.get("step_s")
    if not isinstance(step_s, dict) or not all(
        str(n).isdigit() and 0 < int(n) <= 4096 and _between(s, 0, 60) for n, s in step_s.items()
    ):
        return False
    if any(data.get(k) is not None and not _between(data[k], 0, high) for k, high in _BOUNDS.items()):
        return False
    acceptance = data.get("acceptance", {})
    return isinstance(acceptance, dict) and all(
        str(b).isdigit()
        and isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, int | float) and 0 <= x < 1e6 for x in v)
        and v[0] <= v[1]
        for b, v in acceptance.items()
    )


class CostCache:
    """One JSON file per key under `directory`; every failure reads as a miss."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return None
        return data if _valid(data) else None

    def save(self, key: str, data: dict[str, Any]) -> None:
        """Write atomically; a cache that cannot be written is no reason to fail a reply. What
        `load` returned saves back as it is (its format field is this one's)."""
        payload = {**data, "format": FORMAT}
        if _valid(payload):
            self._write(self._path(key), payload)

    def _write(self, path: Path, data: Any) -> None:
        """`data` as JSON at `path`, atomically; nothing where it cannot be written."""
        with contextlib.suppress(OSError):
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f)
                os.replace(tmp, path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def _span_path(self, identity: str) -> Path:
        return self.directory / f"vocab-{hashlib.sha256(identity.encode()).hexdigest()[:24]}.span"

    def string_spans(self, identity: str) -> tuple[tuple[int, int, int], ...]:
        """Where a model file's arrays of strings lie (engine.gguf_info.GGUFInfo.string_spans: the
        vocabulary's texts, a BPE model's merges), by its file_identity; () where not kept or not
        readable. (A span file of an earlier release holds the vocabulary's span alone.)"""
        try:
            spans = json.loads(self._span_path(identity).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            return ()
        if isinstance(spans, list) and len(spans) == 3 and all(type(x) is int for x in spans):
            spans = [spans]
        ok = isinstance(spans, list) and all(
            isinstance(span, list) and len(span) == 3 and all(type(x) is int and x >= 0 for x in span)
            for span in spans
        )
        return tuple((span[0], span[1], span[2]) for span in spans) if ok else ()

    def remember_string_spans(self, identity: str, spans: tuple[tuple[int, int, int], ...]) -> None:
        self._write(self._span_path(identity), [list(span) for span in spans])

    def _pair_path(self, pair: str) -> Path:
        return self.directory / f"pair-{pair}.ok"

    def knows_compatible(self, pair: str) -> bool:
        """Was this pair (a pair_key) checked and found compatible before?"""
        return self._pair_path(pair).is_file()

    def remember_compatible(self, pair: str) -> None:
        self._write(self._pair_path(pair), True)
