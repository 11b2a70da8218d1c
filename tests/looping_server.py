"""An OpenAI-compatible server on 127.0.0.1 that streams one reply's pieces, slowly, until the
client leaves (a model stuck in a loop, as a remote engine): the window's and the remote
engine's tests of how a looping reply is stopped share it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def looping_server(pieces: Iterable[str], pause_s: float) -> Iterator[tuple[str, dict[str, int]]]:
    """Serve /v1/models (one model, "looper") and a chat completion streaming `pieces` (a chunk
    each, `pause_s` apart) then finish_reason "length". Yields (base URL, counts): "sent" chunks
    and "left", the times a client hung up before the end."""
    seen = {"sent": 0, "left": 0}
    chunks = list(pieces)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"object": "list", "data": [{"id": "looper", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for piece in chunks:
                    chunk = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                    seen["sent"] += 1
                    time.sleep(pause_s)
                end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
                self.wfile.write(f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode())
            except (BrokenPipeError, ConnectionResetError):
                seen["left"] += 1

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
