"""The engine on an OpenAI-compatible HTTP API: the server of `tandem serve` (app/cli/serve.py)
and of the window's serve toggle (ui/settings/serve_toggle.py).

Built on Starlette served by uvicorn, the ASGI stack most Python model servers stand on: the HTTP
parsing, keep-alive and shutdown are theirs. The two generation endpoints are plain ASGI apps
under Starlette's router: a generation needs the request's receive channel for its whole life, to
notice a client that leaves and cancel its reply within one step. The engine runs in the worker
process the window uses, under the same supervisor (app/host): a native crash kills only that
child, the request it served gets a 500, and the next request starts a fresh engine.

Speculation is reported the way existing clients read it: llama-server's `timings` and LM
Studio's `stats`, on every response and on the last streamed chunk; `"speculation": "off"` in a
request decodes it plainly, and the response's `speculation` says what ran. Each streamed text
chunk also says which of its tokens the draft wrote (`"tandem": {"drafted", "n_tokens"}`, an
extension other clients ignore; the window on a server tints from it).

Beside this file: requests.py (a request checked, the errors), responses.py (the JSON sent back),
endpoints.py (the two generation endpoints), engine_bridge.py (the engine seen from the event
loop) and connections.py (what a client can hold open).
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import ipaddress
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.api.connections import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    WRITE_TIMEOUT_S,
    Connections,
    bounded_protocol,
    raise_open_file_limit,
)
from app.api.endpoints import Endpoint
from app.api.engine_bridge import ApiEngine
from app.api.requests import ApiError, Receive, Scope, Send
from app.api.responses import model_id, say
from app.host.messages import EngineInfo

DEFAULT_HOST = "127.0.0.1"


class ApiServer:
    def __init__(
        self,
        host: ApiEngine,
        api_key: str | None = None,
        allowed_origins: tuple[str, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
    ) -> None:
        """allowed_origins: web pages (scheme://host[:port], or "*") that may use the API from a
        browser; allowed_hosts: more Host names than the addresses served (or "*": any)."""
        self.host = host
        self.api_key = api_key
        self.allowed_origins = tuple(o.rstrip("/").lower() for o in allowed_origins)
        self.allowed_hosts = tuple(h.lower().rstrip(".") for h in allowed_hosts)
        self.address: tuple[str, int] | None = None  # where it listens (listen_on)
        # A reason to refuse every caller without a key (the window relaying an engine on another
        # server with the user's key for it), or None: asked on each request.
        self.needs_key: Callable[[], str | None] = lambda: None
        self.connections = Connections()  # what clients hold open (bounded_protocol)
        self.body_timeout_s = BODY_TIMEOUT_S  # a request's body must arrive within this
        self.header_timeout_s = HEADER_TIMEOUT_S  # an idle connection is closed after this
        self.write_timeout_s = WRITE_TIMEOUT_S  # a stream whose client takes nothing this long ends

    def listen_on(self, sock: socket.socket) -> None:
        self.address = sock.getsockname()[:2]

    # -- checks shared by every endpoint

    def check_boundary(self, headers: Any) -> str | None:
        """Refuse what a web page can make a browser send: a Host other than the addresses served
        (DNS rebinding: a page on attacker.example whose name now points at 127.0.0.1), an Origin
        other than the server's own or one allowed. None: allowed; else the sentence of a 403.
        Clients that are not browsers send no Origin and the Host they were given."""
        host_header = headers.get("host")
        if host_header is not None and not self._is_served_host(host_header):
            name = _host_name(host_header)
            return (
                f"the Host '{name}' is not an address this server listens on (a web page reached "
                "it by another name); use its address, or allow the name with --allow-host"
            )
        origin = headers.get("origin")
        if origin is None or self.origin_allowed(origin):
            return None
        origin = origin.rstrip("/").lower()
        if host_header is not None and origin in (
            f"http://{host_header.lower()}",
            f"https://{host_header.lower()}",
        ):
            return None
        return (
            f"requests from web pages are refused: the page at {origin} may not use this API "
            "(allow it with --allow-origin, or in the window's settings)"
        )

    def origin_allowed(self, origin: str) -> bool:  # by --allow-origin
        return "*" in self.allowed_origins or origin.rstrip("/").lower() in self.allowed_origins

    def _is_served_host(self, host_header: str) -> bool:
        if "*" in self.allowed_hosts:
            return True
        name = _host_name(host_header)
        if name in self.allowed_hosts:
            return True
        bound = self.address[0] if self.address else "127.0.0.1"
        try:
            bound_ip = ipaddress.ip_address(bound)
        except ValueError:
            bound_ip = None
        wildcard = bound_ip is not None and bound_ip.is_unspecified
        loopback = bound_ip is None or bound_ip.is_loopback or wildcard
        if name == "localhost":
            return loopback
        try:
            ip = ipaddress.ip_address(name)
        except ValueError:
            # A name: only this computer's own names, and only where other computers may connect.
            return wildcard and name in _own_names()
        if wildcard:
            return True
        return ip == bound_ip or (loopback and ip.is_loopback)

    def check_auth(self, headers: Any) -> None:
        refusal = self.needs_key()
        if refusal is not None and not self.api_key:
            raise ApiError(403, refusal, code="api_key_required")
        if not self.api_key:
            return
        given = headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), self.api_key.encode()
        ):
            what = "no API key was given" if not given else "the API key is not valid"
            raise ApiError(
                401,
                f"{what}: send 'Authorization: Bearer KEY' with the key this server was started with",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def check_model(self, name: str | None, info: EngineInfo) -> None:
        if name in (None, "", model_id(info), info.target_name, Path(info.target_path).name):
            return
        raise ApiError(
            404,
            f"The model '{name}' does not exist: this server serves '{model_id(info)}'",
            param="model",
            code="model_not_found",
        )

    # -- endpoints

    def build_app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def models(request: Request) -> JSONResponse:
            try:
                self.check_auth(request.headers)
            except ApiError as e:
                return JSONResponse(e.body(), e.status, headers=e.headers)
            info = self.host.supervisor.info
            data = []
            if info is not None:
                data.append(
                    {
                        "id": model_id(info),
                        "object": "model",
                        "created": self.host.created,
                        "owned_by": "tandem",
                        "speculation": info.speculation,
                        "draft_model": info.draft_name or None,
                        "n_ctx": info.n_ctx,
                    }
                )
            return JSONResponse({"object": "list", "data": data})

        async def health(request: Request) -> JSONResponse:
            if self.host.supervisor.info is not None:
                return JSONResponse({"status": "ok", **self.host.load()})
            if self.host.supervisor.is_loading or self.host.supervisor.n_loads_ended == 0:
                return JSONResponse({"status": "loading"}, 503)
            # The last load failed (a broken or missing model): not "loading" for ever.
            return JSONResponse({"status": "error", "reason": self.host.supervisor.load_error}, 503)

        async def http_error(request: Request, exc: Exception) -> JSONResponse:
            assert isinstance(exc, HTTPException)
            error = ApiError(exc.status_code, exc.detail, code=None)
            return JSONResponse(error.body(), exc.status_code, headers=dict(exc.headers or {}))

        async def server_error(request: Request, exc: Exception) -> JSONResponse:
            say(f"tandem serve: unexpected error: {type(exc).__name__}: {exc}")
            error = ApiError(500, f"unexpected server error: {type(exc).__name__}", kind="server_error")
            return JSONResponse(error.body(), 500)

        app = Starlette(
            routes=[
                Route("/v1/models", models, methods=["GET"]),
                Route("/v1/chat/completions", Endpoint(self, chat=True), methods=["POST"]),
                Route("/v1/completions", Endpoint(self, chat=False), methods=["POST"]),
                Route("/health", health, methods=["GET"]),
            ],
            exception_handlers={HTTPException: http_error, Exception: server_error},
        )
        return _Boundary(self, app)


def _host_name(host_header: str) -> str:
    """The name in a Host header, without its port: "127.0.0.1:8080" -> "127.0.0.1", "[::1]:80" -> "::1"."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


@functools.lru_cache(maxsize=1)
def _own_names() -> frozenset[str]:
    """This computer's names, as another computer on the network may reach it."""
    names = {socket.gethostname().lower()}
    with contextlib.suppress(OSError):
        names.add(socket.getfqdn().lower())
    names |= {f"{n.split('.')[0]}.local" for n in list(names)}
    return frozenset(n.rstrip(".") for n in names if n)


class _Boundary:
    """The API's edge with web pages, before any route: the Host and Origin checks (403 with a
    sentence), the CORS answers for the origins allowed (preflight included), and nothing else."""

    def __init__(self, server: ApiServer, app: Any) -> None:
        self.server = server
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        refusal = self.server.check_boundary(headers)
        if refusal is not None:
            say(f"tandem serve: 403: {refusal}")
            await ApiError(403, refusal, kind="invalid_request_error", code="forbidden_origin").send(send)
            return
        origin = headers.get("origin")
        if origin is None or not self.server.origin_allowed(origin):
            await self.app(scope, receive, send)
            return
        cors = [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"vary", b"Origin"),
        ]
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            preflight = [
                *cors,
                (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                (b"access-control-allow-headers", b"Authorization, Content-Type"),
                (b"access-control-max-age", b"600"),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": preflight})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_cors(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *cors]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


def uvicorn_config(server: ApiServer, graceful_shutdown_s: int) -> Any:
    """How uvicorn runs the API, in `tandem serve` and in the window: quiet (Tandem logs one line
    a request itself), no lifespan events, open streams given graceful_shutdown_s to end; every
    connection bounded (bounded_protocol), the loggers that could flood rate-limited."""
    import uvicorn

    from app.library.logs import limit_logger

    server.connections.fit_to_open_files(raise_open_file_limit())
    for name in ("asyncio", "uvicorn.error", "uvicorn"):
        limit_logger(name)
    return uvicorn.Config(
        server.build_app(),
        http=bounded_protocol(server.connections, server.header_timeout_s),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=graceful_shutdown_s,
    )


class BackgroundServer:
    """The API on a thread of its own (uvicorn without signal handlers), for the window."""

    def __init__(self, server: ApiServer, sock: socket.socket) -> None:
        import uvicorn

        server.listen_on(sock)
        self.sock = sock
        self._server = uvicorn.Server(uvicorn_config(server, graceful_shutdown_s=2))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="tandem-api", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self.sock.close()


# The socket (`tandem serve` and the window's serve toggle listen on it)


def listen(host: str, port: int) -> socket.socket:
    from engine.errors import TandemError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise TandemError(f"cannot listen on {host}: {e.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        sock.close()
        reason = "the port is in use by another program" if e.errno == 98 else e.strerror
        raise TandemError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock
