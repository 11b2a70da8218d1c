"""What a draft model could give on a reply, from one plain greedy reply and the draft model read
teacher-forced over it. Answers "which draft lengths pay for this pair on this machine".

    python -m tools.lab.draft_model_fit TARGET DRAFT PROMPT_NAME|@FILE [MAX_TOKENS]

TARGET and DRAFT as the lab bench takes them (`default-costly`, `default`, a path: tools/lab/models.py).
Greedy drafting is exact to simulate from one plain reply: a draft's accepted prefix is the run
of positions where the draft model's argmax (given the target's own text so far) is the
target's token. It prints the verify costs t(n) and the draft's cost per token measured here,
the acceptance by the draft's own top probability, and tokens per second for fixed draft lengths
k and for drafts that stop where the draft's top probability drops under p_min, against plain.
Past a draft's first wrong token the stop rule is judged on the teacher-forced probabilities (an
approximation: only what that draft costs depends on it).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _runner(spec: str) -> Any:
    from engine.backend import LlamaRunner
    from tools.lab.models import lab_model

    return LlamaRunner(lab_model(spec), n_ctx=2048, n_threads=2)


def _prompt(name: str) -> str:
    if name.startswith("@"):
        return Path(name[1:]).read_text(encoding="utf-8")
    from app.cli.bench import load_prompts

    return next(p.prompt for p in load_prompts(None, None) if p.name == name)


def _softmax_top(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = rows.argmax(axis=1)
    m = rows.max(axis=1, keepdims=True)
    p = 1.0 / np.exp(rows - m).sum(axis=1)
    return top, p


def main() -> None:
    target_spec, draft_spec, name = sys.argv[1:4]
    n_out = int(sys.argv[4]) if len(sys.argv) > 4 else 128
    target, draft = _runner(target_spec), _runner(draft_spec)
    prompt = target.tokenize(_prompt(name))
    # plain greedy reply, timed a step at a time
    rows = target.decode(prompt, n_logits=1)
    out: list[int] = []
    plain_s: list[float] = []
    token = int(rows[-1].argmax())
    while len(out) < n_out and not target.is_eog(token):
        out.append(token)
        t0 = time.perf_counter()
        token = int(target.decode([token], n_logits=1)[0].argmax())
        plain_s.append(time.perf_counter() - t0)
    text = prompt + out
    # verify costs t(n): after the reply, every row read
    sizes = list(range(1, 17)) + [20, 24, 32]
    t = target.time_batches(sizes, text[-1:], repeats=3, read_rows=True)
    # the draft, teacher-forced: row i predicts out[i]
    d_rows = draft.decode(text[:-1], n_logits=len(out))
    d_top, d_p = _softmax_top(np.asarray(d_rows))
    agree = d_top == np.asarray(out)
    # the draft's cost per token: one-token decodes after the reply
    draft.truncate(len(text) - 1)
    d_s = []
    tok = text[-1]
    for _ in range(24):
        t0 = time.perf_counter()
        tok = int(draft.decode([tok], n_logits=1)[0].argmax())
        d_s.append(time.perf_counter() - t0)
    td = statistics.median(d_s)
    t0 = time.perf_counter()
    draft.decode([tok, tok], n_logits=1)
    td2 = time.perf_counter() - t0
    n = len(out)
    print(f"{name}: {n} tokens, plain step median {statistics.median(plain_s) * 1e3:.1f} ms")
    print("t(n) ms: " + " ".join(f"{k}:{v * 1e3:.0f}" for k, v in sorted(t.items())))
    print(f"draft token {td * 1e3:.1f} ms ({td / t[1]:.2f} of t(1)); 2-row draft decode {td2 * 1e3:.1f} ms")
    print(f"acceptance (teacher-forced) {agree.mean():.3f}")
    for lo, hi in ((0, 0.3), (0.3, 0.5), (0.5, 0.6), (0.6, 0.75), (0.75, 0.9), (0.9, 1.01)):
        sel = (d_p >= lo) & (d_p < hi)
        if sel.any():
            print(
                f"  draft p in [{lo:.2f},{hi:.2f}): {sel.sum():3d} tokens, accepted {agree[sel].mean():.2f}"
            )

    def cost(rows_n: int) -> float:
        keys = sorted(t)
        if rows_n in t:
            return t[rows_n]
        hi = next((k for k in keys if k >= rows_n), keys[-1])
        lo = max(k for k in keys if k <= rows_n)
        return t[lo] + (t[hi] - t[lo]) * (rows_n - lo) / max(hi - lo, 1)

    def simulate(k_max: int, p_min: float) -> tuple[float, float, float]:
        i, spent, steps, drafted = 0, 0.0, 0, 0
        while i < n:
            k = 0
            while k < min(k_max, n - i) and d_p[i + k] >= p_min:
                k += 1
            m = 0
            while m < k and agree[i + m]:
                m += 1
            # draft decodes: k - 1 one-row ones plus a first reading 1-2 unseen tokens (0: none)
            spent += (k > 0) * (td2 if m == k else td) + max(k - 1, 0) * td + cost(k + 1)
            i += m + 1
            steps += 1
            drafted += k
        plain = n * t[1]
        return plain / spent, steps, drafted

    print(f"plain (t(1) per token): {n / (n * t[1]):.1f} tok/s")
    print(
        "fixed k (no stop rule):      "
        + "  ".join(f"k{k}:{simulate(k, 0.0)[0]:.2f}x" for k in (1, 2, 3, 4, 6, 8, 12, 16))
    )
    for p_min in (0.3, 0.5, 0.6, 0.75, 0.9):
        print(
            f"p_min {p_min:.2f}, k_max:           "
            + "  ".join(f"k{k}:{simulate(k, p_min)[0]:.2f}x" for k in (2, 3, 4, 6, 8, 12, 16, 32))
        )
    target.close()
    draft.close()


if __name__ == "__main__":
    main()
