"""A Hugging Face hub stand-in on 127.0.0.1 for download tests: real HTTP, real sockets.

It answers the requests huggingface_hub 2.4 and Tandem's downloader make, as the hub does:

- HEAD/GET  /{owner}/{name}/resolve/{revision}/{filename}
    LFS file: 302 to the "CDN" (a second server on another port, so huggingface_hub treats it
    as off-hub and stops there), with X-Repo-Commit, X-Linked-Etag (the sha256), X-Linked-Size.
    Small git file: 200 with ETag = git blob sha1.
    Unknown repo: 401 X-Error-Code RepoNotFound. Gated repo without a valid token: 401
    X-Error-Code GatedRepo. Unknown revision: 404 RevisionNotFound. Unknown file: 404
    EntryNotFound.
- GET /api/models/{owner}/{name}[/revision/{revision}][?blobs=true]  (model_info; with blobs,
    each sibling's size and LFS sha256, as HfApi.model_info(files_metadata=True) asks)
- GET /api/models?search=&author=&filter=&sort=&limit=  (HfApi.list_models): the repositories
    whose id contains the search text, most downloaded first.
- HEAD/GET /blobs/{sha256} on the CDN, with Range support (206, Content-Range, 416).

A file may be "padded": its first bytes are given, the rest reads as zeros up to a declared size,
so a test can serve what looks like a multi-GB model (a real header, then nothing) and check that
only the header was fetched.

Faults for tests: throttle (sleep per chunk), delay every answer (a slow hub), drop the connection
after N body bytes, serve wrong bytes (checksum mismatch), ignore Range. Every request is recorded with its headers and the
number of body bytes sent, so a test can assert that a Range request was made.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

# The repositories the shared `hub` fixture (conftest.py) serves the tiny test models from.
TINY_REPO = "tandem-test/tiny-target-GGUF"
TINY_DRAFT_REPO = "tandem-test/tiny-draft-GGUF"


@dataclass
class HubFile:
    repo_id: str
    filename: str
    data: bytes
    is_lfs: bool = True
    padded_size: int = 0  # > len(data): the file reads as data, then zeros, up to this size

    @property
    def size(self) -> int:
        return max(len(self.data), self.padded_size)

    @cached_property  # hashed once: the server looks files up by it on every request
    def sha256(self) -> str:
        if self.padded_size > len(self.data):  # never hashed for real: a padded file is never downloaded
            return hashlib.sha256(self.data + str(self.padded_size).encode()).hexdigest()
        return hashlib.sha256(self.data).hexdigest()

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end] (inclusive, as in a Range header)."""
        body = self.data[start : end + 1]
        return body + bytes(max(0, min(end + 1, self.size) - max(start, len(self.data))))

    @cached_property
    def git_sha1(self) -> str:
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data).hexdigest()


@dataclass
class RecordedRequest:
    server: str  # "hub" or "cdn"
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    status: int = 0
    body_bytes_sent: int = 0


@dataclass
class _Repo:
    commit: str
    files: dict[str, HubFile] = field(default_factory=dict)
    is_gated: bool = False
    downloads: int = 0


_RESOLVE_RE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_API_RE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")
_SEARCH_PATH = "/api/models"
_BLOB_RE = re.compile(r"^/blobs/(?P<sha>[0-9a-f]{64})$")
_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


class FakeHub:
    """Start with `with FakeHub() as hub:`; point HF_ENDPOINT at hub.endpoint."""

    def __init__(self, chunk_bytes: int = 16 * 1024) -> None:
        self.repos: dict[str, _Repo] = {}
        self.valid_tokens: set[str] = set()
        self.requests: list[RecordedRequest] = []
        self.chunk_bytes = chunk_bytes
        self.throttle_s = 0.0  # sleep after each chunk of a body
        self.ignore_range = False
        self.range_from_zero = False  # answer a Range with 206 from byte 0 (a mirror that gets it wrong)
        self.delay_s = 0.0  # sleep before answering any request on the hub server (a slow hub)
        self._drops: dict[str, list[int]] = {}  # sha256 -> body byte counts to drop at, one per GET
        self._corrupt: set[str] = set()  # sha256 of files served with wrong bytes
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []

    # --- setup -------------------------------------------------------------------------------

    def add_file(
        self, repo_id: str, filename: str, data: bytes, is_lfs: bool = True, padded_size: int = 0
    ) -> HubFile:
        repo = self.repos.setdefault(repo_id, _Repo(commit=hashlib.sha1(repo_id.encode()).hexdigest()))
        f = HubFile(repo_id, filename, data, is_lfs, padded_size)
        repo.files[filename] = f
        return f

    def set_downloads(self, repo_id: str, downloads: int) -> None:
        """The hub's download count, which orders search results."""
        self.repos[repo_id].downloads = downloads

    def set_gated(self, repo_id: str, valid_token: str) -> None:
        self.repos[repo_id].is_gated = True
        self.valid_tokens.add(valid_token)

    def drop_connection(self, f: HubFile, after_bytes: int, times: int = 1) -> None:
        """The next `times` GETs of this file send `after_bytes` body bytes, then the socket closes."""
        self._drops.setdefault(f.sha256, []).extend([after_bytes] * times)

    def corrupt(self, f: HubFile) -> None:
        """Serve other bytes than the checksum the hub announces."""
        self._corrupt.add(f.sha256)

    def replace_file(self, f: HubFile, data: bytes) -> HubFile:
        """A new version of the file (new sha256 and ETag) and a new commit."""
        repo = self.repos[f.repo_id]
        repo.commit = hashlib.sha1(repo.commit.encode() + data[:64]).hexdigest()
        return self.add_file(f.repo_id, f.filename, data, f.is_lfs)

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FakeHub:
        for role in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self, role))
            server.daemon_threads = True
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    # --- queries for tests ---------------------------------------------------------------------

    def recorded(self, server: str | None = None, method: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [
                r
                for r in self.requests
                if (server is None or r.server == server) and (method is None or r.method == method)
            ]

    def bytes_sent(self, f: HubFile) -> int:
        """Body bytes of this file sent by the CDN so far, over every request."""
        return sum(r.body_bytes_sent for r in self.recorded("cdn", "GET") if r.path.endswith(f.sha256))

    def range_headers(self, f: HubFile) -> list[str | None]:
        """The Range header of every GET of the file's bytes, in order (None: no Range)."""
        return [r.headers.get("range") for r in self.recorded("cdn", "GET") if r.path.endswith(f.sha256)]

    def _record(self, r: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(r)

    def _find_blob(self, sha: str) -> HubFile | None:
        for repo in self.repos.values():
            for f in repo.files.values():
                if f.sha256 == sha:
                    return f
        return None

    def _next_drop(self, sha: str) -> int | None:
        with self._lock:
            drops = self._drops.get(sha)
            return drops.pop(0) if drops else None


class _LazyBody:
    """A padded file's bytes [start, end], made a chunk at a time (never the whole GBs at once)."""

    def __init__(self, f: HubFile, start: int, end: int) -> None:
        self.f, self.start, self.end = f, start, end

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __getitem__(self, s: slice) -> bytes:
        lo, hi = (
            self.start + (s.start or 0),
            min(self.start + (s.stop if s.stop is not None else len(self)), self.end + 1),
        )
        return self.f.read(lo, hi - 1) if hi > lo else b""


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _make_handler(hub: FakeHub, role: str) -> type[BaseHTTPRequestHandler]:
    class Handler(_HubHandler):
        pass

    Handler.hub = hub
    Handler.role = role
    return Handler


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    role: str

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_HEAD(self) -> None:
        self._dispatch(send_body=False)

    def do_GET(self) -> None:
        self._dispatch(send_body=True)

    # --- routing -------------------------------------------------------------------------------

    def _dispatch(self, send_body: bool) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        self.query = parse_qs(parts.query)
        self.record = RecordedRequest(
            self.role, self.command, path, {k.lower(): v for k, v in self.headers.items()}
        )
        self.hub._record(self.record)
        try:
            if self.role == "hub" and self.hub.delay_s:
                # A deliberately slow hub (the thing under test: timeouts, cancel, a window that
                # stays responsive), not a wait for something to happen.
                time.sleep(self.hub.delay_s)
            if self.role == "cdn":
                m = _BLOB_RE.match(path)
                if m:
                    return self._serve_blob(m["sha"], send_body)
            else:
                m = _RESOLVE_RE.match(path)
                if m:
                    return self._resolve(unquote(m["repo"]), unquote(m["rev"]), unquote(m["file"]), send_body)
                if path == _SEARCH_PATH and self.command == "GET":
                    return self._search()
                m = _API_RE.match(path)
                if m and self.command == "GET":
                    return self._model_info(unquote(m["repo"]), unquote(m["rev"] or "main"))
            self._error(404, "", "Not found")
        except OSError:  # the client went away (killed, cancelled): nothing to answer
            self.close_connection = True

    def _check_repo(self, repo_id: str) -> _Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if repo.is_gated:
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ").strip()
            if token not in self.hub.valid_tokens:
                self._error(
                    401,
                    "GatedRepo",
                    f"Access to model {repo_id} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in.",
                )
                return None
        return repo

    def _resolve(self, repo_id: str, revision: str, filename: str, send_body: bool) -> None:
        repo = self._check_repo(repo_id)
        if repo is None:
            return
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        f = repo.files.get(filename)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit})
        if f.is_lfs:
            location = f"{self.hub.cdn_endpoint}/blobs/{f.sha256}?repo={quote(repo_id, safe='')}"
            body = f"Found. Redirecting to {location}".encode()
            self.record.status = 302  # before answering: the client may look before this thread resumes
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(f.size))
            self.send_header("ETag", f'"{hashlib.sha1(f.sha256.encode()).hexdigest()}"')  # the pointer's
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)
            return
        self._send_bytes(f, f.data, send_body, etag=f.git_sha1, extra={"X-Repo-Commit": repo.commit})

    def _serve_blob(self, sha: str, send_body: bool) -> None:
        f = self.hub._find_blob(sha)
        if f is None:
            return self._error(404, "", "Not found")
        data: bytes | HubFile = f if f.padded_size > len(f.data) else f.data
        if sha in self.hub._corrupt:
            raw = f.data
            middle = len(raw) // 2
            data = raw[:middle] + bytes(b ^ 0xFF for b in raw[middle : middle + 1024]) + raw[middle + 1024 :]
        self._send_bytes(f, data, send_body, etag=f.sha256, extra={})

    def _send_bytes(
        self, f: HubFile, data: bytes | HubFile, send_body: bool, etag: str, extra: dict[str, str]
    ) -> None:
        total = data.size if isinstance(data, HubFile) else len(data)
        start, end = 0, total - 1
        status = 200
        range_header = self.headers.get("Range")
        if range_header and not self.hub.ignore_range:
            m = _RANGE_RE.match(range_header.strip())
            if m:
                start = int(m[1])
                end = min(int(m[2]), total - 1) if m[2] else total - 1
                if start >= total:
                    self.record.status = 416
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{total}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
                if self.hub.range_from_zero:
                    start = 0
        body: bytes | _LazyBody = (
            _LazyBody(data, start, end) if isinstance(data, HubFile) else data[start : end + 1]
        )
        self.record.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        if not send_body:
            return
        drop_at = self.hub._next_drop(f.sha256) if status in (200, 206) else None
        sent = 0
        step = self.hub.chunk_bytes
        while sent < len(body):
            if self.hub._stopping.is_set():
                break
            chunk = body[sent : sent + step]
            # Counted before writing, so a test that already has the bytes sees the count.
            if drop_at is not None and sent + len(chunk) >= drop_at:
                chunk = chunk[: max(0, drop_at - sent)]
                sent += len(chunk)
                self.record.body_bytes_sent = sent
                self.wfile.write(chunk)
                self.wfile.flush()
                # An abrupt end mid-body, as a dropped connection looks to the client.
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            sent += len(chunk)
            self.record.body_bytes_sent = sent
            self.wfile.write(chunk)
            if self.hub.throttle_s:
                self.wfile.flush()
                # A deliberately slow hub (the thing under test: progress, pause and cancel
                # mid-download), not a wait for something to happen.
                time.sleep(self.hub.throttle_s)

    def _model_info(self, repo_id: str, revision: str) -> None:
        repo = self._check_repo(repo_id)
        if repo is None:
            return
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", "Invalid rev id: " + revision)
        info = {
            "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "sha": repo.commit,
            "private": False,
            "gated": "manual" if repo.is_gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": ["gguf"],
            "library_name": "gguf",
            "siblings": [self._sibling(f) for _, f in sorted(repo.files.items())],
        }
        self._send_json(info)

    def _sibling(self, f: HubFile) -> dict[str, Any]:
        sibling: dict[str, Any] = {"rfilename": f.filename}
        if self.query.get("blobs", [""])[0].lower() == "true":
            sibling["size"] = f.size
            sibling["blobId"] = f.git_sha1
            if f.is_lfs:
                sibling["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
        return sibling

    def _search(self) -> None:
        """list_models: search text in the id, author, filter tags (every repo here is "gguf")."""
        q = self.query
        search = q.get("search", [""])[0].lower()
        author = q.get("author", [""])[0]
        filters = set(q.get("filter", []))
        limit = int(q.get("limit", ["1000"])[0])
        found = [
            (repo_id, repo)
            for repo_id, repo in self.hub.repos.items()
            if search in repo_id.lower()
            and (not author or repo_id.split("/")[0] == author)
            and filters <= {"gguf"}
            and not repo.is_gated
        ]
        found.sort(key=lambda item: (-item[1].downloads, item[0]))
        self._send_json(
            [
                {
                    "_id": hashlib.md5(repo_id.encode()).hexdigest()[:24],
                    "id": repo_id,
                    "modelId": repo_id,
                    "downloads": repo.downloads,
                    "likes": 0,
                    "private": False,
                    "tags": ["gguf"],
                    "library_name": "gguf",
                    "createdAt": "2026-01-01T00:00:00.000Z",
                }
                for repo_id, repo in found[:limit]
            ]
        )

    def _send_json(self, data: Any) -> None:
        body = json.dumps(data).encode()
        self.record.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.record.status = status
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


def go_online(monkeypatch: Any, hub: FakeHub, tmp_path: Any) -> None:
    """Point huggingface_hub at the fake hub for one test, and make sure nothing else is asked.

    conftest sets HF_HUB_OFFLINE=1 for every test, and huggingface_hub reads its settings once at
    import; so the module constants are patched as well as the environment (for subprocesses).
    Telemetry is off: with it on, huggingface_hub fetches an agent registry from the endpoint it
    was imported with, which must never be the real hub in a test.
    """
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))


def tiny_pair_catalog(target: HubFile, draft: HubFile) -> dict[str, Any]:
    """A catalog (as JSON data) with one pair, "tiny-pair", of two files served by the fake hub."""

    def model(name: str, f: HubFile) -> dict[str, Any]:
        return {
            "name": name,
            "repo_id": f.repo_id,
            "filename": f.filename,
            "size_bytes": len(f.data),
            "sha256": f.sha256,
            "quantization": "F32",
            "architecture": "llama",
            "n_params_b": 0.0002,
            "context_length": 256,
            "license": "MIT",
            "is_gated": False,
        }

    return {
        "models": {"tiny-target": model("Tiny target", target), "tiny-draft": model("Tiny draft", draft)},
        "pairs": [
            {
                "name": "tiny-pair",
                "title": "Tiny target + tiny draft",
                "target": "tiny-target",
                "draft": "tiny-draft",
                "min_ram_bytes": 1,
                "hardware": "any",
                "reported_speedup": None,
                "speedup_note": "a test pair, see https://example.invalid",
            }
        ],
        "incompatible": [],
    }
