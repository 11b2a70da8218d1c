"""The model library: curated pairs from resources/catalog.json, this machine, and local files.

The catalog is data, not code: each pair names a target and a draft (a model key, or "ngram" for
prompt-lookup drafting that needs no second model), with the sizes and the speedup others
reported. "Fits this machine" is a plain comparison of the pair's memory need with the RAM this
machine has, plus whether a GPU is present (published speedups for model drafts were mostly
measured on GPUs; on CPUs they are small, see docs/findings.md).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from app import paths
from app.library.file_identity import file_identity
from engine.errors import IncompatiblePairError, ModelFileError, PairRefusal, TandemError
from engine.events import Speculation
from engine.gguf_info import GGUFInfo, read_gguf_info
from engine.pairing import check_pair


class CatalogError(TandemError):
    """resources/catalog.json is missing or malformed (a packaging bug, not a user mistake)."""


class UnknownPairError(TandemError):
    """A pair name that is not in the catalog."""


class ImportModelError(TandemError):
    """A model file could not be copied into the models folder (disk full, permissions)."""


@dataclass(frozen=True)
class CatalogModel:
    key: str
    name: str
    repo_id: str | None  # None: shipped with Tandem, nothing to download
    filename: str
    size_bytes: int
    quantization: str
    context_length: int
    license: str
    is_gated: bool
    revision: str = "main"
    sha256: str | None = None


@dataclass(frozen=True)
class ReportedSpeedup:
    factor: float
    by: str
    setup: str
    source: str


@dataclass(frozen=True)
class CatalogPair:
    name: str
    title: str
    target: CatalogModel
    draft: CatalogModel | None  # None: n-gram drafting, no draft model
    min_ram_bytes: int
    is_gpu_recommended: bool
    hardware: str
    reported_speedup: ReportedSpeedup | None
    speedup_note: str | None = None
    good_for: str = ""  # what the pair suits, in a sentence (the Models page's cards)
    is_embedded: bool = False
    is_for_chat: bool = True  # False: models that complete code or text, not chat (kept off the chat's list)

    @property
    def models(self) -> tuple[CatalogModel, ...]:
        return (self.target,) if self.draft is None else (self.target, self.draft)

    @property
    def download_bytes(self) -> int:
        """Bytes to fetch from the hub; 0 for the embedded pair."""
        return sum(m.size_bytes for m in self.models if m.repo_id is not None)


@dataclass(frozen=True)
class IncompatiblePair:
    target: str
    draft: str
    rule: str
    reason: str


@dataclass(frozen=True)
class Catalog:
    models: tuple[CatalogModel, ...]
    pairs: tuple[CatalogPair, ...]
    incompatible: tuple[IncompatiblePair, ...]

    def find_pair(self, name: str) -> CatalogPair:
        wanted = name.strip().lower()
        for pair in self.pairs:
            if pair.name.lower() == wanted:
                return pair
        names = ", ".join(p.name for p in self.pairs)
        raise UnknownPairError(f"no pair named '{name}' in the catalog; known pairs: {names}")


def catalog_path() -> Path:
    return paths.resources_dir() / "catalog.json"


def _require(entry: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in entry:
        raise CatalogError(f"the catalog is malformed: {where} has no '{key}'")
    value = entry[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise CatalogError(f"the catalog is malformed: {where}.{key} has the wrong type ({value!r})")
    return value


def _parse_model(key: str, entry: dict[str, Any]) -> CatalogModel:
    where = f"model '{key}'"
    repo_id = entry.get("repo_id")
    if repo_id is not None and (not isinstance(repo_id, str) or repo_id.count("/") != 1):
        raise CatalogError(f"the catalog is malformed: {where}.repo_id must look like 'owner/name'")
    filename = _require(entry, "filename", str, where)
    if not filename.endswith(".gguf"):
        raise CatalogError(f"the catalog is malformed: {where}.filename is not a .gguf file")
    sha256 = entry.get("sha256")
    if sha256 is not None and (not isinstance(sha256, str) or len(sha256) != 64):
        raise CatalogError(f"the catalog is malformed: {where}.sha256 is not 64 hex digits")
    return CatalogModel(
        key=key,
        name=_require(entry, "name", str, where),
        repo_id=repo_id,
        filename=filename,
        size_bytes=_require(entry, "size_bytes", int, where),
        quantization=_require(entry, "quantization", str, where),
        context_length=_require(entry, "context_length", int, where),
        license=_require(entry, "license", str, where),
        is_gated=_require(entry, "is_gated", bool, where),
        revision=str(entry.get("revision", "main")),
        sha256=sha256.lower() if sha256 else None,
    )


def parse_catalog(data: dict[str, Any]) -> Catalog:
    """Build a Catalog from the JSON structure; raise CatalogError naming the bad entry."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise CatalogError("the catalog is malformed: it has no 'models' table")
    models = {key: _parse_model(key, entry) for key, entry in data["models"].items()}
    pairs: list[CatalogPair] = []
    seen: set[str] = set()
    for i, entry in enumerate(data.get("pairs", [])):
        where = f"pair #{i + 1}"
        name = _require(entry, "name", str, where)
        if name in seen:
            raise CatalogError(f"the catalog is malformed: two pairs are named '{name}'")
        seen.add(name)
        target_key = _require(entry, "target", str, where)
        draft_key = _require(entry, "draft", str, where)
        if target_key not in models:
            raise CatalogError(f"the catalog is malformed: {where} names unknown target '{target_key}'")
        if draft_key != Speculation.NGRAM and draft_key not in models:
            raise CatalogError(f"the catalog is malformed: {where} names unknown draft '{draft_key}'")
        speedup_entry = entry.get("reported_speedup")
        speedup = None
        if speedup_entry is not None:
            factor = float(_require(speedup_entry, "factor", (int, float), where))
            speedup = ReportedSpeedup(
                factor, *(_require(speedup_entry, k, str, where) for k in ("by", "setup", "source"))
            )
        pairs.append(
            CatalogPair(
                name=name,
                title=_require(entry, "title", str, where),
                target=models[target_key],
                draft=None if draft_key == Speculation.NGRAM else models[draft_key],
                min_ram_bytes=_require(entry, "min_ram_bytes", int, where),
                is_gpu_recommended=bool(entry.get("is_gpu_recommended", False)),
                hardware=str(entry.get("hardware", "")),
                reported_speedup=speedup,
                speedup_note=entry.get("speedup_note"),
                good_for=str(entry.get("good_for", "")),
                is_embedded=bool(entry.get("is_embedded", False)),
                is_for_chat=bool(entry.get("for_chat", True)),
            )
        )
    incompatible = tuple(
        IncompatiblePair(*(_require(e, f.name, str, "incompatible entry") for f in fields(IncompatiblePair)))
        for e in data.get("incompatible", [])
    )
    return Catalog(tuple(models.values()), tuple(pairs), incompatible)


def load_catalog(path: Path | None = None) -> Catalog:
    path = path or catalog_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise CatalogError(f"the model catalog is missing: {path}") from e
    except json.JSONDecodeError as e:
        raise CatalogError(f"the model catalog {path} is not valid JSON: {e}") from e
    return parse_catalog(data)


# --- this machine -------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineInfo:
    """This computer as a model's fit reads it (the catalog's cards, the pair doctor, the picker)."""

    total_ram_bytes: int
    has_gpu: bool = False
    gpu_label: str = ""  # "NVIDIA GPU", "Apple Silicon", "" when none
    free_ram_bytes: int = 0  # what a model can have now without swapping
    vram_bytes: int = 0  # the accelerator's memory, 0 when unknown or not asked


def _ram_bytes(field: str, pages: str) -> int:
    """A /proc/meminfo line's bytes on Linux ("MemTotal", "MemAvailable"), elsewhere the pages
    sysconf counts ("SC_PHYS_PAGES", "SC_AVPHYS_PAGES"); 0 when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf(pages))
    except (AttributeError, ValueError, OSError):
        return 0


def total_ram_bytes() -> int:
    """Physical memory; 0 when unknown."""
    return _ram_bytes("MemTotal", "SC_PHYS_PAGES")


def available_ram_bytes() -> int:
    """Memory free for a new allocation now (MemAvailable on Linux: what can be had without
    swapping; free pages elsewhere); 0 when unknown."""
    return _ram_bytes("MemAvailable", "SC_AVPHYS_PAGES")


def detect_gpu() -> str:
    """A label for the accelerator llama.cpp could use here, or "" for none. Cheap: no driver calls."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "Apple Silicon"
    if Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidia0").exists():
        return "NVIDIA GPU"
    if Path("/dev/kfd").exists():
        return "AMD GPU"
    return ""


def gpu_memory_bytes(gpu_label: str, total_ram: int) -> int:
    """The memory of the accelerator detect_gpu() named, 0 when unknown. NVIDIA: nvidia-smi (2 s at
    most); AMD: the amdgpu driver's sysfs file; Apple Silicon: the share of the unified memory
    (total_ram) Metal lets one process wire by default (about two thirds)."""
    if gpu_label == "Apple Silicon":
        return int(total_ram * 2 / 3)
    if gpu_label == "NVIDIA GPU":
        import subprocess

        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=2,
                check=True,
            ).stdout
            return (
                max((int(line.strip()) for line in out.splitlines() if line.strip().isdigit()), default=0)
                * 2**20
            )
        except (OSError, subprocess.SubprocessError, ValueError):
            return 0
    if gpu_label == "AMD GPU":
        best = 0
        for f in Path("/sys/class/drm").glob("card*/device/mem_info_vram_total"):
            try:
                best = max(best, int(f.read_text().strip()))
            except (OSError, ValueError):
                continue
        return best
    return 0


def detect_machine(with_vram: bool = False) -> MachineInfo:
    """This computer now; with_vram: the accelerator's memory too (nvidia-smi takes a moment). Free
    memory is available_ram_bytes, as documents read it, else physical memory where that is unknown."""
    gpu, total = detect_gpu(), total_ram_bytes()
    vram = gpu_memory_bytes(gpu, total) if gpu and with_vram else 0
    return MachineInfo(total, bool(gpu), gpu, available_ram_bytes() or total, vram)


@dataclass(frozen=True)
class Fit:
    is_fitting: bool
    reason: str
    is_gpu_advised: bool = False  # fits, but the reported speedup needs a GPU this machine lacks


def fit_for(pair: CatalogPair, machine: MachineInfo) -> Fit:
    """Does the pair fit this machine? The reason reads well in a tooltip or a table cell."""
    if machine.total_ram_bytes and machine.total_ram_bytes < pair.min_ram_bytes:
        return Fit(
            False,
            f"needs {format_bytes(pair.min_ram_bytes)} of memory; "
            f"this machine has {format_bytes(machine.total_ram_bytes)}",
        )
    if pair.is_gpu_recommended and not machine.has_gpu:
        return Fit(True, "fits in memory; without a GPU expect little or no speedup from a draft model", True)
    if machine.has_gpu:
        return Fit(True, f"fits ({machine.gpu_label})")
    return Fit(True, "fits")


def format_eta(eta_s: float | None) -> str:
    """Time left as a person reads it: "2 min 05 s", "1 h 03 min", "?" when unknown."""
    if eta_s is None:
        return "?"
    seconds = int(eta_s + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def format_bytes(n_bytes: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n_bytes) < 1000:
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.1f} TB"


# --- local files ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalModel:
    """A .gguf file in the models folder with its header read, or the reason it cannot be read."""

    path: Path
    size_bytes: int
    info: GGUFInfo | None
    problem: str | None = None

    @property
    def name(self) -> str:
        return self.info.name if self.info else self.path.name


def scan_local_models(folder: Path | None = None) -> list[LocalModel]:
    # Partial downloads end in .part and never match; hidden files are editors' or the OS's.
    found = sorted((folder or paths.models_dir()).rglob("*.gguf"))
    return [local_model(path) for path in found if path.is_file() and not path.name.startswith(".")]


def check_model_file(path: Path) -> None:
    """Read a GGUF file's header now; raises ModelFileError with a sentence saying what is wrong
    (not a GGUF file, truncated, ...). A file offered for import is refused at once this way."""
    read_gguf_info(path)


def local_model(path: Path) -> LocalModel:
    """One .gguf file as the models page lists it (the model in use may live outside the folder)."""
    size = path.stat().st_size
    try:
        return LocalModel(path, size, read_gguf_info(path))
    except ModelFileError as e:
        return LocalModel(path, size, None, str(e))


def format_params(n_params: int | None) -> str:
    if not n_params:
        return "?"
    if n_params >= 1e9:
        return f"{n_params / 1e9:.1f}B"
    if n_params >= 1e6:
        return f"{n_params / 1e6:.0f}M"
    return f"{n_params / 1e3:.0f}K"


@dataclass(frozen=True)
class LocalDraft:
    """A model on this computer considered as a draft for a target (the pair doctor's hub files are
    pair_doctor.DraftCandidate); problem is the broken rule, or None."""

    path: Path
    name: str
    problem: str | None
    refusal: PairRefusal | None = None  # the broken vocabulary rule as data (None: unreadable or fine)

    @property
    def is_compatible(self) -> bool:
        return self.problem is None


def draft_choices(target: GGUFInfo, candidates: Iterable[LocalModel]) -> list[LocalDraft]:
    """Every other local model, each file once (a copy of the target is the target), compatible
    ones first, each with the rule it breaks if any."""
    choices: list[LocalDraft] = []
    seen = {file_identity(target.path) or target.path.resolve()}
    for model in candidates:
        if (identity := file_identity(model.path) or model.path.resolve()) in seen:
            continue
        seen.add(identity)
        if model.info is None:
            choices.append(LocalDraft(model.path, model.name, model.problem or "unreadable file"))
            continue
        try:
            check_pair(target, model.info)
        except IncompatiblePairError as e:
            choices.append(LocalDraft(model.path, model.name, str(e), e.refusal))
            continue
        choices.append(LocalDraft(model.path, model.name, None))
    choices.sort(key=lambda c: (not c.is_compatible, c.name.lower()))
    return choices


def import_model(source: Path, models_dir: Path | None = None) -> Path:
    """Check a GGUF file and copy it into <models>/imported/; a copy never appears half-written."""
    source = paths.user_path(source)
    read_gguf_info(source)  # raises ModelFileError with the reason (not GGUF, truncated, ...)
    root = (models_dir or paths.models_dir()).resolve()
    if source.resolve().is_relative_to(root):
        return source  # already in the library
    folder = root / "imported"
    folder.mkdir(parents=True, exist_ok=True)
    stem = source.name.removesuffix(".gguf")
    dest = folder / f"{stem}.gguf"
    n = 1
    while dest.exists():
        if dest.stat().st_size == source.stat().st_size:
            return dest  # imported before
        n += 1
        dest = folder / f"{stem}-{n}.gguf"
    free = shutil.disk_usage(folder).free
    if source.stat().st_size > free:
        raise ImportModelError(
            f"not enough free disk space in {folder} to import {source.name} "
            f"({format_bytes(source.stat().st_size)} needed, {format_bytes(free)} free)"
        )
    partial = dest.with_name(dest.name + ".part")
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, dest)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise ImportModelError(f"could not copy {source} into {folder}: {e.strerror or e}") from e
    return dest
