"""OpenAI-compatible servers on 127.0.0.1 for the window's and the remote engine's tests: one
that streams a reply's pieces slowly until the client leaves (a model stuck in a loop), one
that lists a model and never answers a completion (a hung server), and one that refuses all."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def openai_server(model: str, answer: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[str]:
    """Serve /v1/models (one model) and answer every POST with `answer(handler)` (with no model,
    every GET too); yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if not model:
                return answer(self)
            body = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            answer(self)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@contextmanager
def looping_server(pieces: Iterable[str], pause_s: float) -> Iterator[tuple[str, dict[str, int]]]:
    """A chat completion streaming `pieces` (a chunk each, `pause_s` apart) then finish_reason
    "length". Yields (base URL, counts): "sent" chunks and "left", the times a client hung up
    before the end."""
    seen = {"sent": 0, "left": 0}
    chunks = list(pieces)

    def stream(handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers["Content-Length"]))
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        try:
            for piece in chunks:
                chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                handler.wfile.flush()
                seen["sent"] += 1
                time.sleep(pause_s)
            end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
            handler.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            seen["left"] += 1

    with openai_server("looper", stream) as url:
        yield url, seen


@contextmanager
def silent_server() -> Iterator[str]:
    """Lists a model ("slow") and never answers a completion (a big prompt being read on a slow
    machine, or a hung server): a POST waits until the server closes, at most 60 s."""
    release = threading.Event()
    try:
        with openai_server("slow", lambda _handler: release.wait(60)) as url:
            yield url
    finally:
        release.set()


@contextmanager
def refusing_server() -> Iterator[str]:
    """Refuses every request (HTTP 401: an API key it does not take)."""
    with openai_server("", lambda handler: handler.send_error(401, "Invalid API key")) as url:
        yield url
