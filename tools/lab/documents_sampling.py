"""What the chat's sampling does to copying a document (issue 25, "defaults that do not fight copying").

For each prompt of the bench's documents set, in one process, runs alternating: plain and n-gram
speculative decoding under each sampler below, and reports decode tok/s, the speedup, acceptance,
drafts taken from the document and how much of the reply copies the document (6-grams). The
samplers: greedy; the chat's defaults (temperature 0.7, top-k 40, top-p 0.95, min-p 0.05, repeat
penalty 1.1 over 64 tokens); the same with the penalty sparing tokens that occur in the attached
documents; the same without a penalty. Run it alone (`flock /tmp/tandem-bench.lock`): every figure
is a ratio measured side by side.

    python -m tools.lab.documents_sampling --model smollm2 --max-tokens 160 --seeds 3
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from app.cli.bench import load_prompts, render_prompt
from app.library.documents import read_document, with_documents
from app.library.model_spec import parse_model
from app.paths import resources_dir
from engine.chat import ChatPrompt, build_chat_prompt, generate_reply
from engine.config import NGRAM_LOOKUP, EngineConfig, SamplingParams, default_threads
from engine.events import Finished
from engine.session import Engine
from tools.lab.bench import copy_and_loop_shares


def document_penalty_exempt(engine: Engine, prompt: ChatPrompt) -> frozenset[int]:
    """The repetition penalty's exemptions for a prompt with documents: the engine's own (line
    breaks, speaker names) and every token of the documents (which a copy needs). Tried for the
    chat and not used: it made sampled replies repeat more, not copy more (docs/user/documents.md)."""
    tokens = prompt.tokens
    in_documents = {t for start, end in prompt.document_spans for t in tokens[start:end]}
    return frozenset(engine.penalty_exempt_tokens) | frozenset(in_documents)


CHAT = SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, repeat_last_n=64)
SAMPLERS = {
    "greedy": SamplingParams(),
    "chat (penalty 1.1)": CHAT,
    "chat, documents spared": CHAT,  # + the documents' tokens exempt (document_penalty_exempt)
    "chat, no penalty": dataclasses.replace(CHAT, repeat_penalty=1.0),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--seeds", type=int, default=3, help="sampled runs per sampler (seeds 1..N)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompts", default=None)
    ap.add_argument(
        "--acceptance-only",
        action="store_true",
        help="fixed 16-token drafts, speculative runs only: acceptance and copying, not speed "
        "(neither depends on the machine's load: the sampled text is the same with drafts)",
    )
    args = ap.parse_args(argv)
    config = EngineConfig(
        parse_model(args.model).resolve(),
        draft=NGRAM_LOOKUP,
        n_ctx=4096,
        n_threads=args.threads or default_threads(),
    )
    if args.acceptance_only:
        config = dataclasses.replace(config, adaptive=False, draft_max=16)
    engine = Engine(config)
    print(f"model {engine.info_target.name}, {args.max_tokens} tokens, threads {engine.n_threads}")
    print(
        "| prompt | sampler | plain tok/s | spec tok/s | speedup | accepted | from the document | copies the document | repeats itself |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for p in load_prompts(args.prompts, "documents"):
        documents = [read_document(resources_dir() / d) for d in p.documents]
        message = with_documents(p.request, documents)
        source = [t for d in documents for t in engine.tokenize(d.text, add_special=False)]
        prompt = build_chat_prompt(
            engine,
            [{"role": "user", "content": message}],
            max_tokens=args.max_tokens,
            documents=[d.text for d in documents],
        )
        assert render_prompt(engine, p).prompt == prompt.text  # the bench's prompt, the same text
        for name, params in SAMPLERS.items():
            seeds = [None] if params.is_greedy else list(range(1, args.seeds + 1))
            rows = []
            for seed in seeds:
                run_params = dataclasses.replace(params, seed=seed)
                if name == "chat, documents spared":
                    run_params = dataclasses.replace(
                        run_params, penalty_exempt=document_penalty_exempt(engine, prompt)
                    )
                elif params.repeat_penalty != 1.0:  # the penalty as it was: only line breaks and names spared
                    run_params = dataclasses.replace(run_params, penalty_exempt=engine.penalty_exempt_tokens)
                finals = []
                for speculate in (True,) if args.acceptance_only else (False, True):
                    engine.reset_cache()
                    events = generate_reply(
                        engine, prompt, run_params, max_tokens=args.max_tokens, speculate=speculate
                    )
                    final = [e for e in events if isinstance(e, Finished)][-1]
                    finals.append(final)
                a, b = finals[0], finals[-1]
                copied, looped = copy_and_loop_shares(a.token_ids, source)
                rows.append(
                    (
                        a.stats.decode_tokens_per_s,
                        b.stats.decode_tokens_per_s,
                        b.stats.acceptance_rate,
                        b.stats.n_accepted_document / b.stats.n_accepted if b.stats.n_accepted else 0.0,
                        copied,
                        looped,
                    )
                )
            med = [statistics.median(r[i] for r in rows) for i in range(6)]
            speedup = statistics.median(r[1] / r[0] for r in rows if r[0])
            print(
                f"| {p.name} | {name} | {med[0]:.1f} | {med[1]:.1f} | x{speedup:.2f} | {med[2]:.0%} | {med[3]:.0%} "
                f"| {med[4]:.0%} | {med[5]:.0%} |",
                flush=True,
            )
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
