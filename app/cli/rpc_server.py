"""`tandem rpc-server`: lend this machine's memory and cores to another machine's Tandem.

It runs llama.cpp's own `ggml-rpc-server` (built by `make setup` from the same sources as the
llama.cpp Tandem uses, so both ends speak the same protocol version), after checking the
arguments and the port, and after saying plainly that the protocol has no authentication.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import subprocess
import sys

from app.cli.cli_base import Parser
from engine.errors import TandemError
from engine.rpc import DEFAULT_PORT, PROTOCOL, find_server_binary, is_loopback


def add_rpc_server_parser(sub: argparse._SubParsersAction[Parser]) -> None:
    p = sub.add_parser(
        "rpc-server",
        help="lend this machine to another Tandem: llama.cpp's RPC server (no authentication)",
        description=(
            "Run llama.cpp's RPC server here. Another machine's `tandem generate|serve|bench "
            "--rpc HOST:PORT --gpu-layers N` (or the window's Settings) then keeps that many of its "
            "target model's layers in this machine's memory and computes them on its cores. The "
            "protocol has no authentication and no encryption: bind to a trusted network only."
        ),
    )
    p.set_defaults(run=run_rpc_server)
    p.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default: {DEFAULT_PORT})")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's choice)")
    p.add_argument(
        "--cache",
        action="store_true",
        help="keep received tensors in a local file cache (~/.cache/llama.cpp/rpc): later loads are faster",
    )


def notice(host: str, port: int) -> list[str]:
    """What is printed before the server starts: the security warning first."""
    lines = [
        f"Tandem RPC server (llama.cpp ggml-rpc-server, protocol {'.'.join(map(str, PROTOCOL))}) "
        f"on {host}:{port}.",
        "The RPC protocol has no authentication and no encryption: anyone who can reach this port "
        "can run computations here and read what is sent. Bind it to a trusted network only.",
    ]
    if not is_loopback(host):
        lines.append(
            f"warning: {host} is not a loopback address: every machine that can reach {host}:{port} "
            "can use this server. Make sure only trusted machines can."
        )
    lines.append(f"Use it from another machine with: tandem generate --rpc {host}:{port} --gpu-layers 99 ...")
    return lines


def validate(args: argparse.Namespace) -> None:
    try:
        ipaddress.IPv4Address(args.host)
    except ValueError as e:
        # ggml-rpc-server binds with inet_addr(): an IPv4 address, not a name.
        raise TandemError(
            f"--host must be an IPv4 address such as 127.0.0.1 or 192.168.1.20 (got {args.host!r})"
        ) from e
    if not 0 < args.port < 65536:
        raise TandemError(f"--port must be from 1 to 65535 (got {args.port})")
    if args.threads is not None and args.threads < 1:
        raise TandemError(f"--threads must be at least 1 (got {args.threads})")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((args.host, args.port))
        except OSError as e:
            raise TandemError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from e


def run_rpc_server(args: argparse.Namespace) -> int:
    validate(args)
    binary = find_server_binary()
    if binary is None:
        raise TandemError("ggml-rpc-server is not installed; `make setup` builds it into .venv/bin")
    for line in notice(args.host, args.port):
        print(line, file=sys.stderr)
    sys.stderr.flush()
    cmd = [binary, "--host", args.host, "--port", str(args.port)]
    cmd += ["--threads", str(args.threads)] if args.threads is not None else []
    cmd += ["--cache"] if args.cache else []
    if os.name == "posix":
        os.execv(binary, cmd)  # the server replaces this process: signals and exit code are its own
    try:  # pragma: no cover - Windows
        return subprocess.call(cmd)
    except KeyboardInterrupt:  # pragma: no cover
        return 130
