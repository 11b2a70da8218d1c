"""What a pair pays on this computer, measured before the download, on stand-ins (the timing of
their verify batches at MEASURE_SIZES is app/library/measure_run.py's). From those costs:
- plain tokens/s here: 1 / t(1);
- the n-gram ceiling on copy work: max over n of n·t(1)/t(n), what drafting from the text
  could reach if every drafted token were accepted (the bench's ceiling), and the copy
  speed-up the real draft-length controller reaches on the kept copy replies (engine.replay);
- the draft model: the speed-up at the acceptance such pairs usually reach (ACCEPTANCE, with its
  source), at the best draft length, or that it does not pay here and why.

Figures are kept per machine in the user's data folder (measured-here.json), keyed by model,
so the catalog's cards and the speed-up choice can say what this computer will do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app import paths
from engine.errors import TandemError

# Verify batch sizes timed on the target: 1 (a plain step), the small drafts a draft model
# makes (2-8 rows; 7 and 9 read between their neighbours), and the long n-gram drafts of copy work (16, 32, 64: CPU kernels work in
# tiles of 8 and 16, so the tile sizes are the cheap ones a copy uses).
MEASURE_SIZES = (1, 2, 3, 4, 5, 6, 8, 16, 32, 64)
# The text before the batches (a reply's steps run after a prompt). Its attention is a small part
# of a batch of a real-size model (64 rows of a Qwen2.5 7B attending to 512 earlier tokens: about
# 13 GFLOP against 970 for its weights), and reading it costs a 7B one 64-row batch, about 3.4 s
# on 2 cores: 64 tokens.
CONTEXT_TOKENS = 64
REPEATS_SMALL, REPEATS_LARGE = 3, 2  # the fastest of: a busy machine only ever slows one down
DRAFT_REPEATS = 5
# What a same-family draft model usually has accepted, per drafted token, and where that is from.
ACCEPTANCE = 0.72
ACCEPTANCE_SOURCE = (
    "72% of drafted tokens accepted by Llama 3.1 8B from Llama 3.2 1B, 5 drafted tokens, "
    "llama.cpp issue #5877 (https://github.com/ggml-org/llama.cpp/issues/5877)"
)
ACCEPTANCE_SOURCE_WORDS = "as Llama 3.1 8B accepted from Llama 3.2 1B in llama.cpp issue #5877"
PAYS_AT = 1.05  # below this the second model is not worth its memory and its load
MAX_DRAFT_LEN = 8
FORMAT = 1


class MeasureCancelled(TandemError):
    pass


@dataclass(frozen=True)
class MeasureProgress:
    fraction: float  # 0..1 of the whole measurement
    stage: str  # "write", "load", "time"
    role: str  # "target", "draft"
    label: str  # the model the stand-in stands for
    batch: int = 0  # the batch size just timed (stage "time")


@dataclass(frozen=True)
class MeasuredCosts:
    """One model's costs measured here on its stand-in: t(n) in ms for a verify batch of n rows."""

    model: str  # model_id: owner/repo/FILE.gguf, or a file name
    t_ms: dict[int, float]
    size_bytes: int
    machine: str
    measured_at: str
    n_threads: int
    copy_speedup: float | None = None  # kept with the costs: a replay takes a moment

    @property
    def plain_tokens_per_s(self) -> float:
        return 1000.0 / self.t_ms[1]

    @property
    def ceiling(self) -> float:
        return max(n * self.t_ms[1] / t for n, t in self.t_ms.items())

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),  # its fields in order, these two rounded
            "t_ms": {str(n): round(ms, 5) for n, ms in sorted(self.t_ms.items())},
            "copy_speedup": None if self.copy_speedup is None else round(self.copy_speedup, 3),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> MeasuredCosts:
        t_ms = {int(n): float(ms) for n, ms in data["t_ms"].items()}
        if 1 not in t_ms or not all(0 < ms < 600_000 for ms in t_ms.values()):
            raise ValueError("no single-token cost")
        return MeasuredCosts(
            str(data["model"]),
            t_ms,
            int(data.get("size_bytes", 0)),
            str(data.get("machine", "")),
            str(data.get("measured_at", "")),
            int(data.get("n_threads", 0)),
            float(data["copy_speedup"]) if isinstance(data.get("copy_speedup"), int | float) else None,
        )


@dataclass(frozen=True)
class DraftVerdict:
    """What a draft model pays at ACCEPTANCE: the best speed-up over draft lengths 1-8, and the
    costs that decide it (a draft token, and a batch checking k+1 tokens, in plain steps)."""

    speedup: float
    draft_len: int
    draft_step_ratio: float  # a drafted token's cost / a plain step of the target
    verify_ratio: float  # checking draft_len+1 tokens / a plain step of the target
    acceptance: float = ACCEPTANCE

    @property
    def pays(self) -> bool:
        return self.speedup >= PAYS_AT


@dataclass(frozen=True)
class PairFigures:
    """What this computer will do with a target (and a draft), from measured stand-in costs."""

    target: MeasuredCosts
    draft: MeasuredCosts | None = None
    copy_speedup: float | None = None  # the controller on the kept copy replies
    verdict: DraftVerdict | None = None


def speculative_speedup(a: float, k: int, draft_cost: float, verify: Callable[[int], float]) -> float:
    """The speed-up over plain steps of a step that drafts k tokens (each draft_cost of a plain
    step), then checks k+1 in one batch (verify(k+1) plain steps): with acceptance a per token it
    yields (1 - a^(k+1)) / (1 - a) tokens (the speculative decoding paper's expectation)."""
    tokens = (1 - a ** (k + 1)) / (1 - a)
    return tokens / (k * draft_cost + verify(k + 1))


def draft_verdict(target: MeasuredCosts, draft: MeasuredCosts) -> DraftVerdict:
    """What the draft pays with this target (single-token draft steps) at ACCEPTANCE, at the best
    draft length."""
    from engine.replay import CostCurve

    t1, curve = target.t_ms[1], CostCurve(target.model, target.t_ms)
    c = draft.t_ms[1] / t1

    def verify(n: int) -> float:
        return curve.verify_s(n) * 1000 / t1

    best = max(range(1, MAX_DRAFT_LEN + 1), key=lambda k: speculative_speedup(ACCEPTANCE, k, c, verify))
    return DraftVerdict(speculative_speedup(ACCEPTANCE, best, c, verify), best, c, verify(best + 1))


def copy_speedup(target: MeasuredCosts) -> float | None:
    """The decode speed-up the draft-length controller reaches on the kept copy replies
    (resources/replay/traces) with this machine's measured costs, seeded as the app seeds it
    (engine.replay.calibrated): what "copy work" gains here."""
    from app.paths import resources_dir
    from engine.replay import CostCurve, calibrated, load_traces, replay

    try:
        traces = load_traces(resources_dir() / "replay" / "traces")
    except (OSError, ValueError, KeyError):
        return None
    curve = CostCurve(target.model, dict(target.t_ms))
    warm = next((t for t in traces if t.name == "warm-up"), None)
    first_seed = replay(warm, curve)[1].export() if warm is not None else None
    seed = calibrated(first_seed, curve)
    speedups = [replay(t, curve, seed)[0].speedup for t in traces if t is not warm]
    return statistics.median(speedups) if speedups else None


def figures(target: MeasuredCosts, draft: MeasuredCosts | None = None) -> PairFigures:
    """The figures of measured costs: the copy speed-up kept with the target's (measure_pair
    replays it once), the draft's verdict."""
    verdict = draft_verdict(target, draft) if draft is not None else None
    return PairFigures(target, draft, target.copy_speedup, verdict)


# --- this machine, and where figures are kept ----------------------------------------------------------


def machine_identity(n_threads: int) -> str:
    """What measured costs depend on besides the model: the CPU, llama.cpp's build (its library
    file, found without loading it: the window never loads llama.cpp), the thread count."""
    import importlib.metadata
    import importlib.util

    from engine.costcache import cpu_identity

    build = "unknown build"
    with contextlib.suppress(Exception):
        build = "llama-cpp-python " + importlib.metadata.version("llama_cpp_python")
        spec = importlib.util.find_spec("llama_cpp")
        if spec is not None and spec.origin:
            for lib in sorted((Path(spec.origin).parent / "lib").glob("libllama*")):
                st = lib.stat()
                build += f" {lib.name}:{st.st_size}:{int(st.st_mtime)}"
                break
    return f"{cpu_identity()}|{build}|{n_threads} threads"


def measured_path() -> Path:
    return paths.home() / "measured-here.json"


def _read_all() -> dict[str, Any]:
    """What measured-here.json keeps; a file that cannot be read, or is not of this FORMAT, as empty."""
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(measured_path().read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("machines"), dict):
            return data
    return {"format": FORMAT, "machines": {}}


def save_costs(costs: MeasuredCosts) -> None:
    """Keep a model's measured costs for this machine (atomic; a failure to write loses nothing else)."""
    data = _read_all()
    machine = data["machines"].setdefault(costs.machine, {})
    if not isinstance(machine, dict):
        machine = data["machines"][costs.machine] = {}
    record = costs.to_json()
    old = machine.get(costs.model)
    if isinstance(old, dict) and isinstance(old.get("t_ms"), dict) and len(old["t_ms"]) > len(costs.t_ms):
        # A draft's few sizes do not erase the curve the same model measured as a target.
        record["t_ms"] = {**old["t_ms"], **record["t_ms"]}
        if record["copy_speedup"] is None:
            record["copy_speedup"] = old.get("copy_speedup")
    machine[costs.model] = record
    with contextlib.suppress(OSError):
        paths.write_private_text(measured_path(), json.dumps(data, indent=1))


def load_costs(model: str) -> MeasuredCosts | None:
    """A model's costs measured on this machine (the current build and thread count), if any.
    A file name finds the same file measured from the hub (owner/repo/FILE.gguf): downloaded, it
    is known by its name."""
    from engine.config import default_threads

    entry = _read_all()["machines"].get(machine_identity(default_threads()), {})
    if not isinstance(entry, dict):
        return None
    record = entry.get(model)
    if not isinstance(record, dict) and "/" not in model:
        record = next((v for k, v in entry.items() if k.rsplit("/", 1)[-1] == model), None)
    if not isinstance(record, dict):
        return None
    try:
        return MeasuredCosts.from_json(record)
    except (KeyError, ValueError, TypeError):
        return None


def figures_here(target_model: str, draft_model: str | None = None) -> PairFigures | None:
    """What this computer will do with a pair, from costs measured before (None: not measured).
    A draft not measured yet leaves the draft's verdict out."""
    target = load_costs(target_model)
    if target is None:
        return None
    draft = load_costs(draft_model) if draft_model else None
    return figures(target, draft)


def model_id(repo_id: str | None, filename: str) -> str:
    """A model as measurements know it: owner/repo/FILE.gguf on the hub, else its file name."""
    return f"{repo_id}/{filename}" if repo_id else Path(filename).name


# --- measuring ----------------------------------------------------------------------------------------


def times_words(ratio: float) -> str:
    """A speed ratio as people say it: "about 1.3× faster", "about 3.4× slower" (never "0.29×")."""
    if ratio >= 1.05:
        return f"about {ratio:.1f}× faster"
    if ratio > 0 and 1 / ratio >= 1.05:
        return f"about {1 / ratio:.1f}× slower"
    return "about as fast"


def verdict_reason(v: DraftVerdict) -> str:
    """Why a draft model pays here or not, from the costs that decide it."""
    costs = (
        f"checking {v.draft_len + 1} tokens at once costs {v.verify_ratio:.1f} single steps here, "
        f"and each drafted token {v.draft_step_ratio:.2f} of one"
    )
    if v.pays:
        return f"it pays here: {costs}, so accepted drafts come cheap"
    return f"it does not pay here: {costs}, so accepted drafts barely repay their checking"


def describe_lines(
    fig: PairFigures, ngram: str = "n-gram lookup", source: str = ACCEPTANCE_SOURCE
) -> list[str]:
    """What stand-ins timed here say, one sentence each: the terminal's lines, the window's "why".
    ngram: what the reader calls n-gram lookup; source: where the acceptance comes from."""
    t = fig.target
    lines = [
        f"On this computer (models of the same shape and quantisation timed here, {t.measured_at}, "
        f"{t.n_threads} threads; nothing downloaded): plain replies at about {t.plain_tokens_per_s:.1f} tokens/s."
    ]
    copy = f"{times_words(fig.copy_speedup)}, " if fig.copy_speedup else ""
    lines.append(
        f"Copy and edit work with {ngram}: {copy}at most {t.ceiling:.1f}× if every guessed word were right."
    )
    v = fig.verdict
    if v is not None:
        k = f"{v.draft_len} token{'s' if v.draft_len > 1 else ''}"
        lines.append(
            f"The draft model: {times_words(v.speedup)} with drafts of {k}, at {v.acceptance:.0%} of its "
            f"guesses accepted ({source}); {verdict_reason(v)}."
        )
    return lines
