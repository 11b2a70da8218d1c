"""`tandem bench dev`: the developer commands beside the user's bench (their parsers here, their
work in app/cli/replay_bench.py).

- `tandem bench dev replay`: the draft policy on the kept traces against every kept cost curve
  (engine/replay.py, no model needed).
- `tandem bench dev cost-curve`: this machine's verify costs as a curve file (or a stand-in's of a
  known shape, `--standin`).
- `tandem bench dev record-traces`: greedy replies to the copy prompts as token ids.

They live under `tandem bench` (not in tools/) because a curve is measured on the machine it
describes, with the bench's own timing code and engine options, from an installed `tandem` as
well as from a checkout (docs/architecture.md). `tandem bench --help` shows the user's bench
only; the flags these commands replaced (`tandem bench --replay`, `--cost-curve`,
`--record-traces` and their options) end with one line naming the command to use instead.

This module imports nothing heavy: building the parser must stay cheap for `tandem --help`.
"""

from __future__ import annotations

import argparse

from app.cli.cli_base import Parser, moved_flag
from app.cli.options import add_engine_args
from engine.config import PLAIN_DECODING

DEV = "dev"
DEV_COMMANDS = ("replay", "cost-curve", "record-traces")

# The flags `tandem bench` had for this work, and the command each moved to.
MOVED_FLAGS: dict[str, str] = {
    "--replay": "replay",
    "--curves": "replay",
    "--traces": "replay",
    "--python-scale": "replay",
    "--cost-curve": "cost-curve",
    "--curve-name": "cost-curve",
    "--standin": "cost-curve",
    "--record-traces": "record-traces",
}
_VALUE_FLAGS = ("--curves", "--traces", "--python-scale", "--curve-name", "--standin")


def moved_flag_message(flag: str) -> str:
    return (
        f"`tandem bench {flag}` moved to a developer command: `tandem bench dev {MOVED_FLAGS[flag]}` "
        f"(`tandem bench dev --help`)"
    )


def add_bench_dev_parser(bench: argparse.ArgumentParser) -> None:
    """`tandem bench dev COMMAND` under the bench's parser, hidden from `tandem bench --help`,
    and the old flags as hidden options that say where they went."""
    for flag in MOVED_FLAGS:
        nargs = "?" if flag in _VALUE_FLAGS else 0
        bench.add_argument(flag, action=moved_flag(moved_flag_message), nargs=nargs, help=argparse.SUPPRESS)
    bench.epilog = "For developers (replay, cost curves, traces): `tandem bench dev --help`."
    groups = bench.add_subparsers(dest="bench_group", metavar="", help=argparse.SUPPRESS, parser_class=Parser)
    dev = groups.add_parser(
        DEV,
        help="for developers: replay the draft policy, measure cost curves, record traces",
        description="For developers of Tandem's draft policy, not for measuring Tandem's speed "
        "(that is `tandem bench`): replay the policy on kept replies against kept machines' costs, "
        "measure this machine's costs, record replies. What they write lands in resources/replay.",
    )
    commands = dev.add_subparsers(dest="dev_command", required=True, metavar="COMMAND", parser_class=Parser)

    r = commands.add_parser(
        "replay",
        help="the draft policy on the kept traces against every kept cost curve (no model needed)",
    )
    r.add_argument("--curves", default=None, help="folder of cost curves (default: every kept set)")
    r.add_argument("--traces", default=None, help="folder of traces (default: every kept set)")
    r.add_argument("--python-scale", default=None, help="comma-separated slow-core factors (default 1,3.5)")
    r.add_argument("--out", default=None, help="also write the report as Markdown here")

    c = commands.add_parser("cost-curve", help="measure this machine's verify costs t(n) as a curve file")
    _add_model_args(c)
    c.add_argument("--curve-name", default=None, help="the curve's name (default: host and build)")
    c.add_argument(
        "--standin",
        default=None,
        metavar="SHAPE[:QUANT]",
        help="time a stand-in of a known shape (random weights, e.g. qwen2.5-7b:Q4_K_M) "
        "at every batch size 1-64 instead of --model; deleted after",
    )
    c.add_argument("--out", default=None, help="the curve file (default: resources/replay/.../curves)")

    t = commands.add_parser("record-traces", help="record greedy replies to the copy prompts as traces")
    _add_model_args(t)
    t.add_argument("--out", default=None, help="folder for the traces (default: resources/replay/traces)")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    add_engine_args(p, model_default="default")
    p.set_defaults(draft=PLAIN_DECODING)  # each command picks its own (app/cli/replay_bench.py)
    p.add_argument("--prompts", default=None, help='JSONL file of {"name", "set", "prompt"} lines')
    p.add_argument("--sets", default=None, help="comma-separated built-in sets (default: copy)")
    p.add_argument("--max-tokens", type=int, default=256)
