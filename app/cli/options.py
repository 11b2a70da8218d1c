"""What the subcommands share: the engine's options, their checks, the EngineConfig they make,
the prompt they read, and the error a user can act on (exit code 2, app/cli/cli_base.py).

The dispatcher (app/cli/cli.py) and every subcommand import these; none of them imports the
dispatcher back.
"""

from __future__ import annotations

import argparse

from app.library.model_spec import parse_model, resolve_draft
from app.paths import cost_cache_dir, user_path
from engine.config import DEFAULT_CTX, DRAFT_MAX, DraftChoice, EngineConfig, default_threads
from engine.errors import TandemError


class UserError(TandemError):
    pass


def add_draft_arg(p: argparse.ArgumentParser, default: DraftChoice, help: str) -> None:
    """--draft, read once here into the typed choice every subcommand then passes on (`default`
    as is: argparse reads only a text default with `type`)."""
    p.add_argument("--draft", type=DraftChoice.parse, default=default, help=help)


def add_engine_args(p: argparse.ArgumentParser, model_default: str | None) -> None:
    p.add_argument(
        "--model",
        required=model_default is None,
        default=model_default,
        help="target GGUF file, `default` (the embedded Gemma 3 270M, a base model) "
        "or `smollm2` (SmolLM2-135M-Instruct, offline)",
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="context size in tokens")
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


def engine_config(args: argparse.Namespace) -> EngineConfig:
    from engine.rpc import parse_servers

    return EngineConfig(
        target_path=parse_model(args.model).resolve(),
        draft=resolve_draft(args.draft),
        n_ctx=args.ctx,
        n_threads=args.threads or default_threads(),
        n_gpu_layers=args.gpu_layers,
        rpc_servers=parse_servers(getattr(args, "rpc", None)),
        draft_max=args.draft_max,
        adaptive=not args.fixed_draft,
        cost_cache_dir=str(cost_cache_dir()),
    )


def read_prompt(args: argparse.Namespace) -> str:
    prompt: str
    if args.prompt is not None:
        prompt = args.prompt
    else:
        path = user_path(args.prompt_file)
        if not path.is_file():
            raise UserError(f"prompt file not found: {path}")
        try:
            prompt = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise UserError(f"prompt file is not UTF-8 text: {path}") from e
    if not prompt.strip():
        raise UserError("the prompt is empty")
    return prompt
