"""Time to the first token with a long attachment, plain against n-gram drafting (issue 25's target:
within 5% of plain prefill). The n-gram drafter indexes the whole prompt, the document included,
before its first draft: that indexing is the cost measured here. Runs alternate, each from an
empty KV cache; medians. Run it alone (`flock /tmp/tandem-bench.lock`).

    python -m tools.lab.documents_ttft --model smollm2 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from app.library.documents import read_document, with_documents
from app.library.model_spec import parse_model
from app.paths import resources_dir
from engine.chat import ChatPrompt, build_chat_prompt, generate_reply
from engine.config import NGRAM_LOOKUP, EngineConfig, SamplingParams, default_threads
from engine.events import Finished, TextPiece
from engine.session import Engine

DOCUMENTS = ("documents/apache-2.0.txt", "documents/reply_memory.py")


def first_token_s(engine: Engine, prompt: ChatPrompt, speculate: bool) -> tuple[float, float]:
    """(seconds to the first text, the prefill's seconds) from an empty cache."""
    engine.reset_cache()
    t0 = time.perf_counter()
    first = None
    final = None
    for event in generate_reply(engine, prompt, SamplingParams(), max_tokens=8, speculate=speculate):
        if isinstance(event, TextPiece) and first is None and event.text:
            first = time.perf_counter() - t0
        elif isinstance(event, Finished):
            final = event
    assert final is not None and first is not None
    return first, final.stats.prefill_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    engine = Engine(
        EngineConfig(
            parse_model(args.model).resolve(),
            draft=NGRAM_LOOKUP,
            n_ctx=8192,
            n_threads=args.threads or default_threads(),
        )
    )
    documents = [read_document(resources_dir() / d) for d in DOCUMENTS]
    message = with_documents("Summarise these in three sentences.", documents)
    prompt = build_chat_prompt(
        engine, [{"role": "user", "content": message}], max_tokens=8, documents=[d.text for d in documents]
    )
    n_doc = sum(b - a for a, b in prompt.document_spans)
    plain: list[tuple[float, float]] = []
    spec: list[tuple[float, float]] = []
    for _ in range(args.runs):
        plain.append(first_token_s(engine, prompt, speculate=False))
        spec.append(first_token_s(engine, prompt, speculate=True))
    engine.close()
    p_ttft, s_ttft = statistics.median(x[0] for x in plain), statistics.median(x[0] for x in spec)
    p_fill, s_fill = statistics.median(x[1] for x in plain), statistics.median(x[1] for x in spec)
    print(
        f"model {engine.info_target.name}; prompt {prompt.n_tokens} tokens ({n_doc} of them documents); "
        f"{args.runs} runs each, alternating, medians"
    )
    print(f"plain: first token {p_ttft:.3f} s (prefill {p_fill:.3f} s)")
    print(f"n-gram: first token {s_ttft:.3f} s (prefill {s_fill:.3f} s)")
    print(f"n-gram / plain, first token: {s_ttft / p_ttft:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
