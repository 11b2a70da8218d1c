"""The command line: `tandem generate`, `tandem bench`, `tandem models`.

Bad input ends with exit code 2 and one last stderr line starting `error:`, never a
traceback. Set TANDEM_DEBUG=1 to see the traceback of an unexpected failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from app.cli.cli_base import EXIT_BAD_INPUT, Parser, at_the_edge
from app.library.model_spec import parse_draft, parse_model
from app.paths import cost_cache_dir
from engine.config import DRAFT_MAX, EngineConfig, SamplingParams, default_threads
from engine.errors import TandemError


class UserError(TandemError):
    pass


def resolve_model(spec: str) -> str:
    """A model path, or `default` / `default-f16` / `default-costly` (app/library/model_spec.py)."""
    return parse_model(spec).resolve()


def resolve_draft(spec: str | None) -> str | None:
    return parse_draft(spec).resolve()


def _add_engine_args(p: argparse.ArgumentParser, model_default: str | None) -> None:
    p.add_argument(
        "--model",
        required=model_default is None,
        default=model_default,
        help="target GGUF file (or `default`: the embedded Gemma 3 270M)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--ctx", type=int, default=4096, help="context size in tokens")
    p.add_argument("--gpu-layers", type=int, default=0, help="layers to offload to the GPU")
    p.add_argument(
        "--rpc",
        default=None,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="llama.cpp RPC servers (`tandem rpc-server`) that take the target's --gpu-layers",
    )
    p.add_argument("--draft-max", type=int, default=DRAFT_MAX, help="longest draft per step")
    p.add_argument(
        "--fixed-draft", action="store_true", help="always draft --draft-max tokens (no adaptation)"
    )
    p.add_argument(
        "--model-drafts-only",
        action="store_true",
        help="with a draft model: no n-gram drafts from the text beside it",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tandem", description="Local LLM chat with speculative decoding.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)

    g = sub.add_parser("generate", help="generate text from a prompt")
    _add_engine_args(g, model_default="")  # required unless --remote (checked in cmd_generate)
    g.add_argument("--draft", default="none", help="draft GGUF path, `ngram`, or `none` (default)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", help="read the prompt from this file")
    g.add_argument(
        "--chat",
        action="store_true",
        help="use the prompt as a user message (the chat template, or a transcript for a base model)",
    )
    g.add_argument("--system", default=None, help="system message (with --chat)")
    g.add_argument("--max-tokens", type=int, default=256)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--min-p", type=float, default=0.05)
    g.add_argument("--repeat-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--json", action="store_true", help="print one JSON object at the end")
    g.add_argument(
        "--remote",
        default=None,
        metavar="URL",
        help="generate on an OpenAI-compatible server (--model: its model)",
    )
    g.add_argument("--api-key", default=None, help="the server's API key (with --remote)")

    b = sub.add_parser("bench", help="compare plain and speculative decoding side by side")
    _add_engine_args(b, model_default="default")
    b.add_argument("--draft", default="ngram", help="draft GGUF path or `ngram`")
    b.add_argument("--prompts", default=None, help='JSONL file of {"name", "set", "prompt"} lines')
    b.add_argument("--sets", default=None, help="comma-separated built-in sets (copy,code,qa,writing)")
    b.add_argument("--max-tokens", type=int, default=256)
    b.add_argument("--repeat", type=int, default=1)
    b.add_argument("--no-peer", action="store_true", help="skip llama-cpp-python's prompt lookup")
    b.add_argument("--no-lookup", action="store_true", help="skip llama.cpp's llama-lookup")
    b.add_argument(
        "--no-process", action="store_true", help="skip the whole-process runs (`tandem generate`, timed)"
    )
    b.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0: greedy)")
    b.add_argument("--seed", type=int, default=1, help="sampling seed (with --temperature)")
    b.add_argument("--turns", type=int, default=10, help="turns in the follow-up latency test (0: skip)")
    b.add_argument(
        "--again",
        action="store_true",
        help="measure each request asked a second time (Regenerate): the first answer, not timed, "
        "is what Tandem drafts from (and llama-lookup's dynamic n-gram cache); in this process only",
    )
    b.add_argument("--json", action="store_true")
    b.add_argument("--out", default=None, help="also write the report as Markdown here")

    try:
        from app.cli.cli_models import add_models_parser
    except ImportError:  # the model library is optional for the engine's CLI
        pass
    else:
        add_models_parser(sub)
    from app.cli.serve import add_serve_parser

    add_serve_parser(sub, _add_engine_args)
    from app.cli.rpc_server import add_rpc_server_parser

    add_rpc_server_parser(sub)
    return parser


def validate_engine_args(args: argparse.Namespace) -> None:
    if args.ctx < 16:
        raise UserError(f"--ctx must be at least 16 tokens (got {args.ctx})")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1 (got {args.threads})")
    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1 (got {args.max_tokens})")
    if args.draft_max < 1:
        raise UserError(f"--draft-max must be at least 1 (got {args.draft_max})")
    if getattr(args, "rpc", None):
        from engine.rpc import parse_servers

        parse_servers(args.rpc)  # RpcError (exit 2) for a bad address
        if args.gpu_layers < 1:
            raise UserError(
                "--rpc moves only the layers given by --gpu-layers to the RPC servers: "
                "add --gpu-layers N (99: all of them)"
            )


def _rpc_servers(args: argparse.Namespace) -> tuple[str, ...]:
    from engine.rpc import parse_servers

    return parse_servers(getattr(args, "rpc", None))


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        target_path=resolve_model(args.model),
        draft=resolve_draft(args.draft),
        n_ctx=args.ctx,
        n_threads=args.threads or default_threads(),
        n_gpu_layers=args.gpu_layers,
        rpc_servers=_rpc_servers(args),
        draft_max=args.draft_max,
        adaptive=not args.fixed_draft,
        draft_lookup=not args.model_drafts_only,
        cost_cache_dir=str(cost_cache_dir()),
    )


def read_prompt(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        prompt = args.prompt
    else:
        path = Path(args.prompt_file).expanduser()
        if not path.is_file():
            raise UserError(f"prompt file not found: {path}")
        try:
            prompt = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"prompt file is not UTF-8 text: {path}") from e
    if not prompt.strip():
        raise UserError("the prompt is empty")
    return prompt


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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    return at_the_edge(lambda: _run(parser, args))


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "generate":
        return cmd_generate(args)
    if args.command == "serve":
        from app.cli.serve import cmd_serve

        return cmd_serve(args)
    if args.command == "bench":
        from app.cli.bench import cmd_bench

        return cmd_bench(args)
    if args.command == "models":
        from app.cli.cli_models import run_models

        return run_models(args)
    if args.command == "rpc-server":
        from app.cli.rpc_server import run_rpc_server

        return run_rpc_server(args)
    parser.print_help()
    return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
