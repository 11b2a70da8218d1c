"""`tandem serve`: the model on an OpenAI-compatible HTTP API (the server itself: app/api/serve.py).

Checks its arguments and the model files before anything listens, loads the engine in its worker
process, then runs the API under uvicorn until Ctrl+C or SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import socket
from pathlib import Path
from typing import Any

from app.api.connections import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, WRITE_TIMEOUT_S
from app.api.engine_bridge import DEFAULT_QUEUE, ApiEngine
from app.api.responses import model_id, say
from app.api.serve import DEFAULT_HOST, ApiServer, listen, uvicorn_config
from app.cli.options import add_draft_arg, add_engine_args
from app.host.messages import EngineInfo
from app.settings import SERVE_KEY_ENV, SERVE_PORT, api_key_from, api_key_warnings
from engine.config import NGRAM_LOOKUP
from engine.rpc import is_loopback


def add_serve_parser(sub: Any) -> None:
    s = sub.add_parser("serve", help="serve the model on an OpenAI-compatible HTTP API")
    s.set_defaults(run=cmd_serve)
    add_engine_args(s, model_default="default")
    add_draft_arg(s, NGRAM_LOOKUP, "draft GGUF path, `ngram` (default), or `none`")
    s.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this computer only)",
    )
    s.add_argument("--port", type=int, default=SERVE_PORT, help=f"port (default {SERVE_PORT})")
    s.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on every /v1 request (visible to other users in `ps`: "
        "prefer --api-key-file or the TANDEM_API_KEY environment variable)",
    )
    s.add_argument(
        "--api-key-file", default=None, metavar="PATH", help="read the API key from this file's first line"
    )
    s.add_argument(
        "--queue",
        type=int,
        default=DEFAULT_QUEUE,
        help=f"requests that may wait while one generates (default {DEFAULT_QUEUE})",
    )
    s.add_argument(
        "--timeout",
        type=float,
        default=BODY_TIMEOUT_S,
        metavar="SECONDS",
        help=f"a request's body must arrive within this (default {BODY_TIMEOUT_S:g}); a connection "
        f"that sends no request is closed after {HEADER_TIMEOUT_S:g} s, and a stream whose client "
        f"takes nothing is cancelled after {WRITE_TIMEOUT_S:g} s, or this if shorter",
    )
    s.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="URL",
        help="a web page allowed to use the API from a browser (scheme://host[:port]; repeatable). "
        "Requests from any other page are refused",
    )
    s.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name for this server that clients use in the Host header, beyond the address it "
        "listens on (behind a proxy; repeatable). Other names are refused (DNS rebinding)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    from app import paths
    from app.cli.options import UserError, engine_config, validate_engine_args
    from engine.gguf_info import read_gguf_info
    from engine.pairing import check_pair

    validate_engine_args(argparse.Namespace(**vars(args), max_tokens=1))  # --ctx, --threads, --rpc ...
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be between 0 and 65535 (got {args.port})")
    if args.queue < 0:
        raise UserError(f"--queue must be 0 or more (got {args.queue})")
    api_key = api_key_from(args.api_key, args.api_key_file, SERVE_KEY_ENV)
    for warning in api_key_warnings(args.api_key, args.api_key_file):
        say(f"warning: {warning}")
    if not is_loopback(args.host) and not api_key:
        say(
            f"warning: serving on {args.host} without --api-key: anyone who can reach this computer "
            "on the network can use the model"
        )
    elif not is_loopback(args.host):
        say(
            f"warning: serving on {args.host} over plain http: clients on other computers send the API "
            "key, their prompts and the replies unencrypted; use it on a network you trust"
        )
    config = engine_config(args)
    # The files' own checks, before anything listens: a bad model is an error line, at once.
    target = read_gguf_info(config.target_path)
    if config.draft.model:
        check_pair(target, read_gguf_info(config.draft.model))

    sock = listen(args.host, args.port)
    from functools import partial

    from app.host.supervisor import EngineSupervisor
    from app.host.worker import WorkerProcess

    log_path = paths.logs_dir() / "serve-worker.log"
    host = ApiEngine(
        EngineSupervisor(partial(WorkerProcess, log_path=log_path)), config, max_queue=args.queue
    )
    try:
        say(f"tandem serve: loading {Path(config.target_path).name}…")
        host.start()
        info = host.supervisor.wait_loaded()
        api = ApiServer(
            host, api_key, allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host)
        )
        api.body_timeout_s = max(0.1, args.timeout)
        api.header_timeout_s = min(HEADER_TIMEOUT_S, api.body_timeout_s)
        api.write_timeout_s = min(WRITE_TIMEOUT_S, api.body_timeout_s)
        return _run_uvicorn(api, info, sock)
    finally:
        host.shutdown()
        sock.close()


def _run_uvicorn(server: ApiServer, info: EngineInfo, sock: socket.socket) -> int:
    import uvicorn

    address = sock.getsockname()
    host_text = f"[{address[0]}]" if ":" in address[0] else address[0]
    url = f"http://{host_text}:{address[1]}/v1"
    say(f"tandem serve: {info.pair_note}")
    say(f"tandem serve: model '{model_id(info)}', context {info.n_ctx} tokens")
    say(f"tandem serve: listening on {url} (OpenAI-compatible; Ctrl+C stops)")
    server.listen_on(sock)
    config = uvicorn_config(server, graceful_shutdown_s=3)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again: SIGTERM then
    # ends here as Ctrl+C does.
    stop_handler = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, stop_handler)
    say("tandem serve: stopped")
    return 0
