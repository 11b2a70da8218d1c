"""Download GGUF files from the Hugging Face hub so that an interrupted download resumes.

huggingface_hub decides where a file is and which version it is: hf_hub_url builds the address,
get_hf_file_metadata sends the HEAD request (endpoint, token, revision, redirects, the hub's
error codes), and its shared HTTP client (get_session) carries proxies and the offline switch.
The bytes are moved here, because huggingface_hub 2.4 restarts a killed download from byte 0
under a new random name (docs/findings.md). Tandem instead writes to a stable
`<models>/<owner>--<name>/<filename>.part`, next to a small JSON sidecar holding the version it
belongs to (ETag, size, commit). The next attempt, in this process or another one, checks the
sidecar against the hub and continues with `Range: bytes=<have>-`.

A finished file is checked (size, then the sha256 the hub publishes as the ETag of LFS files, or
the catalog's) and only then renamed to its final name, so a .gguf under its final name is
always whole. No Qt here: the window drives this from a thread, the CLI directly.

Why this file is long: resuming, retrying, verifying and renaming one file is one transaction
(_download_one), and its states and their recovery read best side by side.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app import paths
from app.library.catalog import CatalogPair, format_bytes
from engine.errors import DownloadError

log = logging.getLogger(__name__)

ProgressCallback = Callable[["DownloadProgress"], None]

PROGRESS_INTERVAL_S = 0.1
SPEED_WINDOW_S = 3.0
N_RETRIES = 4  # a dropped connection is tried again this many times in a row...
BACKOFF_S = 1.0  # ...waiting this long, doubled each time
DEFAULT_TIMEOUT_S = 30.0
PART_SUFFIX = ".part"
SIDECAR_SUFFIX = ".part.json"
LOCK_SUFFIX = ".part.lock"
VERIFIED_SUFFIX = ".verified.json"  # beside a final file: its checksum matched (size, mtime, digest)
LOGIN_HINT = "log in with `hf auth login` (`huggingface-cli login` in older versions) or set HF_TOKEN"

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_GIT_SHA1_RE = re.compile(r"^[0-9a-f]{40}$")


class DownloadStopped(DownloadError):
    """The user paused or cancelled; a pause keeps the .part file so the next start resumes."""

    def __init__(self, message: str, *, is_paused: bool) -> None:
        super().__init__(message)
        self.is_paused = is_paused


class HubUnreachableError(DownloadError):
    """No answer from the hub at all (connection refused, DNS, timeout): worth another try later."""


@dataclass(frozen=True)
class FileRequest:
    repo_id: str
    filename: str
    revision: str = "main"
    sha256: str | None = None  # from the catalog; checked as well as the hub's own checksum


@dataclass(frozen=True)
class RemoteFile:
    """What the hub says about one file at one revision (from its HEAD answer)."""

    request: FileRequest
    resolve_url: str
    download_url: str  # where the bytes are: the CDN address for LFS files
    commit: str | None
    etag: str | None
    size_bytes: int

    @property
    def expected_sha256(self) -> str | None:
        if self.request.sha256:
            return self.request.sha256.lower()
        # The hub's ETag (X-Linked-Etag) of an LFS file is the sha256 of its content.
        if self.etag and _SHA256_RE.match(self.etag):
            return self.etag
        return None

    @property
    def expected_digest(self) -> str | None:
        """The sha256 above, else the git blob id that small files kept in git itself have as ETag."""
        if self.expected_sha256 is None and self.etag and _GIT_SHA1_RE.match(self.etag):
            return self.etag
        return self.expected_sha256


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report; small and frozen so it can cross to the GUI thread as it is."""

    repo_id: str
    filename: str
    state: str  # "downloading", "retrying", "verifying", "done", "paused", "cancelled"
    file_index: int  # 0-based position of this file in the request
    n_files: int
    file_done_bytes: int
    file_total_bytes: int
    total_done_bytes: int  # over every file of the request (a pair: target + draft)
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None
    message: str = ""

    @property
    def file_fraction(self) -> float:
        return self.file_done_bytes / self.file_total_bytes if self.file_total_bytes else 1.0

    @property
    def total_fraction(self) -> float:
        return self.total_done_bytes / self.total_bytes if self.total_bytes else 1.0


class DownloadControl:
    """Pause and cancel, set from any thread and read by the downloader once per chunk."""

    def __init__(self) -> None:
        self._stop = threading.Event()  # paused or cancelled
        self.is_cancel_requested = False

    def cancel(self) -> None:
        self.is_cancel_requested = True
        self._stop.set()

    def pause(self) -> None:
        self._stop.set()

    @property
    def is_stop_requested(self) -> bool:
        return self._stop.is_set()

    def sleep(self, seconds: float) -> None:
        """Wait between retries, waking early when the user stops the download."""
        self._stop.wait(seconds)


# --- where files go ---------------------------------------------------------------------------


def local_path_for(repo_id: str, filename: str, models_dir: Path | None = None) -> Path:
    """The final path of a hub file: <models>/<owner>--<name>/<filename>."""
    folder_name = repo_id.replace("/", "--")
    if folder_name in ("", ".", "..") or "\\" in folder_name or ".." in repo_id.split("/"):
        raise DownloadError(f"'{repo_id}' is not a repository Tandem can store")
    folder = (models_dir or paths.models_dir()) / folder_name
    parts = Path(filename).parts
    if not parts or any(p in ("..", "") for p in parts) or Path(filename).is_absolute():
        raise DownloadError(f"'{filename}' is not a file name Tandem can store")
    return folder.joinpath(*parts)


def part_path_for(final: Path) -> Path:
    return final.with_name(final.name + PART_SUFFIX)


def sidecar_path_for(final: Path) -> Path:
    return final.with_name(final.name + SIDECAR_SUFFIX)


# --- talking to the hub -----------------------------------------------------------------------


def hub_endpoint() -> str:
    """HF_ENDPOINT as it is now: huggingface_hub reads it once at import, tests and users may change it."""
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_unreachable(reason: str, endpoint: str | None = None) -> HubUnreachableError:
    return HubUnreachableError(
        f"cannot reach the model hub at {endpoint or hub_endpoint()} ({reason}); check the network "
        "connection, a proxy, or HF_ENDPOINT"
    )


def _is_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return env in ("1", "ON", "YES", "TRUE") or bool(constants.is_offline_mode())


def _offline_error() -> DownloadError:
    return DownloadError("downloads are off because HF_HUB_OFFLINE is set; unset it to download models")


_ERRNO = re.compile(r"\[Errno -?\d+\]\s*([^)\]'\"]+)")
_NAME_NOT_FOUND = (
    "Name or service not known",
    "Temporary failure in name resolution",
    "nodename nor servname",
)


def plain_reason(text: str) -> str:
    """A network error's reason without the C library's "[Errno -2]": "Name or service not known"
    said as what it means for the user."""
    m = _ERRNO.search(text)
    if m is None:
        return text
    reason = m[1].strip()
    return "its address was not found: offline?" if reason.startswith(_NAME_NOT_FOUND) else reason


def _hub_error(exc: BaseException, request: FileRequest, endpoint: str, has_token: bool) -> DownloadError:
    """One sentence for each way the hub can say no."""
    import httpx2
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo, name, rev = request.repo_id, request.filename, request.revision
    if isinstance(exc, GatedRepoError):  # before RepositoryNotFoundError: it is a subclass
        if has_token:
            return DownloadError(
                f"the repository {repo} is gated and your token has no access to it yet: "
                "accept its terms on its page on the hub, then try again"
            )
        return DownloadError(f"the repository {repo} is gated and needs a token: {LOGIN_HINT}")
    if isinstance(exc, RepositoryNotFoundError):
        hint = "" if has_token else f" (if it is private, {LOGIN_HINT})"
        return DownloadError(f"the repository {repo} was not found on the hub{hint}")
    if isinstance(exc, RevisionNotFoundError):
        return DownloadError(f"the repository {repo} has no revision '{rev}'")
    if isinstance(exc, RemoteEntryNotFoundError):
        return DownloadError(f"the file {name} was not found in the repository {repo} (revision {rev})")
    if isinstance(exc, OfflineModeIsEnabled):
        return _offline_error()
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "an error"
        return DownloadError(f"the hub answered HTTP {status} for {name} in {repo}; try again later")
    if isinstance(exc, httpx2.TransportError):
        reason = plain_reason(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return hub_unreachable(reason, endpoint)
    return DownloadError(f"the download of {name} from {repo} failed: {type(exc).__name__}: {exc}")


def _has_token() -> bool:
    """Whether huggingface_hub sends a token (HF_TOKEN, or one saved by `hf auth login`)."""
    from huggingface_hub import get_token

    return get_token() is not None


def resolve_remote(request: FileRequest, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> RemoteFile:
    """Ask the hub (HEAD on /resolve/) for the file's size, checksum, commit and download address."""
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    endpoint = hub_endpoint()
    if _is_offline():
        raise _offline_error()
    url = hf_hub_url(request.repo_id, request.filename, revision=request.revision, endpoint=endpoint)
    if not url.startswith(endpoint + "/"):
        # huggingface_hub only swaps in the endpoint it was imported with; never ask another host.
        raise DownloadError(f"cannot build a download address on {endpoint}; check HF_ENDPOINT")
    try:
        meta = get_hf_file_metadata(url, timeout=timeout_s, endpoint=endpoint)
    except (HfHubHTTPError, OfflineModeIsEnabled, httpx2.TransportError) as e:
        raise _hub_error(e, request, endpoint, _has_token()) from e
    if meta.commit_hash is None:
        raise DownloadError(
            f"{endpoint} did not answer like the Hugging Face hub (no X-Repo-Commit header); check HF_ENDPOINT"
        )
    if meta.size is None:
        raise DownloadError(f"the hub did not say how large {request.filename} is; try again later")
    return RemoteFile(
        request=request,
        resolve_url=url,
        download_url=meta.location or url,
        commit=meta.commit_hash,
        etag=meta.etag,
        size_bytes=int(meta.size),
    )


def _is_retryable_status(exc: Any, remote: RemoteFile) -> bool:
    """5xx and 429 are the hub's bad moment; 401/403 from a CDN usually mean its signed URL expired."""
    status = exc.response.status_code if exc.response is not None else 0
    if status >= 500 or status in (408, 429):
        return True
    return status in (401, 403) and _origin(remote.download_url) != _origin(remote.resolve_url)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


@contextlib.contextmanager
def stream_bytes(remote: RemoteFile, first: int, last: int | None, timeout_s: float) -> Iterator[Any]:
    """GET the file's bytes from `first` to `last` (None: to the end); an HTTP error is raised as
    huggingface_hub raises it (its subclass says which)."""
    import httpx2
    from huggingface_hub import get_session
    from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

    headers = dict(build_hf_headers())
    # Identity encoding: byte ranges and sizes must refer to the file itself.
    headers["Accept-Encoding"] = "identity"
    # As huggingface_hub does: the token stays on the hub, never goes to a CDN's signed URL.
    if _origin(remote.download_url) != _origin(remote.resolve_url):
        headers.pop("authorization", None)
        headers.pop("Authorization", None)
    if first or last is not None:
        headers["Range"] = f"bytes={first}-{'' if last is None else last}"
    timeout = httpx2.Timeout(timeout_s)
    with get_session().stream(
        "GET", remote.download_url, headers=headers, follow_redirects=True, timeout=timeout
    ) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        yield response


# --- progress -----------------------------------------------------------------------------------


class _ProgressTracker:
    """Counts bytes for the whole request and reports speed (over the last seconds) and time left."""

    def __init__(self, total_bytes: int, done_bytes: int, n_files: int, callback: ProgressCallback | None):
        self.total_bytes = total_bytes
        self.done_bytes = done_bytes
        self.n_files = n_files
        self.callback = callback
        self._samples: deque[tuple[float, int]] = deque()
        self._transferred = 0
        self._last_report_s = 0.0

    def add(self, n_bytes: int) -> None:
        self.done_bytes += n_bytes
        self._transferred += n_bytes
        now = time.monotonic()
        self._samples.append((now, self._transferred))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()

    def bytes_per_s(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def report(
        self,
        remote: RemoteFile,
        file_index: int,
        file_done_bytes: int,
        state: str,
        message: str = "",
        force: bool = True,
    ) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report_s < PROGRESS_INTERVAL_S:
            return
        self._last_report_s = now
        speed = self.bytes_per_s()
        remaining = max(0, self.total_bytes - self.done_bytes)
        eta_s = remaining / speed if speed > 0 else (0.0 if remaining == 0 else None)
        self.callback(
            DownloadProgress(
                repo_id=remote.request.repo_id,
                filename=remote.request.filename,
                state=state,
                file_index=file_index,
                n_files=self.n_files,
                file_done_bytes=file_done_bytes,
                file_total_bytes=remote.size_bytes,
                total_done_bytes=self.done_bytes,
                total_bytes=self.total_bytes,
                bytes_per_s=speed,
                eta_s=eta_s,
                message=message,
            )
        )


# --- one file -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    remote: RemoteFile
    final_path: Path
    have_bytes: int  # usable bytes already on disk (in .part, or the whole file when complete)
    is_complete: bool


def _read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _sidecar(remote: RemoteFile) -> dict[str, Any]:
    """What a .part file belongs to, as its sidecar keeps it."""
    request = remote.request
    return {
        "repo_id": request.repo_id,
        "filename": request.filename,
        "revision": request.revision,
        "commit": remote.commit,
        "etag": remote.etag,
        "size_bytes": remote.size_bytes,
        "sha256": remote.expected_sha256,
    }


def _sidecar_matches(data: dict[str, Any] | None, remote: RemoteFile) -> bool:
    # Same content = same size and same ETag; the commit may move on without the file changing.
    wanted = _sidecar(remote)
    return data is not None and all(
        data.get(k) == wanted[k] for k in ("size_bytes", "etag", "repo_id", "filename")
    )


def _plan(remote: RemoteFile, models_dir: Path) -> _Plan:
    final = local_path_for(remote.request.repo_id, remote.request.filename, models_dir)
    # A file of the right size is this version where its checksum, when the hub gives one, matches
    # (a wrong file of the right size is not "already downloaded"): hashed once, then remembered
    # beside it with its size and time (_is_verified).
    if final.is_file() and final.stat().st_size == remote.size_bytes and _is_verified(final, remote):
        return _Plan(remote, final, remote.size_bytes, True)
    part = part_path_for(final)
    have = 0
    if part.is_file() and _sidecar_matches(_read_sidecar(sidecar_path_for(final)), remote):
        have = min(part.stat().st_size, remote.size_bytes)
    return _Plan(remote, final, have, False)


def verified_path_for(final: Path) -> Path:
    return final.with_name(final.name + VERIFIED_SUFFIX)


def _verified(st: os.stat_result, digest: str) -> dict[str, Any]:
    """A final file whose checksum matched, as kept beside it: its size and time, and the digest."""
    return {"size_bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "digest": digest}


def _remember_verified(final: Path, digest: str) -> None:
    data = _verified(final.stat(), digest)
    with contextlib.suppress(OSError):
        verified_path_for(final).write_text(json.dumps(data), encoding="utf-8")


def _is_verified(final: Path, remote: RemoteFile) -> bool:
    """Does the file at final hold what the hub's checksum says (True where the hub gives none:
    its size is all there is to go by)? Remembered after the first hash of a file."""
    expected = remote.expected_digest
    if expected is None:
        return True
    st = final.stat()
    if _read_sidecar(verified_path_for(final)) == _verified(st, expected):
        return True
    with open(final, "rb") as f:
        digest = hashlib.file_digest(f, lambda: _new_hasher(remote)).hexdigest()
    if digest != expected:
        log.warning("%s has the right size but not the hub's checksum: downloading it again", final)
        return False
    _remember_verified(final, expected)
    return True


def _check_content_range(response: Any, have: int, size: int, name: str) -> None:
    """A 206 must be the bytes asked for: from `have`, of a file of `size` bytes. Without a
    checksum, a server answering a resume from the wrong offset would install the wrong bytes."""
    header = response.headers.get("content-range", "")
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", header)
    if m is None or int(m[1]) != have or (m[3] != "*" and int(m[3]) != size):
        raise DownloadError(
            f"the server sent the wrong part of {name} (Content-Range '{header[:80]}', asked for "
            f"bytes {have}- of {size:,}); what was downloaded is kept: download again to resume"
        )


def _new_hasher(remote: RemoteFile) -> Any:
    if remote.expected_sha256 is None and remote.expected_digest is not None:  # a git blob id
        hasher = hashlib.sha1()
        hasher.update(f"blob {remote.size_bytes}\0".encode())
        return hasher
    return hashlib.sha256()


def _write_all(out: Any, data: bytes) -> None:
    """Write all of data to an unbuffered file (a raw write may take only part of it)."""
    view = memoryview(data)
    while view:
        n = out.write(view)
        if not n:
            raise OSError(errno.ENOSPC, "no space left on device")
        view = view[n:]


def _discard(*files: Path) -> None:
    for f in files:
        f.unlink(missing_ok=True)


def _download_one(
    plan: _Plan,
    models_dir: Path,
    file_index: int,
    tracker: _ProgressTracker,
    control: DownloadControl,
) -> Path:
    import httpx2
    from filelock import FileLock, Timeout
    from huggingface_hub.errors import HfHubHTTPError

    remote, final, have, size = plan.remote, plan.final_path, plan.have_bytes, plan.remote.size_bytes
    part, sidecar = part_path_for(final), sidecar_path_for(final)
    final.parent.mkdir(parents=True, exist_ok=True)

    # Two Tandem processes appending to one .part would interleave bytes; the OS drops this lock
    # when a process dies, so a killed download never blocks the next one.
    lock = FileLock(str(final.with_name(final.name + LOCK_SUFFIX)))
    try:
        lock.acquire(timeout=0)
    except Timeout as e:
        raise DownloadError(
            f"{final.name} is already being downloaded by another Tandem window or command"
        ) from e
    try:
        # Re-plan under the lock: another process may have finished or advanced the file meanwhile.
        fresh = _plan(remote, models_dir)
        tracker.done_bytes += fresh.have_bytes - plan.have_bytes
        if fresh.is_complete:
            tracker.report(remote, file_index, remote.size_bytes, "done", message="already downloaded")
            return final
        have = fresh.have_bytes
        if have == 0:
            _discard(part)
        paths.write_private_text(sidecar, json.dumps(_sidecar(remote), indent=1))
        hasher = _new_hasher(remote)
        if have:
            with open(part, "r+b") as f:  # drop anything past the expected size, then hash the rest
                f.truncate(have)
                hashlib.file_digest(f, lambda: hasher)
        tracker.report(remote, file_index, have, "downloading")

        n_failures = 0
        # Unbuffered: a full disk fails the write that hit it, and nothing is left in a buffer to
        # fail again when the file closes (which would hide the sentence behind a bare OSError).
        with open(part, "ab", buffering=0) as out:
            while have < size:
                if control.is_stop_requested:
                    break
                have_at_attempt = have
                try:
                    if n_failures:
                        # A signed CDN address may have expired: ask the hub again, and start over
                        # if the file itself changed in the meantime.
                        again = resolve_remote(remote.request)
                        if again.etag != remote.etag or again.size_bytes != size:
                            raise DownloadError(
                                f"{remote.request.filename} changed on the hub during the download; "
                                "start the download again"
                            )
                        remote = again
                    with stream_bytes(remote, have, None, DEFAULT_TIMEOUT_S) as response:
                        if response.status_code == 206:
                            _check_content_range(response, have, size, remote.request.filename)
                        if have and response.status_code == 200:
                            # The server ignored the Range header: it is sending the whole file.
                            out.seek(0)
                            out.truncate()
                            tracker.done_bytes -= have  # counted, and thrown away
                            have = 0
                            hasher = _new_hasher(remote)
                        for chunk in response.iter_bytes():
                            if control.is_stop_requested:
                                break
                            if have + len(chunk) > size:
                                chunk = chunk[: size - have]  # noqa: PLW2901 - never write past the end
                            _write_all(out, chunk)
                            hasher.update(chunk)
                            have += len(chunk)
                            tracker.add(len(chunk))
                            tracker.report(remote, file_index, have, "downloading", force=False)
                            if have >= size:
                                break
                    if have < size and not control.is_stop_requested:
                        # The body ended early without an error from the HTTP layer.
                        raise httpx2.RemoteProtocolError("the server closed the connection early")
                except (httpx2.TransportError, HfHubHTTPError, HubUnreachableError) as e:
                    if isinstance(e, HfHubHTTPError) and not _is_retryable_status(e, remote):
                        raise _hub_error(e, remote.request, hub_endpoint(), _has_token()) from e
                    if have > have_at_attempt:
                        n_failures = 0  # progress was made: the connection is flaky, not dead
                    n_failures += 1
                    if n_failures > N_RETRIES:
                        raise DownloadError(
                            f"the connection to the hub dropped {n_failures} times while downloading "
                            f"{remote.request.filename}; {format_bytes(have)} of {format_bytes(size)} are kept: "
                            "download again to resume"
                        ) from e
                    wait_s = BACKOFF_S * 2 ** (n_failures - 1)
                    tracker.report(
                        remote,
                        file_index,
                        have,
                        "retrying",
                        message=f"connection dropped; retrying in {wait_s:.0f} s (attempt {n_failures + 1})",
                    )
                    control.sleep(wait_s)
            os.fsync(out.fileno())

        if control.is_stop_requested:
            return _stop(control, remote, file_index, tracker, final, have)

        tracker.report(remote, file_index, have, "verifying")
        actual_size = part.stat().st_size
        if actual_size != size:
            _discard(part, sidecar)
            raise DownloadError(
                f"{remote.request.filename} has the wrong size ({actual_size:,} bytes, the hub says "
                f"{size:,}); it was deleted, download it again"
            )
        digest = hasher.hexdigest()
        expected = remote.expected_digest
        if expected is not None and digest != expected:
            _discard(part, sidecar)
            kind = "sha256" if remote.expected_sha256 else "git sha1"
            raise DownloadError(
                f"{remote.request.filename} is corrupt: its {kind} checksum is {digest[:12]}..., "
                f"expected {expected[:12]}...; the file was deleted, download it again"
            )
        os.replace(part, final)
        _discard(sidecar)
        if expected is not None:
            _remember_verified(final, expected)
        tracker.report(remote, file_index, size, "done")
        return final
    except OSError as e:
        if e.errno == errno.ENOSPC:  # a sentence, with what was kept (even the sidecar may not fit)
            raise DownloadError(
                f"the disk is full: {final.name} stopped at {format_bytes(have)} of {format_bytes(size)}; "
                f"free some space in {final.parent} and download again to resume"
            ) from e
        raise
    finally:
        lock.release()
        # Safe to remove now that nobody appends to this file; a racing process would simply
        # create a new lock file and see the finished file under the lock.
        if final.exists():
            _discard(Path(lock.lock_file))


def _stop(
    control: DownloadControl,
    remote: RemoteFile,
    file_index: int,
    tracker: _ProgressTracker,
    final: Path,
    have: int,
) -> Path:
    name = remote.request.filename
    if control.is_cancel_requested:
        _discard(part_path_for(final), sidecar_path_for(final))
        tracker.report(remote, file_index, have, "cancelled")
        raise DownloadStopped(f"the download of {name} was cancelled", is_paused=False)
    tracker.report(remote, file_index, have, "paused")
    raise DownloadStopped(
        f"the download of {name} is paused at {format_bytes(have)} of {format_bytes(remote.size_bytes)}; "
        "start it again to resume",
        is_paused=True,
    )


# --- public entry points ------------------------------------------------------------------------


def download_files(
    requests: Sequence[FileRequest],
    *,
    models_dir: Path | None = None,
    on_progress: ProgressCallback | None = None,
    control: DownloadControl | None = None,
) -> list[Path]:
    """Download every file (one after the other) and return their final paths, in order.

    All metadata is fetched first, so a missing file or a full disk is reported before a single
    byte moves. Raises DownloadError with one sentence; DownloadStopped on pause or cancel.
    """
    models_dir = models_dir or paths.models_dir()
    models_dir.mkdir(parents=True, exist_ok=True)
    control = control or DownloadControl()
    remotes = [resolve_remote(r) for r in requests]
    plans = [_plan(remote, models_dir) for remote in remotes]
    remaining = sum(p.remote.size_bytes - p.have_bytes for p in plans if not p.is_complete)
    if remaining > (free := shutil.disk_usage(models_dir).free):
        raise DownloadError(
            f"not enough free disk space in {models_dir}: the download needs {format_bytes(remaining)} "
            f"more but only {format_bytes(free)} is free; free some space or set TANDEM_HOME to another disk"
        )

    total = sum(p.remote.size_bytes for p in plans)
    tracker = _ProgressTracker(total, sum(p.have_bytes for p in plans), len(plans), on_progress)
    done: list[Path] = []
    for i, plan in enumerate(plans):
        if plan.is_complete:
            tracker.report(plan.remote, i, plan.remote.size_bytes, "done", message="already downloaded")
            done.append(plan.final_path)
            continue
        done.append(_download_one(plan, models_dir, i, tracker, control))
    return done


def pair_requests(pair: CatalogPair) -> list[FileRequest]:
    """The hub files of a catalog pair (none for the embedded pair)."""
    return [
        FileRequest(m.repo_id, m.filename, m.revision, m.sha256) for m in pair.models if m.repo_id is not None
    ]


def partial_download(repo_id: str, filename: str, models_dir: Path | None = None) -> int:
    """Bytes kept from an interrupted download of this file (0 when none)."""
    part = part_path_for(local_path_for(repo_id, filename, models_dir))
    return part.stat().st_size if part.is_file() else 0
