"""One `tandem generate` reply with a draft model, every step traced: the offer drafted (model or
text), its length, what was kept, the step's wall time and its drafting part, the draft model's
catch-up, and the controller's estimates after the step (the model's acceptance, its refusal rate,
its cost per drafted token against a plain step, the ramp). Answers "why does this pair not pay".

    python -m tools.lab.trace_draft_model -- GENERATE_ARGS...

GENERATE_ARGS as `tandem generate` takes them (--json is added); prints one line a step and the
reply's figures to stderr. TANDEM_HOME as for any run (its cost cache seeds the controller).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from typing import Any


def main(argv: list[str]) -> None:
    from engine import policy as policy_mod
    from engine import speculative

    lines: list[str] = []
    orig_step = speculative.SpeculativeDecoder._step
    orig_learn = policy_mod.DraftPolicy.learn
    last: dict[str, Any] = {}

    def learn(self, proposal, n_accepted, first_emitted, step_s, timed=True):
        orig_learn(self, proposal, n_accepted, first_emitted, step_s, timed)
        d, c = proposal.draft, self.controller
        last.update(
            kind=proposal.kind.name, k=len(d.tokens), kept=n_accepted, step=step_s, draft=d.draft_s,
            first=d.first_s, more=d.n_more, catch=d.catch_up_s,
            acc=c.acceptance(0) if c else 0.0, refuse=c.draft.refusal_rate() if c else 0.0,
            ratio=(c.draft.draft_ratio if c else None) or 0.0, ramp=c.budget.ramp if c else 0, probing=c.probes.probing if c else False,
        )  # fmt: skip

    def step(self, r):
        last.clear()
        t0 = time.perf_counter()
        llama0 = self.target.llama_s
        yield from orig_step(self, r)
        if not last:
            return
        verify = self.target.llama_s - llama0
        lines.append(
            f"{r.counters.n_steps:3d} gen={r.counters.n_generated:3d} {last['kind']:10s} k={last['k']:2d} "
            f"kept={last['kept']:2d} step={last['step'] * 1e3:6.1f}ms verify={verify * 1e3:6.1f} "
            f"draft={last['draft'] * 1e3:5.1f} (first {last['first'] * 1e3:4.1f} +{last['more']}) "
            f"catch={last['catch'] * 1e3:5.1f} wall={(time.perf_counter() - t0) * 1e3:6.1f} "
            f"| acc0={last['acc']:.2f} refuse={last['refuse']:.2f} ratio={last['ratio']:.2f} "
            f"ramp={last['ramp']}{' probe' if last['probing'] else ''}"
        )

    policy_mod.DraftPolicy.learn = learn  # type: ignore[method-assign]
    speculative.SpeculativeDecoder._step = step  # type: ignore[method-assign]
    from app.main import main as app_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        app_main(["generate", *argv, "--json"])
    r = json.loads(out.getvalue().strip().splitlines()[-1])
    for line in lines:
        print(line, file=sys.stderr)
    keys = ("n_generated", "n_drafted", "n_accepted", "n_drafted_text", "n_accepted_text", "n_steps",
            "prefill_s", "decode_s", "draft_catch_up_s", "decode_tokens_per_s", "load_s", "note")  # fmt: skip
    print(json.dumps({k: r.get(k) for k in keys}), file=sys.stderr)


if __name__ == "__main__":
    main([a for a in sys.argv[1:] if a != "--"])
