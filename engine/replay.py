"""Replay the draft policy's decisions against any machine's verify costs, without that machine.

Greedy decoding writes the same text on every CPU, and an n-gram drafter's offers depend on
nothing but that text. So one recorded reply (a Trace: the prompt's tokens and the reply's)
tells what drafting sees at every step on any machine; what differs between machines is what
a step costs. A CostCurve says that: t(n), one verify batch of n rows, and the work outside
llama.cpp per step (Python: a fixed part and a part per verified row; the lab scales both for
slow cores). `replay` drives engine.policy.DraftPolicy, the very code a real reply runs, with a
simulated clock.

`calibrated` adds what the app's worker times while idle (Engine.calibrate) to a seed.

The product's use: the pair doctor's copy-work figure replays the kept traces
(resources/replay/traces) with a pair's measured costs (app/library/measure.py). The lab's
(tools/lab/replay.py) measures and keeps cost curves, records traces, and weighs the policy
against the hindsight-best on every kept curve.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.adaptive import CALIBRATION_SIZES, DraftLengthController
from engine.config import SamplingParams
from engine.drafters import NgramDrafter
from engine.policy import DraftPolicy

K_MAX = 63  # the engine's longest draft (engine.config.EngineConfig.draft_max)


@dataclass(frozen=True)
class Trace:
    """A greedy reply as drafting sees it: the prompt's tokens, then the reply's."""

    name: str
    prompt: tuple[int, ...]
    reply: tuple[int, ...]
    model: str = ""

    @staticmethod
    def from_json(data: dict[str, object]) -> Trace:
        prompt, reply = data["prompt"], data["reply"]
        assert isinstance(prompt, list) and isinstance(reply, list)
        return Trace(
            str(data["name"]),
            tuple(int(t) for t in prompt),
            tuple(int(t) for t in reply),
            str(data.get("model", "")),
        )


@dataclass(frozen=True)
class CostCurve:
    """What a step costs on one machine and build: t(n) for a verify batch of n rows (ms, at the
    sizes measured; linear between them), and the work outside llama.cpp a step, fixed_ms +
    row_ms per verified row as measured on the machine's own cores. Where measured, growth_ms
    says what a batch of n rows gains per 1,000 tokens of text past at_tokens, the text t_ms was
    timed after (attention reads all of it; empty: the cost of every text is t_ms's)."""

    name: str
    t_ms: dict[int, float]
    fixed_ms: float = 0.3
    row_ms: float = 0.05
    source: str = ""
    at_tokens: int = 0
    growth_ms: dict[int, float] = field(default_factory=dict)

    def verify_s(self, n_rows: int, text: int | None = None) -> float:
        """One verify batch of n_rows after `text` tokens (None: after at_tokens)."""
        sizes = sorted(self.t_ms)
        if n_rows >= sizes[-1]:
            top, below = sizes[-1], sizes[-2]
            slope = (self.t_ms[top] - self.t_ms[below]) / (top - below)
            ms = self.t_ms[top] + slope * (n_rows - top)
        else:
            ms = float(np.interp(n_rows, sizes, [self.t_ms[n] for n in sizes]))
        if self.growth_ms and text is not None:
            grown = sorted(self.growth_ms)
            per_k = float(np.interp(n_rows, grown, [self.growth_ms[n] for n in grown]))
            ms += per_k * (text - self.at_tokens) / 1000
        return ms / 1000

    def step_s(self, n_rows: int, text: int | None = None) -> float:
        return self.verify_s(n_rows, text) + (self.fixed_ms + self.row_ms * n_rows) / 1000


@dataclass
class ReplayResult:
    decode_s: float
    plain_s: float
    steps: list[tuple[int, int]] = field(default_factory=list)  # (drafted, accepted) per step

    @property
    def speedup(self) -> float:
        return self.plain_s / self.decode_s


def _matched(offer: list[int], reply: tuple[int, ...], pos: int) -> int:
    n = 0
    for token, truth in zip(offer, reply[pos : pos + len(offer)], strict=False):
        if token != truth:
            break
        n += 1
    return n


def replay(
    trace: Trace,
    curve: CostCurve,
    seed: dict[str, object] | None = None,
) -> tuple[ReplayResult, DraftLengthController]:
    """The reply decoded by the real policy against `curve`: its decode time, and the controller
    as the reply left it (its export seeds the next, as the cost cache does between processes).
    seed: a cost cache's contents (DraftLengthController.export), None for a first process."""
    controller = DraftLengthController(K_MAX)
    if seed is not None:
        controller.seed(seed)
    policy = DraftPolicy(controller, NgramDrafter())
    policy.begin_reply(speculate=True, use_memory=False)
    ctx = list(trace.prompt)
    policy.start(ctx)
    # As the decoder does after a first reply's prefill on a machine never timed, where the reply
    # starts by copying (SpeculativeDecoder._time_first_batches): not part of the decode time.
    sizes = controller.first_reply_sizes(K_MAX + 1, len(trace.reply))
    if sizes and policy.starts_copying(ctx):
        controller.note_timings(_timed(curve, sizes, len(ctx)))
    reply, pos, clock = trace.reply, 0, 0.0
    params, rng = SamplingParams(), np.random.default_rng(0)
    steps: list[tuple[int, int]] = []
    while pos < len(reply):
        proposal = policy.propose(ctx, len(reply) - pos, params, rng)
        k = len(proposal.tokens)
        n_accepted = _matched(proposal.tokens, reply, pos)
        step_s = curve.step_s(k + 1, len(ctx))
        emitted = list(reply[pos : pos + n_accepted + 1])
        policy.learn(proposal, n_accepted, emitted[0], step_s)
        ctx.extend(emitted)
        pos += len(emitted)
        clock += step_s
        steps.append((k, n_accepted))
    return ReplayResult(clock, plain_s(trace, curve), steps), controller


def plain_s(trace: Trace, curve: CostCurve) -> float:
    """The reply decoded plainly against `curve`: one step of one row a token."""
    if curve.growth_ms:
        return sum(curve.step_s(1, len(trace.prompt) + i) for i in range(len(trace.reply)))
    return len(trace.reply) * curve.step_s(1)


def calibrated(seed: dict[str, object] | None, curve: CostCurve) -> dict[str, object]:
    """A cost cache's contents (seed) after Engine.calibrate has timed, on the curve's machine,
    the sizes of CALIBRATION_SIZES it did not hold: each a verify batch and the reading of its
    rows, without a step's fixed work (the app's worker does this while idle)."""
    controller = DraftLengthController(K_MAX)
    if seed is not None:
        controller.seed(seed)
    controller.note_timings(_timed(curve, controller.costs.untimed(CALIBRATION_SIZES)))
    return controller.export()


def _timed(curve: CostCurve, sizes: Iterable[int], text: int | None = None) -> dict[int, float]:
    """Batches timed outside a reply on the curve's machine (LlamaRunner.time_batches), after
    `text` tokens (None: an idle calibration's short text): the batch and the reading of its
    rows, without a step's fixed work."""
    return {n: curve.verify_s(n, text) + curve.row_ms * n / 1000 for n in sizes}


def load_traces(directory: Path) -> list[Trace]:
    return [
        Trace.from_json(json.loads(p.read_text(encoding="utf-8"))) for p in sorted(directory.glob("*.json"))
    ]
