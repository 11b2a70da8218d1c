"""The pair doctor: find GGUF models on the hub, and judge a target and a draft before downloading.

Everything here works from GGUF headers (read over HTTP Range requests by
app.library.remote_gguf, or from local files) and the hub's JSON API (huggingface_hub's HfApi):
- search: GGUF repositories, their files grouped by quantisation, with sizes and a fit badge;
- check: architecture, parameters, quantisation, context length, chat template; the pairing
  verdict with llama.cpp's rule (engine.pairing) and both values; the memory the pair needs
  (both weights and both KV caches at the chosen context) against this machine's free memory;
- drafts: candidate drafts for a target (files beside it, smaller models of its family and
  organisation), each checked by header and ranked;
- an estimate of what speculation pays here, from this machine's memory bandwidth and measured
  verify costs. It is labelled an estimate: the chat's speed panel shows the measured figure.

No Qt: the CLI calls this directly, the window from a thread. Nothing here downloads weights.

Why this file is long: search, check and the report share the header reading and the verdicts (the
report's parts are walked once, report_parts, for the terminal's words here and the window's).
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Protocol
from urllib.parse import SplitResult, parse_qs, unquote, urlsplit

from app.library.catalog import MachineInfo, detect_machine, format_bytes, format_params
from app.library.documents import kv_bytes_per_token
from app.library.downloads import DEFAULT_TIMEOUT_S
from app.library.hub_search import HubGGUF, list_files, search
from app.library.measure import (
    MeasureProgress,
    PairFigures,
    describe_lines,
    figures_here,
    model_id,
    speculative_speedup,
)
from app.library.measure_run import measure_pair
from app.library.remote_gguf import CheckCancelled, RemoteHeader, read_local_header, read_remote_header
from app.library.standin import StandinPlan, plan_from_header
from app.paths import user_path
from app.store import (
    MIN_PAIR_REPLIES,
    PairMeasurement,
    model_key,
    model_key_of_file,
    read_pair_measurement,
    shard_names,
)
from engine.config import DEFAULT_CTX
from engine.errors import IncompatiblePairError, PairRefusal, TandemError
from engine.events import Speculation
from engine.gguf_info import known_architectures
from engine.pairing import check_pair

MAX_DRAFT_CHECKS = 6
# Acceptance rates assumed for a same-family draft (per drafted token): the estimate is a range.
ACCEPTANCE_LOW, ACCEPTANCE_HIGH = 0.6, 0.8
# A verify batch of n tokens costs this many single-token decodes, where this machine has not
# measured it yet (engine.costcache): about 0.2 a token more on a CPU (docs/findings.md: Q4_K_M 21 ms
# for 1 token, 32 ms for 4, 52 ms for 8), almost nothing on a GPU.
DEFAULT_VERIFY_SLOPE_CPU, DEFAULT_VERIFY_SLOPE_GPU = 0.2, 0.02
NGRAM_NOTE = "n-gram lookup: no second model, no extra memory; pays when replies repeat the conversation"

_SIZE_RE = re.compile(r"(?i)(?:^|[-_.])(\d+(?:\.\d+)?)([BM])(?=$|[-_.])")
_REF_RE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)/(?P<file>.+)$")


# --- references to a model file ----------------------------------------------------------------


@dataclass(frozen=True)
class ModelRef:
    """A GGUF file on the hub (repo_id, filename, revision) or on this computer (path)."""

    repo_id: str = ""
    filename: str = ""
    revision: str = "main"
    path: Path | None = None

    @property
    def is_local(self) -> bool:
        return self.path is not None

    @property
    def label(self) -> str:
        return str(self.path) if self.path is not None else f"{self.repo_id}/{self.filename}"


def parse_model_ref(text: str) -> ModelRef:
    """`owner/repo/file.gguf`, a hub address (https://huggingface.co/owner/repo/blob/main/file.gguf),
    `tandem://open_from_hf?model=owner/repo&file=file.gguf`, or a local path."""
    text = text.strip()
    if not text:
        raise TandemError("give a model: owner/repo/file.gguf on the hub, or a path to a .gguf file")
    if len(text) > MAX_REF_CHARS:
        raise TandemError(
            f"that model reference is {len(text):,} characters long; a file on the hub or on this "
            f"computer is named in at most {MAX_REF_CHARS:,}"
        )
    if text.startswith("tandem://"):
        return parse_open_url(text)
    if text.startswith(("http://", "https://")):
        parts = [unquote(p) for p in _split(text).path.strip("/").split("/")]
        if len(parts) >= 5 and parts[2] in ("blob", "resolve"):
            return ModelRef("/".join(parts[:2]), "/".join(parts[4:]), parts[3])
        raise TandemError(
            f"{text} is not the address of a file on the hub (…/owner/repo/blob/main/FILE.gguf)"
        )
    path = user_path(text)
    if _exists(path) or text.startswith(("/", "./", "../", "~")) or "\\" in text:
        return ModelRef(path=path)
    m = _REF_RE.match(text)
    if m is None:
        raise TandemError(
            f"'{text}' names no file: give owner/repo/FILE.gguf (the file in the repository), "
            "or a path to a .gguf file"
        )
    return ModelRef(m["repo"], m["file"])


def _exists(path: Path) -> bool:
    """Path.exists, False where the name cannot be a file here (too long, a NUL byte)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


MAX_REF_CHARS = 4096  # a model reference (a path, a hub address, a link) longer than this is refused
# A file in a hub repository as a link may name it: .gguf, plain names, folders without "." or "..".
_HUB_FILE_RE = re.compile(r"(?:[A-Za-z0-9_][\w.-]*/){0,8}[A-Za-z0-9_][\w.+-]*\.gguf", re.IGNORECASE)


def parse_open_url(url: str) -> ModelRef:
    """tandem://open_from_hf?model=OWNER/REPO&file=FILE, as the hub's "Use this model" opens it.
    A link only ever names a .gguf file in a hub repository: never a local path, never another site."""
    if len(url) > MAX_REF_CHARS:
        raise TandemError(
            f"that link is {len(url):,} characters long; Tandem opens links of up to {MAX_REF_CHARS:,}"
        )
    parts = _split(url)
    action = (parts.netloc or parts.path.strip("/")).lower()
    if parts.scheme != "tandem" or action != "open_from_hf":
        raise TandemError(
            f"Tandem does not know the link {url}; it opens tandem://open_from_hf?model=…&file=…"
        )
    query = parse_qs(parts.query)
    model = (query.get("model") or [""])[0].strip().strip("/")
    filename = (query.get("file") or [""])[0].strip()
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", model) or ".." in model:
        raise TandemError(f"the link {url} names no repository (model=OWNER/REPO)")
    if filename and (not _HUB_FILE_RE.fullmatch(filename) or ".." in filename.split("/")):
        raise TandemError(f"the link {url} names no .gguf file in that repository (file=NAME.gguf)")
    return ModelRef(model, filename)


def _split(url: str) -> SplitResult:
    """urlsplit, a malformed address (an unclosed "[" of an IPv6 host: urlsplit raises) said in a sentence."""
    try:
        return urlsplit(url)
    except ValueError:
        raise TandemError(f"{url} is not an address Tandem can read: its host part is malformed") from None


def params_in_name(name: str) -> float | None:
    """Billions of parameters a name announces ("Qwen2.5-7B" -> 7.0, "SmolLM2-135M" -> 0.135)."""
    found = _SIZE_RE.findall(name)
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1.0 if unit.upper() == "B" else 0.001)


def family_of(name: str) -> str:
    """The family part of a repository or model name: what comes before its size ("Qwen2.5")."""
    base = re.sub(r"(?i)[-_.]gguf$", "", name.rsplit("/", 1)[-1])
    m = _SIZE_RE.search(base)
    family = base[: m.start()] if m else base
    return family.strip("-_. ") or base


# --- this machine --------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def memory_bandwidth_bytes_per_s() -> float:
    """This machine's memory bandwidth, measured once: the best of a few 64 MB copies.
    Decoding one token reads every weight once, so it bounds tokens per second."""
    import numpy as np

    a = np.ones(8 * 2**20, dtype=np.float64)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best if best > 0 else 10e9  # read + write


def verify_cost_ratios() -> dict[int, float]:
    """What a verify batch of n tokens costs, in single-token decodes, as measured by Tandem's
    engine on this machine (the cost cache: median over every model measured); empty if none."""
    import json

    from app.paths import cost_cache_dir

    by_n: dict[int, list[float]] = {}
    try:
        files = list(Path(cost_cache_dir()).glob("*.json"))[:200]
    except OSError:
        return {}
    for f in files:
        try:
            step_s = json.loads(f.read_text(encoding="utf-8")).get("step_s", {})
            one = float(step_s.get("1", 0))
            if one <= 0:
                continue
            for n, s in step_s.items():
                if str(n).isdigit() and 1 < int(n) <= 16 and float(s) > 0:
                    by_n.setdefault(int(n), []).append(float(s) / one)
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    return {n: statistics.median(v) for n, v in by_n.items()}


# --- what one file is -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelFacts(RemoteHeader):
    """What the header of one file says (as read: fetched_bytes 0 for a local file), as a person
    reads it, and which file it is."""

    ref: ModelRef = ModelRef()

    def kv_bytes(self, n_ctx: int) -> int:
        """K and V for n_ctx tokens over every layer, at llama.cpp's default F16 cache type."""
        return kv_bytes_per_token(self.info.metadata, self.info.architecture) * n_ctx


def read_facts(
    ref: ModelRef, *, timeout_s: float = DEFAULT_TIMEOUT_S, cancel: threading.Event | None = None
) -> ModelFacts:
    """Read one file's header: from disk, or from the hub without downloading the file."""
    if ref.path is not None:
        return ModelFacts(**vars(read_local_header(ref.path)), ref=ref)
    if not ref.filename:
        raise TandemError(f"give the file too: {ref.repo_id}/FILE.gguf (`tandem models search` lists them)")
    header = read_remote_header(ref.repo_id, ref.filename, ref.revision, timeout_s=timeout_s, cancel=cancel)
    facts = ModelFacts(**vars(header), ref=ref)
    if len(shard_names(ref.filename)) > 1:
        # A split model: its first part holds the header; the weights are all the parts.
        listing = list_files(ref.repo_id, ref.revision, timeout_s=timeout_s, cancel=cancel)
        whole = next((f for f in listing if f.filename == ref.filename), None)
        if whole is not None and whole.size_bytes > facts.size_bytes:
            facts = replace(facts, size_bytes=whole.size_bytes)
    return facts


# --- the verdicts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryNeed:
    n_ctx: int
    weights_target_bytes: int
    kv_target_bytes: int
    weights_draft_bytes: int = 0
    kv_draft_bytes: int = 0
    overhead_bytes: int = 0  # compute buffers, estimated

    @property
    def total_bytes(self) -> int:
        return (
            self.weights_target_bytes
            + self.kv_target_bytes
            + self.weights_draft_bytes
            + self.kv_draft_bytes
            + self.overhead_bytes
        )


class FitKind:
    FITS = "fits"
    TIGHT = "tight"  # fits this machine's memory, not what is free now
    TOO_LARGE = "too large"


@dataclass(frozen=True)
class Fit:
    kind: str  # a FitKind value
    need_bytes: int
    free_bytes: int
    total_bytes: int
    vram_bytes: int = 0

    @property
    def is_fitting(self) -> bool:
        return self.kind == FitKind.FITS


def _overhead(facts: ModelFacts) -> int:
    # llama.cpp's compute and output buffers: a few tens of MB for small models, more with a large
    # vocabulary (the output row) and a wide model. A rough allowance, labelled as an estimate.
    n_vocab = facts.info.n_vocab
    n_embd = facts.info.metadata.get(f"{facts.info.architecture}.embedding_length")
    n_embd = n_embd if isinstance(n_embd, int) and not isinstance(n_embd, bool) else 0
    return 32 * 2**20 + 512 * (n_vocab + 16 * n_embd) * 4 // 8


def memory_need(target: ModelFacts, draft: ModelFacts | None, n_ctx: int) -> MemoryNeed:
    return MemoryNeed(
        n_ctx=n_ctx,
        weights_target_bytes=target.size_bytes,
        kv_target_bytes=target.kv_bytes(n_ctx),
        weights_draft_bytes=draft.size_bytes if draft else 0,
        kv_draft_bytes=draft.kv_bytes(n_ctx) if draft else 0,
        overhead_bytes=_overhead(target) + (_overhead(draft) if draft else 0),
    )


def fit_of(need_bytes: int, machine: MachineInfo) -> Fit:
    if need_bytes <= machine.free_ram_bytes or (machine.vram_bytes and need_bytes <= machine.vram_bytes):
        kind = FitKind.FITS
    elif need_bytes <= machine.total_ram_bytes:
        kind = FitKind.TIGHT
    else:
        kind = FitKind.TOO_LARGE
    return Fit(kind, need_bytes, machine.free_ram_bytes, machine.total_ram_bytes, machine.vram_bytes)


def file_fit(size_bytes: int, machine: MachineInfo) -> Fit:
    """A search result's badge, from its size alone (weights, a small KV cache and buffers)."""
    return fit_of(int(size_bytes * 1.1) + 256 * 2**20, machine)


def describe_memory(need: MemoryNeed) -> str:
    """ "memory at 4,096 tokens of context: target 4.4 GB + KV cache 1.1 GB, ..., buffers 0.1 GB"."""
    m = need
    parts = [f"target {format_bytes(m.weights_target_bytes)} + KV cache {format_bytes(m.kv_target_bytes)}"]
    if m.weights_draft_bytes:
        parts.append(
            f"draft {format_bytes(m.weights_draft_bytes)} + KV cache {format_bytes(m.kv_draft_bytes)}"
        )
    parts.append(f"buffers {format_bytes(m.overhead_bytes)}")
    return f"memory at {m.n_ctx:,} tokens of context: {', '.join(parts)}"


def describe_fit(fit: Fit) -> str:
    need, free = format_bytes(fit.need_bytes), format_bytes(fit.free_bytes)
    gpu = f"; the GPU has {format_bytes(fit.vram_bytes)}" if fit.vram_bytes else ""
    if fit.kind == FitKind.FITS:
        return f"fits: needs about {need}, {free} free{gpu}"
    if fit.kind == FitKind.TIGHT:
        return (
            f"tight: needs about {need}, only {free} free now of {format_bytes(fit.total_bytes)}{gpu}; "
            "close other programs first"
        )
    return f"too large: needs about {need}, this machine has {format_bytes(fit.total_bytes)}{gpu}"


@dataclass(frozen=True)
class SpeedEstimate:
    """What speculation should pay here, from sizes and this machine's costs. An estimate."""

    low: float  # speedup over plain decoding at ACCEPTANCE_LOW
    high: float  # at ACCEPTANCE_HIGH
    draft_len: int  # the draft length that pays most at the middle acceptance
    plain_tokens_per_s: float  # the target alone: measured here, or bounded by memory bandwidth
    is_verify_measured: bool  # verify costs from this machine's cost cache, or the default
    is_plain_measured: bool = False  # plain_tokens_per_s measured by the chat (a local target)

    def describe(self) -> str:
        """The estimate, labelled so, with what it stands on and what replaces it."""
        span = f"about {self.low:.1f}–{self.high:.1f}×"
        pays = (
            f"little or nothing to gain on this computer ({span})" if self.high < 1.05 else f"{span} faster"
        )
        k = self.draft_len
        checking = "measured here" if self.is_verify_measured else "typical figures"
        text = (
            f"Estimate: {pays} with drafts of {k} token{'s' if k > 1 else ''}, "
            f"{ACCEPTANCE_LOW:.0%}–{ACCEPTANCE_HIGH:.0%} of them accepted, from the two sizes, this "
            f"computer's memory speed and what checking several tokens at once costs ({checking})"
        )
        if self.is_plain_measured:
            low, high = self.plain_tokens_per_s * self.low, self.plain_tokens_per_s * self.high
            text += f" (about {low:.0f}–{high:.0f} tokens/s instead of the {self.plain_tokens_per_s:.0f} measured here)"
        return text + (
            f". After {MIN_PAIR_REPLIES} replies with this pair in the chat, the measured figure replaces it."
        )


def estimate_speedup(
    target_bytes: int,
    draft_bytes: int,
    *,
    has_gpu: bool = False,
    measured_plain_tokens_per_s: float | None = None,
) -> SpeedEstimate:
    """Decoding is bound by reading the weights: a draft token costs draft/target of a target
    token (measure.speculative_speedup)."""
    measured = verify_cost_ratios()
    slope = DEFAULT_VERIFY_SLOPE_GPU if has_gpu else DEFAULT_VERIFY_SLOPE_CPU

    def verify(n: int) -> float:
        return measured.get(n, 1.0 + slope * (n - 1))

    c = draft_bytes / target_bytes if target_bytes else 1.0
    mid = (ACCEPTANCE_LOW + ACCEPTANCE_HIGH) / 2
    best_k = max(range(1, 9), key=lambda k: speculative_speedup(mid, k, c, verify))
    bandwidth = memory_bandwidth_bytes_per_s()
    return SpeedEstimate(
        low=speculative_speedup(ACCEPTANCE_LOW, best_k, c, verify),
        high=speculative_speedup(ACCEPTANCE_HIGH, best_k, c, verify),
        draft_len=best_k,
        plain_tokens_per_s=measured_plain_tokens_per_s or (bandwidth / target_bytes if target_bytes else 0.0),
        is_verify_measured=bool(measured),
        is_plain_measured=bool(measured_plain_tokens_per_s),
    )


def measured_plain_speed(ref: ModelRef) -> float | None:
    """The plain decoding speed the chat measured for a local target on this machine, if any
    (kept in the settings by the speed panel's baseline). A hub file already downloaded counts."""
    path = ref.path
    if path is None:
        from app.library.downloads import local_path_for

        path = local_path_for(ref.repo_id, ref.filename)
        if not path.is_file():
            return None
    try:
        from app.settings import load_settings

        speeds = load_settings().plain_tokens_per_s
    except Exception:  # unreadable settings: no measurement, not a failed check
        return None
    for key in (str(path), str(user_path(path).resolve())):
        if speeds.get(key):
            return float(speeds[key])
    return None


def facts_key(facts: ModelFacts) -> str | None:
    """The model as the chat's pair measurements know it (app.store.model_key)."""
    if facts.ref.path is not None:
        return model_key_of_file(facts.ref.path)
    return model_key(facts.ref.filename, facts.size_bytes)


def measured_pair(target: ModelFacts, draft: ModelFacts | None) -> PairMeasurement | None:
    """What replies with this pair measured on this machine (the chat keeps each reply's
    speedup per pair in its store), or None before enough replies. draft None: n-gram lookup."""
    target_key = facts_key(target)
    drafter_key = facts_key(draft) if draft is not None else Speculation.NGRAM
    if target_key is None or drafter_key is None:
        return None
    return read_pair_measurement(target_key, drafter_key)


def describe_measured(m: PairMeasurement) -> str:
    """ "measured here: 2.1× faster over 5 replies" (each reply's headline figure, the median): the
    figure that replaces the estimate."""
    how = f"{m.speedup:.1f}× faster" if m.speedup >= 1 else f"{1 / m.speedup:.1f}× slower"
    basis = " (against the engine's estimate of plain speed)" if m.is_plain_estimate else ""
    return f"measured here: {how} over {m.n_replies} replies{basis}"


# --- a check --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckReport:
    target: ModelFacts
    draft: ModelFacts | None
    refusal: PairRefusal | None  # llama.cpp's rule the draft breaks (None: they pair, or no draft)
    memory: MemoryNeed
    machine: MachineInfo
    fit: Fit
    estimate: SpeedEstimate | None  # None without a compatible draft
    # What replies measured here with the pair (with the target alone: with n-gram lookup).
    measured: PairMeasurement | None = None
    # What stand-ins of these models measured here before (app.library.measure), if they were.
    here: PairFigures | None = None


def check(
    target: ModelRef,
    draft: ModelRef | None = None,
    *,
    n_ctx: int = DEFAULT_CTX,
    machine: MachineInfo | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> CheckReport:
    """Read the target's (and the draft's) header and judge them. Raises TandemError subclasses."""
    if n_ctx <= 0:
        raise TandemError(f"the context must be a positive number of tokens, not {n_ctx}")
    if draft is None:
        facts_t, facts_d = read_facts(target, timeout_s=timeout_s, cancel=cancel), None
    else:
        # Both headers at once: the slow part is the network.
        with ThreadPoolExecutor(2) as pool:
            ft = pool.submit(read_facts, target, timeout_s=timeout_s, cancel=cancel)
            fd = pool.submit(read_facts, draft, timeout_s=timeout_s, cancel=cancel)
            facts_t, facts_d = ft.result(), fd.result()
    report = _judge_pair(
        facts_t, facts_d, n_ctx, machine or detect_machine(with_vram=True), measured_plain_speed(target)
    )
    paired = report.draft if report.refusal is None else None
    here = figures_here(facts_model_id(facts_t), facts_model_id(paired) if paired is not None else None)
    return replace(report, here=here)


def _judge_pair(
    target: ModelFacts,
    draft: ModelFacts | None,
    n_ctx: int,
    machine: MachineInfo,
    plain: float | None = None,
) -> CheckReport:
    """Headers read already, judged (a check, or a draft found for it): the verdict, memory and fit,
    the estimate (plain: the target's speed the chat measured) and what replies measured here."""
    need = memory_need(target, draft, n_ctx)
    refusal = None
    if draft is not None:
        try:
            check_pair(target.info, draft.info)
        except IncompatiblePairError as e:
            refusal = e.refusal
    is_paired = refusal is None
    estimate = None
    if draft is not None and is_paired:
        estimate = estimate_speedup(
            target.size_bytes, draft.size_bytes, has_gpu=machine.has_gpu, measured_plain_tokens_per_s=plain
        )
    measured = measured_pair(target, draft) if is_paired else None
    return CheckReport(
        target, draft, refusal, need, machine, fit_of(need.total_bytes, machine), estimate, measured
    )


# --- measuring on stand-ins ---------------------------------------------------------------------


def facts_model_id(facts: ModelFacts) -> str:
    """The model as measurements on stand-ins know it (app.library.measure.model_id)."""
    return model_id(facts.ref.repo_id, str(facts.ref.path or facts.ref.filename))


def standin_plan(facts: ModelFacts) -> StandinPlan:
    """A stand-in of this file: its header (read already, nothing more is fetched) with random weights."""
    label = facts.ref.path.name if facts.ref.path is not None else facts.ref.filename
    return plan_from_header(label, facts.header_bytes, facts.info)


def measure_here(
    report: CheckReport,
    *,
    cancel: threading.Event | None = None,
    on_progress: Callable[[MeasureProgress], None] | None = None,
) -> PairFigures:
    """Time stand-ins of the checked target (and of its draft, where they pair) on this computer,
    before any weight is downloaded. Raises StandinError (refused: one sentence) or MeasureCancelled."""
    target = (facts_model_id(report.target), standin_plan(report.target))
    draft = None
    if report.draft is not None and report.refusal is None:
        draft = (facts_model_id(report.draft), standin_plan(report.draft))
    return measure_pair(target, draft, cancel=cancel, on_progress=on_progress)


def describe_model(facts: ModelFacts) -> str:
    """What one file's header says, in one line (the terminal's and the window's)."""
    info, size = facts.info, format_bytes(facts.size_bytes)
    ctx = f"{info.context_length:,} tokens" if info.context_length else "unknown"
    known = "" if info.architecture in known_architectures() else " (this version of Tandem cannot run it)"
    template = "has a chat template" if info.chat_template is not None else "no chat template (a base model)"
    read = f"read {format_bytes(facts.fetched_bytes)} of {size}" if facts.fetched_bytes else f"local, {size}"
    return (
        f"architecture {info.architecture}{known}, {format_params(info.n_params)} parameters, "
        f"{info.quantization}, context {ctx}, {template}; vocabulary {info.vocab_type or '?'}, "
        f"{info.n_vocab:,} tokens ({read})"
    )


def describe_verdict(refusal: PairRefusal | None) -> str:
    """Whether a draft pairs (refusal: the rule it breaks; None: it pairs), in one line."""
    if refusal is None:
        return "pairs: the draft passes every llama.cpp vocabulary rule"
    return (
        f"does not pair: llama.cpp's rule on the {refusal.rule} fails "
        f"(target: {refusal.target_value!r}, draft: {refusal.draft_value!r})"
    )


class ReportWords(Protocol):
    """What the reader of a check is told of each part, in its own words and markup: the terminal's
    lines (TerminalWords) or the window's rich text (ui/models/pair_doctor_panel.py); "" says nothing."""

    def model(self, role: str, facts: ModelFacts) -> str: ...
    def verdict(self, refusal: PairRefusal | None) -> str: ...
    def memory(self, need: MemoryNeed) -> str: ...
    def fit(self, fit: Fit) -> str: ...
    def measured(self, measured: PairMeasurement, with_draft: bool) -> str: ...
    def estimate(self, estimate: SpeedEstimate) -> str: ...
    def here(self, figures: PairFigures) -> str: ...


def report_parts(report: CheckReport, words: ReportWords) -> list[str]:
    """The check's report, written once for every reader: each model's facts, the verdict, memory
    and fit, then what replies with the pair measured here (or, where stand-ins measured nothing,
    the estimate; with the target alone, what n-gram lookup measured), then what stand-ins did."""
    roles = (("target", report.target), ("draft", report.draft))
    parts = [words.model(role, facts) for role, facts in roles if facts is not None]
    if report.draft is not None:
        parts.append(words.verdict(report.refusal))
    parts += [words.memory(report.memory), words.fit(report.fit)]
    if report.draft is not None and report.measured is not None:
        parts.append(words.measured(report.measured, with_draft=True))
    elif report.estimate is not None and report.here is None:  # measured on stand-ins: no guess
        parts.append(words.estimate(report.estimate))
    elif report.draft is None and report.measured is not None:
        parts.append(words.measured(report.measured, with_draft=False))
    if report.here is not None:
        parts.append(words.here(report.here))
    return [part for part in parts if part]


class TerminalWords:
    """The check as plain lines, for the terminal (`tandem models check`)."""

    def model(self, role: str, facts: ModelFacts) -> str:
        return f"{role}: {facts.ref.label}\n  {describe_model(facts)}"

    def verdict(self, refusal: PairRefusal | None) -> str:
        return "pairing: " + describe_verdict(refusal)

    def memory(self, need: MemoryNeed) -> str:
        return describe_memory(need)

    def fit(self, fit: Fit) -> str:
        return "fit: " + describe_fit(fit)

    def measured(self, measured: PairMeasurement, with_draft: bool) -> str:
        # n-gram lookup's measured figure stands in the drafts list (app/cli/cli_doctor.py)
        return sentence(describe_measured(measured)) + "." if with_draft else ""

    def estimate(self, estimate: SpeedEstimate) -> str:
        return estimate.describe()

    def here(self, figures: PairFigures) -> str:
        return "\n".join(describe_lines(figures))


def report_lines(report: CheckReport) -> list[str]:
    """The check as plain lines, for the terminal."""
    return [line for part in report_parts(report, TerminalWords()) for line in part.splitlines()]


def sentence(text: str) -> str:
    """The text with its first letter upper-cased (a sentence of the report)."""
    return text[:1].upper() + text[1:]


# --- drafts for a target ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftCandidate:
    file: HubGGUF
    facts: ModelFacts | None = None
    refusal: PairRefusal | None = None  # the rule it breaks (None: it pairs, or was not read)
    fit: Fit | None = None
    estimate: SpeedEstimate | None = None
    problem: str = ""  # why its header could not be read
    measured: PairMeasurement | None = None  # what replies with it measured here

    @property
    def is_usable(self) -> bool:
        return self.refusal is None and self.fit is not None and self.fit.kind != FitKind.TOO_LARGE


_PREFERRED_DRAFT_QUANTS = ("Q8_0", "Q4_K_M", "Q4_0", "Q5_K_M", "Q6_K", "F16", "BF16")


def _pick_draft_file(files: Iterable[HubGGUF]) -> HubGGUF | None:
    files = [f for f in files if f.n_shards == 1]
    preferred = (f for quant in _PREFERRED_DRAFT_QUANTS for f in files if f.quantization == quant)
    return next(preferred, None) or min(files, key=lambda f: f.size_bytes, default=None)


def find_drafts(
    target: ModelRef,
    target_facts: ModelFacts,
    *,
    n_ctx: int = DEFAULT_CTX,
    machine: MachineInfo | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> list[DraftCandidate]:
    """Candidate drafts on the hub for a target, each checked by header, the best first.

    Candidates: GGUF files beside the target whose name says draft, and smaller models of the
    target's family from the same organisation (the same tokenizer is likeliest there). Ranked:
    those that pair and fit first, by estimated speedup; then those that pair but do not fit;
    then those that do not pair, with the rule.
    """
    machine = machine or detect_machine(with_vram=True)
    name = target.repo_id or str(target_facts.info.metadata.get("general.basename") or target_facts.info.name)
    family = family_of(name)
    target_b = params_in_name(target.repo_id or name) or target_facts.info.n_params / 1e9
    offered: dict[tuple[str, str], HubGGUF] = {}
    if target.repo_id:
        for f in list_files(target.repo_id, target.revision, timeout_s=timeout_s, cancel=cancel):
            if f.filename != target.filename and "draft" in f.filename.lower():
                offered[(f.repo_id, f.filename)] = f
    owner = target.repo_id.split("/")[0] if target.repo_id else None
    repos = (
        search(family, author=owner, limit=20, with_files=False, timeout_s=timeout_s, cancel=cancel)
        if family
        else []
    )
    smaller = [
        r for r in repos if r.repo_id != target.repo_id and (params_in_name(r.repo_id) or 1e9) < target_b
    ]
    smaller.sort(key=lambda r: params_in_name(r.repo_id) or 0)
    for repo in smaller[:MAX_DRAFT_CHECKS]:
        picked = _pick_draft_file(list_files(repo.repo_id, timeout_s=timeout_s, cancel=cancel))
        if picked is not None:
            offered.setdefault((picked.repo_id, picked.filename), picked)

    def judge(f: HubGGUF) -> DraftCandidate:
        try:
            facts = read_facts(ModelRef(f.repo_id, f.filename), timeout_s=timeout_s, cancel=cancel)
        except CheckCancelled:
            raise
        except TandemError as e:
            return DraftCandidate(f, problem=str(e))
        r = _judge_pair(target_facts, facts, n_ctx, machine)
        return DraftCandidate(f, facts, r.refusal, r.fit, r.estimate, measured=r.measured)

    with ThreadPoolExecutor(4) as pool:
        judged = list(pool.map(judge, list(offered.values())[:MAX_DRAFT_CHECKS]))

    def rank(c: DraftCandidate) -> tuple[int, float]:
        if c.is_usable:
            pays = c.measured.speedup if c.measured else c.estimate.high if c.estimate else 0.0
            return (0 if c.fit and c.fit.is_fitting else 1, -pays)
        if c.facts is not None and c.refusal is None:
            return (2, 0.0)
        return (3 if c.refusal is not None else 4, 0.0)

    return sorted(judged, key=rank)


def describe_candidate(c: DraftCandidate) -> str:
    """A draft found for a target, in one line (the terminal's list and the window's)."""
    label = f"{c.file.repo_id}/{c.file.filename} ({format_bytes(c.file.size_bytes)})"
    if c.problem:
        return f"{label}: could not be checked: {c.problem}"
    assert c.facts is not None
    if c.refusal is not None:
        return f"{label}: {describe_verdict(c.refusal)}"
    fit = f"; {describe_fit(c.fit)}" if c.fit else ""
    if c.measured is not None:
        fit += f"; {describe_measured(c.measured)}"
    elif c.estimate is not None:
        fit += f"; estimate {c.estimate.low:.1f}–{c.estimate.high:.1f}×"
    return f"{label}: pairs, {format_params(c.facts.info.n_params)} parameters{fit}"
