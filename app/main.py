"""`tandem`: the window by default; `tandem generate|bench|models|serve|rpc-server ...` on the command line."""

from __future__ import annotations

import os
import sys

CLI_COMMANDS = ("generate", "bench", "models", "serve", "rpc-server", "links")


def main(argv: list[str] | None = None) -> int:
    # In a PyInstaller bundle, a "spawn" worker re-runs this executable: hand it to multiprocessing.
    import multiprocessing

    multiprocessing.freeze_support()
    # A local-first app: huggingface_hub must not report usage (it reads this at import).
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "help":  # `tandem help [COMMAND]`: printed, no window (no display needed)
        return print_help(args[1:])
    if args and args[0] in CLI_COMMANDS:
        from app.cli.cli import main as cli_main

        return cli_main(args)
    from app.cli.unknown import say_unknown, unknown_window_argument

    if (unknown := unknown_window_argument(args)) is not None:  # never a second window, nor Qt
        return say_unknown(unknown)
    from app.gui import run_gui

    return run_gui(args)


def print_help(rest: list[str]) -> int:
    """`tandem help`: the window's options and the subcommands; `tandem help COMMAND`: its options."""
    if rest and rest[0] in CLI_COMMANDS:
        from app.cli.cli import build_parser

        build_parser().parse_args([rest[0], "--help"])  # prints, and exits 0
        return 0
    from app.gui import make_parser

    make_parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
