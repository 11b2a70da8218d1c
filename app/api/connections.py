"""What one client, or all together, can hold of the API (docs/trust.md "What a client can
hold"): the open connections counted and bounded (Connections), uvicorn's HTTP protocol with
those bounds and a deadline for a request's headers (bounded_protocol), and the open-file limit
raised to make room for them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from app.api.engine_bridge import RETRY_AFTER_S
from app.api.requests import ApiError

MAX_BODY_BYTES = 32 * 1024 * 1024
# A connection that has not sent a whole request's headers within HEADER_TIMEOUT_S (a fresh one,
# or one kept alive after a reply) is closed; at most MAX_CONNECTIONS are open (fewer where the
# open-file limit is low), half of them from one address (over either, the oldest idle one is
# closed to make room, else the new one is answered 503). A place in the queue is taken only once
# the body is read, so slow uploads never hold one.
HEADER_TIMEOUT_S = 10.0
EVICT_GRACE_S = 1.0  # a connection this young is never closed to make room (its request may be unread)
BODY_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 2048
MAX_BODY_BYTES_READING = 128 * 1024 * 1024
# Bodies one address may have half-read at once (a request inside its body cannot be evicted like
# an idle connection): past this, a new request's body closes the address's oldest one still
# arriving (408), so slow uploads from 127.0.0.1 cannot fill the address's connections. 64: far
# more uploads than one client runs at once, few enough that a plain request is always read.
MAX_READING_PER_CLIENT = 64
# A streamed reply whose client takes nothing for this long is cancelled and its turn freed
# (llama-server's --timeout covers writes too); --timeout shortens it.
WRITE_TIMEOUT_S = 30.0
OPEN_FILES_WANTED = 8192  # the soft limit of open files is raised to this where the hard one allows


def raise_open_file_limit(wanted: int = OPEN_FILES_WANTED) -> int:
    """Raise this process's soft limit of open files towards `wanted` (within the hard limit), as
    servers do at start: a desktop's usual 1024 leaves little room beside SQLite and the models.
    Returns the limit now (0 where the OS has none to change)."""
    try:
        import resource
    except ImportError:  # Windows
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return int(soft)


_BUSY = ApiError(
    503, "the server has too many connections open; retry later", "server_error", None, "too_many_connections"
)
_BUSY_BODY = json.dumps(_BUSY.body()).encode()
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    + f"retry-after: {RETRY_AFTER_S}\r\nconnection: close\r\ncontent-length: {len(_BUSY_BODY)}\r\n\r\n".encode()
    + _BUSY_BODY
)


class Connections:
    """The open connections of one server, oldest first, in all and by client address."""

    def __init__(self, max_total: int = MAX_CONNECTIONS, max_per_client: int = MAX_CONNECTIONS // 2) -> None:
        self.max_total, self.max_per_client = max_total, max_per_client
        self.open: dict[Any, str] = {}  # connection -> client address (dicts keep insertion order)
        self.by_client: dict[str, dict[Any, None]] = {}
        self.body_bytes_reading = 0  # bytes of bodies being read now (MAX_BODY_BYTES_READING)
        self.max_reading_per_client = MAX_READING_PER_CLIENT
        self.reading: dict[str, dict[object, Callable[[], None]]] = {}  # client -> its bodies being read

    def fit_to_open_files(self, limit: int) -> None:
        """At most half the process's open files for connections (the rest: SQLite, models, the
        window); limit 0: the OS sets none this process can read."""
        if limit > 0:
            self.max_total = max(64, min(self.max_total, limit // 2 - 32))
            self.max_per_client = max(32, min(self.max_per_client, self.max_total // 2))

    def admit(self, conn: Any, client: str) -> bool:
        """Take a new connection in, closing the oldest idle one where a bound is reached; False
        where every connection under the bound is busy with a request (the new one is refused)."""
        peers = self.by_client.get(client, {})
        if len(peers) >= self.max_per_client and not self._evict(list(peers)):
            return False
        if len(self.open) >= self.max_total and not self._evict(list(self.open)):
            return False
        self.open[conn] = client
        self.by_client.setdefault(client, {})[conn] = None
        return True

    def _evict(self, oldest_first: list[Any]) -> bool:
        """Close the oldest idle connection that has sent nothing at all, else the oldest that has
        not sent a whole request, else the oldest kept alive after a reply (a client between
        requests, which may be about to send one on it: closing those is the last resort)."""

        # A connection younger than EVICT_GRACE_S may have sent its request already, unread
        # while the server accepts a burst of sockets: never taken for an idle one.
        def rank(c: Any) -> int | None:  # 0 goes first; None: not to be closed
            if not c.is_idle():
                return None
            if c.has_replied():
                return 2
            if c.age_s() < EVICT_GRACE_S:
                return None
            return 1 if c.has_sent() else 0

        for wanted in (0, 1, 2):
            for conn in oldest_first:
                if rank(conn) == wanted:
                    conn.close_idle()
                    return True
        return False

    def forget(self, conn: Any) -> None:
        client = self.open.pop(conn, None)
        if client is None:
            return
        peers = self.by_client.get(client)
        if peers is not None:
            peers.pop(conn, None)
            if not peers:
                del self.by_client[client]

    def start_reading(self, client: str, token: object, stop: Callable[[], None]) -> None:
        """A request's body begins to arrive (`stop` ends its reading with a 408); where its client
        has max_reading_per_client bodies arriving already, the oldest of them is stopped."""
        mine = self.reading.setdefault(client, {})
        while len(mine) >= self.max_reading_per_client:
            oldest = next(iter(mine))
            mine.pop(oldest)()
        mine[token] = stop

    def done_reading(self, client: str, token: object) -> None:
        mine = self.reading.get(client)
        if mine is not None:
            mine.pop(token, None)
            if not mine:
                del self.reading[client]

    def take_body_bytes(self, n: int) -> None:
        if self.body_bytes_reading + n > MAX_BODY_BYTES_READING:
            raise ApiError(
                503,
                "the server is reading too many request bodies at once; retry later",
                kind="server_error",
                code="server_busy",
                headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
            )
        self.body_bytes_reading += n

    def give_body_bytes(self, n: int) -> None:
        self.body_bytes_reading -= n


def bounded_protocol(connections: Connections, header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with bounds on what a connection holds: admitted by `connections`
    (else answered 503 and closed), closed when it has sent no whole request's headers within
    header_timeout_s (HEADER_TIMEOUT_S, or --timeout if shorter) of opening or of its last reply
    (uvicorn's own keep-alive timeout starts only after a reply, so a socket that never sends a
    request, or drips its headers, stayed open)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    base: Any = AutoHTTPProtocol

    class BoundedProtocol(base):  # type: ignore[misc]
        _idle_timer: asyncio.TimerHandle | None = None
        _has_sent = False
        _opened_at = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._opened_at = self.loop.time()
            client = self.client[0] if self.client else "?"
            if not connections.admit(self, str(client)):
                transport.write(BUSY_RESPONSE)
                transport.close()
                return
            self._arm()

        def is_idle(self) -> bool:  # not inside a request: no whole headers yet, or its reply sent
            return self.cycle is None or bool(self.cycle.response_complete)

        def has_replied(self) -> bool:
            """Has a reply been sent on this connection (a client's kept-alive one)?"""
            return self.cycle is not None

        def age_s(self) -> float:
            return float(self.loop.time() - self._opened_at)

        def has_sent(self) -> bool:
            """Has the client sent any bytes on this connection?"""
            return self._has_sent

        def data_received(self, data: bytes) -> None:
            self._has_sent = True
            super().data_received(data)

        def close_idle(self) -> None:
            connections.forget(self)
            if not self.transport.is_closing():
                self.transport.close()

        def _arm(self) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._idle_timer = self.loop.call_later(header_timeout_s, self._on_idle_timeout)

        def _on_idle_timeout(self) -> None:
            self._idle_timer = None
            if self.is_idle() and not self.transport.is_closing():
                self.close_idle()
            # Inside a request: the body's deadline (BODY_TIMEOUT_S) and the reply govern it; the
            # timer starts again when the reply is sent.

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None
            connections.forget(self)
            super().connection_lost(exc)

    return BoundedProtocol
