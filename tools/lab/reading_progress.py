"""How honest a long prompt's progress is (issue 51: progress within 0.5 s, updated at least twice a
second, time left within 30% of the real time after the first 20%), on a stand-in of a known shape:
the engine's reports (engine.reading, one a chunk) and what the window says between them every
READING_TICK_MS (ui.presenters.reading_words.reading_after), against when the reading really ended.

    nice -n -15 .venv/bin/python -m tools.lab.reading_progress qwen2.5-1.5b 2048
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from app.library import standin
from engine.backend import LlamaRunner
from engine.events import Event, Reading
from engine.reading import watch_reading
from tools.lab.shapes import KNOWN_SHAPES, plan_from_shape
from ui.presenters.reading_words import reading_after
from ui.presenters.reply_presenter import READING_TICK_MS

shape, n_prompt = sys.argv[1], int(sys.argv[2])
path = Path(f"/tmp/read-chunks/{shape}.gguf")
if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    standin.write_standin(plan_from_shape(shape, KNOWN_SHAPES[shape], "Q4_K_M"), path)
runner = LlamaRunner(str(path), n_ctx=n_prompt + 256, n_threads=2, n_batch=512)
prompt = [(i * 7919) % 30000 + 100 for i in range(n_prompt)]
reports: list[tuple[float, Reading]] = []


def read() -> Iterator[Event]:  # the engine's prefill: all but the last token, in chunks
    runner.decode(prompt[:-1], n_logits=0)
    yield from ()


t0 = time.perf_counter()
list(watch_reading(runner, prompt, read(), lambda r: reports.append((time.perf_counter(), r))))
t_end = time.perf_counter()
total = t_end - t0
print(
    f"{shape}: read {n_prompt - 1} tokens in {total:.1f} s, chunk {runner.read_chunk} rows, {len(reports)} reports"
)

# The time left the engine said at each report past the first 20% of the time, against the real.
errors = []
for t, r in reports:
    real = t_end - t
    said_left = f"{r.seconds_left:6.1f}" if r.seconds_left is not None else "     -"
    print(f"  {t - t0:6.1f} s: {r.n_processed:5d} read, time left said {said_left} s, real {real:6.1f} s")
    if r.seconds_left is not None and (t - t0) >= 0.2 * total and real > 0.5:
        errors.append((r.seconds_left - real) / real)
if errors:
    worst = max(errors, key=abs)
    print(
        f"  time left at the engine's reports past 20%: error median {statistics.median(errors):+.0%},"
        f" worst {worst:+.0%} ({len(errors)} reports)"
    )

# The window's line every tick: the last report moved on by reading_after.
tick = READING_TICK_MS / 1000
shown_errors, behind = [], []
worst_at: list[tuple[float, float, float, float]] = []
t = reports[0][0]
while t < t_end:
    last_t, last = max(((rt, r) for rt, r in reports if rt <= t), key=lambda x: x[0])
    said = reading_after(last, t - last_t)
    real = t_end - t
    if said.seconds_left is not None and (t - t0) >= 0.2 * total and real > 0.5:
        # Under a second, the line says "under a second left" (reading_words.reading_line): true
        # while the real time left is under one.
        shown = said.seconds_left if said.seconds_left >= 1 else min(1.0, max(real, said.seconds_left))
        shown_errors.append((shown - real) / real)
        worst_at.append((abs(shown_errors[-1]), t - t0, said.seconds_left, real))
    # How far the count shown is from the count the next report says (it never passes it).
    nxt = next((r for rt, r in reports if rt > t), None)
    if nxt is not None:
        behind.append(nxt.n_processed - said.n_processed)
    t += tick
worst = max(shown_errors, key=abs)
print(
    f"  the window's line every {tick:.2f} s: time left error median {statistics.median(shown_errors):+.0%},"
    f" worst {worst:+.0%} past 20% ({len(shown_errors)} ticks); the count shown never passed the"
    f" next report's: {min(behind) >= 0} (behind it by median {statistics.median(behind):.0f} tokens)"
)
within = sum(abs(e) <= 0.3 for e in shown_errors) / len(shown_errors)
print(f"  ticks within 30% of the real time left: {within:.0%}; the worst, at (error, s, said, real):")
for err, at, said_s, real_s in sorted(worst_at, reverse=True)[:3]:
    print(f"    {err:.0%} at {at:.1f} s: said {said_s:.1f} s left, real {real_s:.1f} s")
print(f"  first report {(reports[0][0] - t0) * 1000:.0f} ms after the request")
runner.close()
