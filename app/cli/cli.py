"""The command line: `tandem generate`, `tandem bench`, `tandem serve`, `tandem models`,
`tandem rpc-server`, `tandem links`. This module builds the parser and dispatches; the subcommands live in their
own modules, and what they share in app/cli/options.py (nothing imports this module back).

Bad input ends with exit code 2 and one last stderr line starting `error:`, never a
traceback. Set TANDEM_DEBUG=1 to see the traceback of an unexpected failure.
"""

from __future__ import annotations

import argparse
import sys

from app.cli.bench import add_bench_parser
from app.cli.cli_base import EXIT_BAD_INPUT, Parser, at_the_edge, fail
from app.cli.generate import cmd_generate
from app.cli.options import add_draft_arg, add_engine_args
from engine.config import PLAIN_DECODING


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tandem", description="Local LLM chat with speculative decoding.")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)

    g = sub.add_parser("generate", help="generate text from a prompt")
    g.set_defaults(run=cmd_generate)
    add_engine_args(g, model_default="")  # required unless --remote (checked in cmd_generate)
    add_draft_arg(g, PLAIN_DECODING, "draft GGUF path, `ngram`, or `none` (default)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", help="read the prompt from this file")
    g.add_argument(
        "--chat",
        action="store_true",
        help="use the prompt as a user message (the chat template, or a transcript for a base model)",
    )
    g.add_argument("--system", default=None, help="system message (with --chat)")
    g.add_argument(
        "--attach",
        action="append",
        default=[],
        metavar="FILE",
        help="a document the message is about (repeatable): text, Markdown, source code, PDF, .docx",
    )
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
    g.add_argument(
        "--api-key",
        default=None,
        help="the server's API key (with --remote; visible to other users in `ps`: prefer "
        "--api-key-file or the TANDEM_REMOTE_API_KEY environment variable)",
    )
    g.add_argument(
        "--api-key-file", default=None, metavar="PATH", help="read the server's API key from this file"
    )

    add_bench_parser(sub)  # the user's question (app/cli/bench.py)

    from app.cli.cli_models import add_models_parser

    add_models_parser(sub)
    from app.cli.serve import add_serve_parser

    add_serve_parser(sub)
    from app.cli.rpc_server import add_rpc_server_parser

    add_rpc_server_parser(sub)
    from app.cli.links import add_links_parser

    add_links_parser(sub)
    return parser


def commands_said() -> str:
    """The subcommands, one a line with what each does (the help of `tandem --help` ends with them)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [f"  tandem {c.dest:<11} {c.help}" for c in sub._choices_actions]
    return "commands (`tandem help COMMAND` for each one's options):\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    from app.cli.unknown import unknown_option

    given = sys.argv[1:] if argv is None else argv
    if (unknown := unknown_option(parser, given)) is not None:
        return fail(unknown)  # as a command's other usage mistakes are said
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    return at_the_edge(lambda: args.run(args))  # each subcommand's parser sets its `run`


if __name__ == "__main__":
    sys.exit(main())
