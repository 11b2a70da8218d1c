"""The replay's lab: the draft policy against any machine's costs, without that machine.

engine/replay.py is the simulation (the pair doctor's copy-work figure runs it in the product);
this is what only maintainers run around it.

    python -m tools.lab.replay replay           # every kept trace against every kept cost curve
    python -m tools.lab.replay cost-curve --model default
    python -m tools.lab.replay cost-curve --standin qwen2.5-7b:Q4_K_M
    python -m tools.lab.replay record-traces --model default

- `record-traces`: plain greedy replies to the copy prompts (and the bench's warm-up prompt),
  saved as token ids (engine.replay.Trace): what drafting sees, the same on every CPU.
- `cost-curve`: this machine's verify costs t(n) (timed as the lab bench's ceiling is, after the
  prompt and half the reply) and its work outside llama.cpp a step, as a curve file; or, with
  `--standin`, a real-size model's, from a stand-in of a known shape (random weights).
- `replay`: every kept trace against every kept curve: the decode time the real policy reaches
  (engine.policy, driven with a simulated clock), and the best any choice of draft lengths could
  reach knowing what is accepted (`hindsight_best`). No model and no llama.cpp needed.

What they write lands in resources/replay (curves/, traces/, and a folder a set for other models).
They were `tandem bench dev ...` (before that `tandem bench --replay`, `--cost-curve`,
`--record-traces`). A curve is measured on the machine it describes, so run it from a checkout
there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from app.cli.cli_base import Parser
from app.paths import resources_dir
from engine.adaptive import DraftLengthController
from engine.config import NGRAM_LOOKUP, PLAIN_DECODING, DraftChoice
from engine.drafters import NgramDrafter
from engine.kinds import COPY_KINDS
from engine.replay import (
    K_MAX,
    CostCurve,
    ReplayResult,
    Trace,
    _matched,
    calibrated,
    load_traces,
    plain_s,
    replay,
)
from engine.session import Engine
from tools.lab.bench import _run, measure_ceiling
from tools.lab.shapes import KNOWN_SHAPES, plan_from_shape

# --- curve and trace files; the hindsight-best ------------------------------------------------------


def trace_to_json(trace: Trace) -> dict[str, object]:
    return {
        "name": trace.name,
        "model": trace.model,
        "prompt": list(trace.prompt),
        "reply": list(trace.reply),
    }


def load_curve(path: Path) -> CostCurve:
    data = json.loads(path.read_text(encoding="utf-8"))
    return CostCurve(
        str(data["name"]),
        {int(n): float(ms) for n, ms in data["t_ms"].items()},
        float(data.get("fixed_ms", 0.3)),
        float(data.get("row_ms", 0.05)),
        str(data.get("source", "")),
        int(data.get("at_tokens", 0)),
        {int(n): float(ms) for n, ms in data.get("growth_ms", {}).items()},
    )


def curve_to_json(curve: CostCurve) -> dict[str, object]:
    return {
        "name": curve.name,
        "source": curve.source,
        "t_ms": {str(n): round(ms, 2) for n, ms in sorted(curve.t_ms.items())},
        "fixed_ms": round(curve.fixed_ms, 3),
        "row_ms": round(curve.row_ms, 4),
        **({"at_tokens": curve.at_tokens, "growth_ms": curve.growth_ms} if curve.growth_ms else {}),
    }


def load_curves(directory: Path) -> list[CostCurve]:
    return [load_curve(p) for p in sorted(directory.glob("*.json"))]


def slower_python(curve: CostCurve, scale: float) -> CostCurve:
    """The curve on cores `scale` times slower at the work outside llama.cpp a step (Python)."""
    return dataclasses.replace(curve, fixed_ms=scale * curve.fixed_ms, row_ms=scale * curve.row_ms)


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoisyCurve(CostCurve):
    """A curve on a shared machine: each step's time scaled by exp(N(0, noise)), and one step in
    50 stalled to 3x (another program)."""

    noise: float
    jitter: np.random.Generator

    def step_s(self, n_rows: int, text: int | None = None) -> float:
        factor = float(np.exp(self.jitter.normal(0.0, self.noise))) * (
            3.0 if self.jitter.random() < 0.02 else 1.0
        )
        return super().step_s(n_rows, text) * factor


def noisy_replay(
    trace: Trace, curve: CostCurve, seed: dict[str, object] | None, noise: float, noise_seed: int
) -> tuple[ReplayResult, DraftLengthController]:
    """engine.replay.replay with a shared machine's timings (NoisyCurve, `noise` > 0), as the
    controller sees them; the decode time counts them too (plain decoding would have waited as
    long: its time is scaled alike, by the same noise's mean cost)."""
    if noise <= 0:
        return replay(trace, curve, seed)
    jitter = np.random.default_rng(noise_seed)
    result, controller = replay(trace, NoisyCurve(**vars(curve), noise=noise, jitter=jitter), seed)
    # (replay's own plain time was drawn from the noisy curve too: plain decoding's is the clean one's)
    result.plain_s = plain_s(trace, curve) * (float(np.exp(noise**2 / 2)) * (1 + 2 * 0.02))
    return result, controller


def ceiling(curve: CostCurve) -> float:
    """The lab bench's ceiling: max over the measured sizes of n·t(1)/t(n)."""
    return max(n * curve.t_ms[1] / t for n, t in curve.t_ms.items())


def offers(trace: Trace, k_max: int = K_MAX) -> list[tuple[int, int, int]]:
    """At each position of the reply, what an n-gram offer there holds: how many tokens, how many
    of them the target would accept (their match with what the reply goes on to say), and its
    match length where it is a copy (0 otherwise)."""
    drafter = NgramDrafter()
    ctx = list(trace.prompt)
    drafter.begin(ctx)
    reply = trace.reply
    out = []
    for pos in range(len(reply)):
        candidates, kind = drafter.offer(ctx, min(k_max, len(reply) - pos), use_memory=False)
        age = drafter.match_len if kind in COPY_KINDS else 0
        out.append((len(candidates), _matched(candidates, reply, pos), age))
        ctx.append(reply[pos])
    return out


def hindsight_best(trace: Trace, curve: CostCurve, k_max: int = K_MAX) -> float:
    """The least decode time any choice of draft lengths could reach on this reply, knowing what
    each offer will have accepted: dynamic programming over positions. A draft longer than what
    will be accepted only adds rows, though a batch of more rows may cost less (CPU kernels
    work in tiles), so every length the offer holds is tried."""
    held = offers(trace, k_max)
    n = len(trace.reply)
    step = [curve.step_s(rows) for rows in range(k_max + 2)]
    best = [0.0] * (n + 1)
    for pos in range(n - 1, -1, -1):
        available, m, _ = held[pos]
        if curve.growth_ms:  # (a step's cost grows with the text before it)
            text = len(trace.prompt) + pos
            step = [curve.step_s(rows, text) for rows in range(available + 2)]
        best[pos] = min(step[k + 1] + best[min(n, pos + min(k, m) + 1)] for k in range(available + 1))
    return best[0]


# --- the three commands ----------------------------------------------------------------------------


PYTHON_SCALES = (1.0, 3.5)  # the curve's own cores, and cores 3.5x slower at Python (issue 27)
CURVE_SIZES = tuple(range(1, K_MAX + 2))  # verify batches of 1..64 rows: drafts of 0..63


def replay_dir() -> Path:
    return resources_dir() / "replay"


def _engine(args: argparse.Namespace, draft: DraftChoice = PLAIN_DECODING) -> Engine:
    """An engine as `tandem bench` makes one, with its own cost cache (the user's is not touched)."""
    import atexit
    import shutil
    import tempfile

    from app.cli.options import engine_config

    costs = tempfile.mkdtemp(prefix="tandem-curve-")
    atexit.register(shutil.rmtree, costs, True)  # (a test's run in-process left one a run)
    config = dataclasses.replace(engine_config(args), draft=draft, cost_cache_dir=costs)
    return Engine(config)


def record_traces(args: argparse.Namespace) -> str:
    from app.cli.bench import WARM_UP_PROMPT, load_prompts, render_prompt
    from engine.config import SamplingParams

    out = Path(args.out) if args.out else replay_dir() / "traces"
    out.mkdir(parents=True, exist_ok=True)
    engine = _engine(args)
    # Documents prompts in the model's chat template, as the window sends them.
    prompts = [("warm-up", WARM_UP_PROMPT)] + [
        (p.name, render_prompt(engine, p).prompt) for p in load_prompts(args.prompts, args.sets or "copy")
    ]
    model = Path(engine.config.target_path).name
    lines = []
    try:
        for name, prompt in prompts:
            finished = _run(engine, prompt, args.max_tokens, SamplingParams(), speculate=False)
            trace = Trace(name, tuple(engine.tokenize(prompt)), finished.token_ids, model)
            path = out / f"{name}.json"
            path.write_text(json.dumps(trace_to_json(trace)) + "\n", encoding="utf-8")
            lines.append(f"{path}: {len(trace.prompt)} prompt tokens, {len(trace.reply)} reply tokens")
    finally:
        engine.close()
    return "\n".join(lines)


def measure_cost_curve(args: argparse.Namespace) -> CostCurve:
    """This machine's curve: verify batches timed as the bench's ceiling is, and the work outside
    llama.cpp a step (reading each verified row; the rest, a fixed part, from a real copy reply)."""
    from app.cli.bench import load_prompts
    from engine.config import SamplingParams
    from engine.speculative import greedy_choices

    prompt = load_prompts(args.prompts, args.sets or "copy")[0].prompt
    engine = _engine(args, draft=NGRAM_LOOKUP)
    try:
        # Every size a draft can take: CPU kernels work in tiles, and sizes between tiles cost
        # more (AVX-512, this EPYC: 15 rows 85 ms, 16 rows 73); a curve sampled at tiles alone,
        # read linearly between them, prices every size like a tile.
        _, costs = measure_ceiling(engine, prompt, args.max_tokens, CURVE_SIZES)
        t_ms = {n: s * 1000 for n, s in costs.items()}
        # Reading n verified rows right after their decode (all accepted: every row is read).
        engine.reset_cache()
        target = engine.target
        context = engine.tokenize(prompt)
        target.decode(context, n_logits=0)
        read_ms: dict[int, float] = {}
        for n in (8, 63):
            best = float("inf")
            for _ in range(3):
                rows = target.decode(context[:n], n_logits=n)
                drafted = [int(t) for t in rows[:-1].argmax(axis=1)]  # every draft agrees: all rows read
                target.truncate(len(context))
                rows = target.decode(context[:n], n_logits=n)  # fresh from llama.cpp, as in a step
                t0 = time.perf_counter()
                greedy_choices(rows, drafted)
                best = min(best, time.perf_counter() - t0)
                target.truncate(len(context))
            read_ms[n] = best * 1000
        row_ms = max((read_ms[63] - read_ms[8]) / 55, 0.0)
        # The rest of a step's time outside llama.cpp, from a real speculative copy reply.
        engine.reset_cache()
        spec = _run(engine, prompt, args.max_tokens, SamplingParams(), speculate=True)
        s = spec.stats
        rows_per_step = (s.n_drafted + s.n_steps) / max(s.n_steps, 1)
        fixed_ms = max(s.step_overhead_ms_median - row_ms * rows_per_step, 0.05)
    finally:
        engine.close()
    from engine.costcache import build_identity, cpu_identity

    flags = [f for f in ("AVX512", "AVX2") if f"{f} = 1" in build_identity()]
    name = args.curve_name or f"{platform.node()}-{(flags or ['build'])[0].lower()}"
    source = (
        f"python -m tools.lab.replay cost-curve (every batch size 1-{max(CURVE_SIZES)}), "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, "
        f"CPU {cpu_identity()}, build {'/'.join(flags) or 'other'}, threads {args.threads or 'all'}; "
        f"reading rows: 8 rows {read_ms[8]:.2f} ms, 63 rows {read_ms[63]:.2f} ms; a copy reply's median "
        f"step outside llama.cpp {s.step_overhead_ms_median:.2f} ms at {rows_per_step:.1f} rows a step"
    )
    return CostCurve(name, t_ms, fixed_ms, row_ms, source)


STANDIN_SET = "standins"  # resources/replay/standins/curves: real-size curves on the copy traces


def standin_cost_curve(args: argparse.Namespace) -> CostCurve:
    """A real-size model's curve on this machine, before any download: a stand-in of a known
    shape (tools.lab.shapes.KNOWN_SHAPES, random weights) timed at every batch size 1-64 by
    the pair doctor's measuring process. The work outside llama.cpp a step is the machine's, not
    the model's: reading rows is timed here on rows of the stand-in's vocabulary, the fixed part
    taken from this build's own curve where one is kept (else the curve's default)."""
    from app.cli.options import UserError
    from app.library.measure import CONTEXT_TOKENS
    from app.library.measure_run import measure_pair
    from engine.costcache import build_identity, cpu_identity
    from engine.speculative import greedy_choices

    shape_name, _, quant = str(args.standin).partition(":")
    shape = KNOWN_SHAPES.get(shape_name.lower())
    if shape is None:
        raise UserError(f"no known shape '{shape_name}'; known: {', '.join(KNOWN_SHAPES)}")
    quant = quant or "Q4_K_M"
    plan = plan_from_shape(shape_name, shape, quant)
    t0 = time.perf_counter()
    fig = measure_pair(
        (f"standin:{shape_name}:{quant}", plan), sizes=CURVE_SIZES, n_threads=args.threads, save=False
    )
    took_s = time.perf_counter() - t0
    read_ms: dict[int, float] = {}
    rows = np.random.default_rng(0).standard_normal((63, shape.n_vocab)).astype(np.float32)
    for n in (8, 63):
        drafted = [int(t) for t in rows[: n - 1].argmax(axis=1)]
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            greedy_choices(rows[:n], drafted)
            best = min(best, time.perf_counter() - t)
        read_ms[n] = best * 1000
    row_ms = max((read_ms[63] - read_ms[8]) / 55, 0.0)
    flags = [f for f in ("AVX512", "AVX2") if f"{f} = 1" in build_identity()]
    build = (flags or ["build"])[0].lower()
    own = next((c for c in load_curves(replay_dir() / "curves") if c.name == f"this-epyc-{build}"), None)
    fixed_ms = own.fixed_ms if own is not None else CostCurve("", {1: 1.0}).fixed_ms
    name = args.curve_name or f"{platform.node()}-{build}-{shape_name}-{quant.lower()}"
    source = (
        f"python -m tools.lab.replay cost-curve --standin {shape_name}:{quant} (a stand-in: the shape of "
        f"{shape_name}, {plan.size_bytes / 2**30:.2f} GiB, random weights; every batch size 1-64 after "
        f"{CONTEXT_TOKENS} tokens, fastest of 3 up to 16 rows and of 2 above; {took_s:.0f} s in all), "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, CPU {cpu_identity()}, build "
        f"{'/'.join(flags) or 'other'}, threads {args.threads or 'all'}; reading rows: 8 rows "
        f"{read_ms[8]:.2f} ms, 63 rows {read_ms[63]:.2f} ms; fixed part per step from "
        f"{own.name if own is not None else 'the default'}"
    )
    return CostCurve(name, dict(fig.target.t_ms), fixed_ms, row_ms, source)


def cost_curve(args: argparse.Namespace) -> str:
    if getattr(args, "standin", None):
        curve = standin_cost_curve(args)
        folder = replay_dir() / STANDIN_SET / "curves"
    else:
        curve = measure_cost_curve(args)
        folder = replay_dir() / "curves"
    out = Path(args.out) if args.out else folder / f"{curve.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(curve_to_json(curve), indent=1) + "\n", encoding="utf-8")
    return f"{out}: ceiling {ceiling(curve):.2f}x; {curve.source}"


@dataclasses.dataclass(frozen=True)
class ReplayRow:
    curve: str
    prompt: str
    python_scale: float
    plain_s: float
    controller_s: float
    best_s: float
    ceiling: float
    first_s: float  # the controller before this machine's verify batches were timed (calibrated)

    @property
    def share(self) -> float:
        return self.best_s / self.controller_s

    @property
    def first_share(self) -> float:
        return self.best_s / self.first_s

    @property
    def speedup(self) -> float:
        return self.plain_s / self.controller_s


def run_replay(
    curves: list[CostCurve], traces: list[Trace], scales: tuple[float, ...] = PYTHON_SCALES
) -> list[ReplayRow]:
    """Each trace against each curve, the controller seeded as the bench seeds a run: from what a
    first process left after the warm-up prompt (its trace is named warm-up) and the verify
    batches the app times while idle (engine.replay.calibrated); and, beside it, from the
    warm-up alone (a reply sent before the app was ever idle on this machine)."""
    warm = next((t for t in traces if t.name == "warm-up"), None)
    rows = []
    for curve in curves:
        for scale in scales:
            slower = slower_python(curve, scale)
            first_seed = None
            if warm is not None:
                _, controller = replay(warm, slower)
                first_seed = controller.export()
            seed = calibrated(first_seed, slower)
            for trace in traces:
                if trace is warm:
                    continue
                result, _ = replay(trace, slower, seed)
                first, _ = replay(trace, slower, first_seed)
                best = hindsight_best(trace, slower)
                rows.append(
                    ReplayRow(
                        curve.name,
                        trace.name,
                        scale,
                        result.plain_s,
                        result.decode_s,
                        best,
                        ceiling(curve),
                        first.decode_s,
                    )
                )
    return rows


def replay_markdown(rows: list[ReplayRow]) -> str:
    lines = [
        "| curve | Python x | prompt | plain s | controller s | hindsight-best s | controller of best | "
        "before timing: of best | speedup | best speedup | ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.curve} | {r.python_scale:g} | {r.prompt} | {r.plain_s:.2f} | {r.controller_s:.2f} | "
            f"{r.best_s:.2f} | {100 * r.share:.0f}% | {100 * r.first_share:.0f}% | {r.speedup:.2f}x | "
            f"{r.plain_s / r.best_s:.2f}x | {r.ceiling:.2f}x |"
        )
    lines.append("")
    for curve in dict.fromkeys(r.curve for r in rows):
        for scale in dict.fromkeys(r.python_scale for r in rows if r.curve == curve):
            mine = [r for r in rows if r.curve == curve and r.python_scale == scale]
            shares = [r.share for r in mine]
            firsts = [r.first_share for r in mine]
            lines.append(
                f"- {curve}, Python x{scale:g}: controller {100 * statistics.median(shares):.0f}% of the "
                f"hindsight-best (lowest {100 * min(shares):.0f}%), speedup median "
                f"{statistics.median(r.speedup for r in mine):.2f}x; before this machine's batches "
                f"were timed {100 * statistics.median(firsts):.0f}% (lowest {100 * min(firsts):.0f}%)"
            )
    return "\n".join(lines) + "\n"


def replay_sets() -> list[tuple[str, Path]]:
    """The kept sets, each a folder of curves/ and traces/ of one model: resources/replay itself
    (Gemma 3 270M, the bench's copy prompts) and each folder under it that holds both (smollm2:
    the first chat's model, a reply's rows each costing half a plain step)."""
    base = replay_dir()
    under = [d for d in sorted(base.iterdir()) if (d / "curves").is_dir() and (d / "traces").is_dir()]
    return [("gemma-3-270m", base), *((d.name, d) for d in under)]


def standin_set() -> tuple[str, Path, Path] | None:
    """Real-size curves (stand-ins of Qwen2.5 0.5B-14B shapes timed here) against the kept copy
    traces: (name, curves folder, traces folder). Drafting from the text offers the same tokens
    whatever the model's size; what a size changes is what each batch costs."""
    curves = replay_dir() / STANDIN_SET / "curves"
    if not curves.is_dir() or not any(curves.glob("*.json")):
        return None
    return ("real sizes (stand-ins) on the copy traces", curves, replay_dir() / "traces")


def replay_report(args: argparse.Namespace) -> str:
    scales = tuple(float(x) for x in args.python_scale.split(",")) if args.python_scale else PYTHON_SCALES
    if args.curves or args.traces:
        base = replay_dir()
        curves = load_curves(Path(args.curves) if args.curves else base / "curves")
        traces = load_traces(Path(args.traces) if args.traces else base / "traces")
        text = replay_markdown(run_replay(curves, traces, scales))
    else:
        parts = []
        sets = [(name, folder / "curves", folder / "traces") for name, folder in replay_sets()]
        standins = standin_set()
        if standins is not None:
            sets.append(standins)
        for name, curves_dir, traces_dir in sets:
            curves, traces = load_curves(curves_dir), load_traces(traces_dir)
            parts.append(f"### {name}: {len(traces)} traces, {len(curves)} cost curves\n")
            parts.append(replay_markdown(run_replay(curves, traces, scales)))
        text = "\n".join(parts)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return text


def run(args: argparse.Namespace) -> int:
    """`python -m tools.lab.replay replay|cost-curve|record-traces`."""
    from app.cli.options import validate_engine_args

    if args.command == "replay":
        print(replay_report(args))
        return 0
    validate_engine_args(args)
    print(cost_curve(args) if args.command == "cost-curve" else record_traces(args))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m tools.lab.replay", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    r = commands.add_parser(
        "replay",
        help="the draft policy on the kept traces against every kept cost curve (no model needed)",
    )
    r.add_argument("--curves", default=None, help="folder of cost curves (default: every kept set)")
    r.add_argument("--traces", default=None, help="folder of traces (default: every kept set)")
    r.add_argument("--python-scale", default=None, help="comma-separated slow-core factors (default 1,3.5)")
    r.add_argument("--out", default=None, help="also write the report as Markdown here")

    c = commands.add_parser("cost-curve", help="measure this machine's verify costs t(n) as a curve file")
    _add_model_args(c)
    c.add_argument("--curve-name", default=None, help="the curve's name (default: host and build)")
    c.add_argument(
        "--standin",
        default=None,
        metavar="SHAPE[:QUANT]",
        help="time a stand-in of a known shape (random weights, e.g. qwen2.5-7b:Q4_K_M) "
        "at every batch size 1-64 instead of --model; deleted after",
    )
    c.add_argument("--out", default=None, help="the curve file (default: resources/replay/.../curves)")

    t = commands.add_parser("record-traces", help="record greedy replies to the copy prompts as traces")
    _add_model_args(t)
    t.add_argument("--out", default=None, help="folder for the traces (default: resources/replay/traces)")
    return parser


def _add_model_args(p: argparse.ArgumentParser) -> None:
    from app.cli.options import add_engine_args

    add_engine_args(p, model_default="default")
    p.set_defaults(draft=PLAIN_DECODING)  # each command picks its own
    p.add_argument("--prompts", default=None, help='JSONL file of {"name", "set", "prompt"} lines')
    p.add_argument("--sets", default=None, help="comma-separated built-in sets (default: copy)")
    p.add_argument("--max-tokens", type=int, default=256)


def main(argv: list[str] | None = None) -> int:
    from app.cli.cli_base import at_the_edge

    args = build_parser().parse_args(argv)
    return at_the_edge(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
