"""Prompt reading speed by chunk size (rows per llama_decode), on a stand-in of a known shape
(tools/lab/shapes.py, KNOWN_SHAPES) or a GGUF file named SHAPE.gguf in the folder: what
engine/backend.py's READ_CHUNK_* cost against reading in 512-row batches.

    nice -n -15 .venv/bin/python -m tools.lab.read_chunks qwen2.5-1.5b 512 2
"""

import statistics
import sys
import time
from pathlib import Path

import llama_cpp

from app.library import standin
from tools.lab.shapes import KNOWN_SHAPES, plan_from_shape

shape, n_read, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
path = Path(f"/tmp/read-chunks/{shape}.gguf")
if not path.exists():
    path.parent.mkdir(parents=True, exist_ok=True)
    plan = plan_from_shape(shape, KNOWN_SHAPES[shape], "Q4_K_M")
    standin.write_standin(plan, path)
llm = llama_cpp.Llama(str(path), n_ctx=4096, n_batch=512, n_threads=2, verbose=False)
toks = [(i * 7919) % 30000 + 100 for i in range(n_read)]
res: dict[int, list[float]] = {}
for _rep in range(reps):
    for chunk in (32, 64, 128, 512):
        llm.reset()
        llm.n_batch = chunk
        t = time.perf_counter()
        llm.eval(toks)
        dt = time.perf_counter() - t
        res.setdefault(chunk, []).append(n_read / dt)
for chunk, v in res.items():
    print(
        f"{shape} read {n_read} tokens, chunk {chunk:4d}: {statistics.median(v):7.1f} tok/s (runs {', '.join(f'{x:.1f}' for x in v)})"
    )
