"""`tandem links register|unregister|reg-file`: make this Tandem open tandem:// links on Windows
(app/library/links.py says how each desktop learns it; the window registers itself at start where no
working registration exists, so these are for doing it by hand)."""

from __future__ import annotations

import argparse
from pathlib import Path

from app import paths
from app.cli.cli_base import EXIT_OK, Parser
from app.library import links
from engine.errors import TandemError


def add_links_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "links",
        help="open tandem:// links from the Hugging Face hub with this Tandem (Windows)",
        description=(
            "Register this Tandem as the program that opens tandem:// links for you (Windows: "
            "HKEY_CURRENT_USER\\Software\\Classes\\tandem, no administrator rights). On Linux "
            "packaging/linux/install.sh registers it; on macOS Tandem.app declares it."
        ),
    )
    p.set_defaults(run=run_links)
    what = p.add_subparsers(dest="links_command", parser_class=Parser, required=True)
    what.add_parser("register", help="this tandem.exe opens tandem:// links (this user)")
    what.add_parser("unregister", help="remove the registration; the window will not register again")
    reg = what.add_parser("reg-file", help="write the registration as a .reg file (any system)")
    reg.add_argument("path", help="the .reg file to write")
    reg.add_argument("--exe", default=None, help="the tandem.exe it names (default: this one)")


def _program() -> str:
    exe = links.this_program()
    if exe is None:
        raise TandemError(
            "this Tandem runs from Python, not from a bundle: register the bundle's tandem.exe "
            "(run `tandem.exe links register` there), or give --exe to reg-file"
        )
    return exe


def run_links(args: argparse.Namespace) -> int:
    mark = paths.home() / links.UNREGISTERED_MARK
    if args.links_command == "reg-file":
        exe = args.exe or _program()
        if not Path(exe).is_absolute():
            raise TandemError(f"--exe must be the full path of tandem.exe, not {exe}")
        text = links.windows_reg_file(exe)
        try:
            Path(args.path).write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
        except OSError as e:
            raise TandemError(f"cannot write {args.path}: {e.strerror or e}") from None
        print(f"wrote {args.path}: double-click it on Windows (or `reg import {args.path}`)")
        return EXIT_OK
    if args.links_command == "register":
        exe = _program()
        links.register_windows(exe)
        mark.unlink(missing_ok=True)
        print(f"tandem:// links now open {exe}")
        return EXIT_OK
    links.unregister_windows()
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text("tandem links unregister: the window does not register tandem:// again\n")
    print("tandem:// links are no longer registered for this user")
    return EXIT_OK
