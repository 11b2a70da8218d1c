"""What `tandem` was given that it does not know: an unknown command or option is named in one
line (`tandem: unknown command 'frobnicate' (see tandem help)`), exit code 2, before any window
or Qt is loaded. No Qt here: this runs where there is no display.

The window's own command line passes Qt's options through to QApplication (`-platform offscreen`,
`-style Fusion`...), so those are known too; anything else that reaches the window is a mistake,
never a second window.
"""

from __future__ import annotations

import argparse
import sys

EXIT_BAD_INPUT = 2

# QGuiApplication/QApplication's own options (either `-name` or `--name`); these take a value.
_QT_VALUE_OPTIONS = frozenset({
    "platform", "platformpluginpath", "platformtheme", "plugin", "qmljsdebugger", "style", "stylesheet",
    "session", "display", "geometry", "title", "name", "qwindowgeometry", "qwindowtitle", "qwindowicon",
    "fontengine", "graphicssystem", "font", "fn", "bg", "background", "fg", "foreground", "btn",
    "button", "visual", "ncols", "cmap", "im", "inputstyle",
})  # fmt: skip
_QT_FLAGS = frozenset(
    {"reverse", "widgetcount", "nograb", "dograb", "sync", "testability", "multiprocessing-fork"}
)
_WINDOW_OPTIONS = ("--model", "--draft")  # the window's options that take a value (app/gui.py make_parser)


def say_unknown(what: str) -> int:
    """Print the one line and return the exit code (2)."""
    sys.stdout.flush()
    sys.stderr.write(f"tandem: {what} (see tandem help)\n")
    sys.stderr.flush()
    return EXIT_BAD_INPUT


def _window_option(arg: str) -> bool:
    """`--model`, `--draft` or a prefix argparse would take for one (`--mod`)."""
    name = arg.split("=", 1)[0]
    return len(name) > 2 and any(o.startswith(name) for o in _WINDOW_OPTIONS)


def unknown_window_argument(argv: list[str]) -> str | None:
    """What the window's command line does not know, said as `unknown command 'x'` or
    `unknown option '--x'`; None when every argument is the window's or Qt's."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help") or arg.startswith("tandem://"):
            i += 1
        elif arg.startswith("--") and _window_option(arg):
            i += 1 if "=" in arg else 2
        elif arg.startswith("-") and len(arg) > 1:
            name = arg.lstrip("-").split("=", 1)[0]
            if name in _QT_VALUE_OPTIONS:
                i += 1 if "=" in arg else 2
            elif name in _QT_FLAGS or name.startswith("psn_"):  # macOS Finder's process serial number
                i += 1
            else:
                return f"unknown option '{arg}'"
        else:
            return f"unknown command '{arg}'"
    return None


def _options_of(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of a parser and of the subcommands below it."""
    names = set(parser._option_string_actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                names |= _options_of(child)
    return names


def unknown_option(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first `--option` in `tandem COMMAND ...` that COMMAND (and its subcommands) does not know,
    as "unknown option '--promt' for generate (see tandem help generate)"; None when all are known.
    argparse alone would first complain about a missing required option and never name the typo."""
    if not argv:
        return None
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = sub.choices.get(argv[0]) if sub is not None else None
    if command is None:
        return None
    known = _options_of(command)
    for arg in argv[1:]:
        if arg == "--":
            break
        if not arg.startswith("--") or len(arg) == 2:
            continue
        name = arg.split("=", 1)[0]
        if name in known or sum(k.startswith(name) for k in known if k.startswith("--")) == 1:
            continue
        return f"unknown option '{name}' for {argv[0]} (see tandem help {argv[0]})"
    return None
