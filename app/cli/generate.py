"""`tandem generate`: one prompt through the engine, the text to stdout and the numbers to stderr
(or one JSON object with --json); with --remote, through an OpenAI-compatible server."""

from __future__ import annotations

import argparse
import json
import sys
import time

from app.cli.options import UserError, engine_config, read_prompt, validate_engine_args
from engine.config import SamplingParams


def cmd_generate(args: argparse.Namespace) -> int:
    from engine.events import Finished, TextPiece
    from engine.session import Engine

    if args.remote:
        from app.cli.remote import cmd_generate_remote

        return cmd_generate_remote(args)
    if not args.model:
        raise UserError("the following arguments are required: --model (or --remote URL)")
    validate_engine_args(args)
    if args.temperature < 0:
        raise UserError(f"--temperature must be 0 or more (got {args.temperature})")
    if not 0.0 < args.top_p <= 1.0:
        raise UserError(f"--top-p must be in (0, 1] (got {args.top_p})")
    if not 0.0 <= args.min_p <= 1.0:
        raise UserError(f"--min-p must be in [0, 1] (got {args.min_p})")
    prompt = read_prompt(args)
    params = SamplingParams(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
    )
    t_load = time.perf_counter()
    engine = Engine(engine_config(args))
    load_s = time.perf_counter() - t_load
    try:
        if args.chat:
            # The model's chat template, or for a base model the window's transcript, whose reply
            # ends at the next speaker line (engine.chat).
            from engine.chat import chat_prompt, generate_reply

            prompt = chat_prompt(engine, [{"role": "user", "content": prompt}], args.system or "")
            events = generate_reply(engine, prompt, params, max_tokens=args.max_tokens, stop=args.stop)
        else:
            events = engine.generate(prompt, params, max_tokens=args.max_tokens, stop=args.stop)
        finished: Finished | None = None
        for event in events:
            if isinstance(event, TextPiece) and not args.json:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None
        s = finished.stats
        if args.json:
            result = {
                "text": finished.text,
                "token_ids": list(finished.token_ids),
                **s.as_dict(),
                "load_s": round(load_s, 4),
                "stop_reason": finished.stop_reason,
                "model": engine.info_target.name,
                "draft": engine.info_draft.name if engine.info_draft else None,
            }
            print(json.dumps(result, ensure_ascii=False))
        else:
            sys.stdout.write("\n")
            print(
                f"[{s.speculation}] {s.n_generated} tokens, {s.decode_tokens_per_s:.1f} tok/s decode, "
                f"{s.prefill_tokens_per_s:.1f} tok/s prefill ({s.n_prompt_tokens} prompt tokens), "
                f"drafted {s.n_drafted}, accepted {s.n_accepted} ({s.acceptance_rate:.0%})"
                + (f", {s.n_accepted_text} of them from the text" if s.n_accepted_text else "")
                + f", stop: {finished.stop_reason}",
                file=sys.stderr,
            )
    finally:
        engine.close()
    return 0
