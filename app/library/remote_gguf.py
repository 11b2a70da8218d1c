"""Read a GGUF file's header on the hub without downloading the file.

A GGUF file starts with everything Tandem needs to judge it (architecture, sizes, the whole
vocabulary and the chat template), then the weights. A 7B model's header is a few MB of a
multi-GB file, so the pair doctor reads it with HTTP Range requests: `RangeFile` is a read-only,
seekable file object of known size whose reads become `Range: bytes=a-b` requests, read ahead
and kept, and never more than a fixed budget in all (a hostile header that claims a
string of a billion bytes costs at most that budget, then fails with a sentence).

The header is parsed by engine.gguf_info's reader, the same one that checks local files (it
refuses impossible lengths and counts before reading them).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, cast

from app.library.downloads import (
    DEFAULT_TIMEOUT_S,
    FileRequest,
    RemoteFile,
    _has_token,
    _hub_error,
    hub_endpoint,
    resolve_remote,
    stream_bytes,
)
from engine.errors import DownloadError, ModelFileError, TandemError
from engine.gguf_info import GGUFInfo, read_gguf_header, read_gguf_info

BLOCK_BYTES = 64 * 1024  # a tiny model's whole header; a 7B's is 2-8 MB
MAX_READAHEAD_BYTES = 4 * 1024 * 1024  # each request reads ahead twice as far as the last, up to this
PARSER_WINDOW_BYTES = 16 * 1024
MAX_HEADER_BYTES = 64 * 1024 * 1024  # Gemma 3's 262k-token vocabulary needs under 10 MB
# The whole header read's time, over every request: each read has its own timeout, but a server
# sending a byte every few seconds never trips it. 8 MB (a 7B's header) at 1 Mbit/s: about 64 s.
HEADER_DEADLINE_S = 180.0


class HeaderReadError(DownloadError):
    """The header could not be read over the network (the hub said no, or the server cannot)."""


class HeaderTooLargeError(ModelFileError):
    """The header claims more than MAX_HEADER_BYTES: a damaged or hostile file."""


class CheckCancelled(TandemError):
    """The user cancelled a check; nothing to report."""


class RangeFile:
    """A remote file as what the GGUF reader asks of a file (seek and read): reads become HTTP
    Range requests.

    The reader reads a header front to back, so what came is kept as one run of bytes from the
    file's start, and a read past its end asks for the bytes up to what it needs, and ahead, in
    one request. `fetched_bytes` counts what came over the network, and a read that would take it
    past MAX_HEADER_BYTES raises HeaderTooLargeError instead.
    """

    def __init__(
        self,
        remote: RemoteFile,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cancel: threading.Event | None = None,
    ) -> None:
        self._deadline = time.monotonic() + HEADER_DEADLINE_S
        self.remote = remote
        self.size = remote.size_bytes
        self.name = f"{remote.request.repo_id}/{remote.request.filename}"
        self._endpoint = hub_endpoint()
        self._timeout_s = timeout_s
        self._cancel = cancel
        self._data = bytearray()  # the file's first fetched_bytes bytes
        self._pos = 0
        self._readahead = BLOCK_BYTES

    @property
    def fetched_bytes(self) -> int:
        return len(self._data)

    def seek(self, offset: int) -> int:
        self._pos = max(0, offset)
        return self._pos

    def read(self, size: int) -> bytes:
        data = self.read_at(self._pos, size)
        self._pos += len(data)
        return data

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to n bytes from offset (fewer at the end of the file)."""
        end = min(self.size, offset + max(0, n))
        if end <= offset:
            return b""
        have = len(self._data)
        if end > have:
            if end > MAX_HEADER_BYTES:
                raise HeaderTooLargeError(
                    f"{self.name}: its header claims more than {MAX_HEADER_BYTES // 2**20} MB; "
                    "a damaged or hostile file, not read further"
                )
            # A header is read front to back: read ahead, twice as far each time, within the budget.
            upto = min(self.size, max(end, min(have + self._readahead, MAX_HEADER_BYTES)))
            self._data += self._get_range(have, upto - 1)
            self._readahead = min(self._readahead * 2, MAX_READAHEAD_BYTES)
        return bytes(self._data[offset:end])

    def _get_range(self, start: int, end: int) -> bytes:
        import httpx2
        from huggingface_hub.errors import HfHubHTTPError

        remote = self.remote
        n_wanted = end - start + 1
        chunks: list[bytes] = []
        n_got = 0
        try:
            with stream_bytes(remote, start, end, self._timeout_s) as response:
                if response.status_code != 206:
                    # The whole file is on its way: close at once rather than download it.
                    raise HeaderReadError(
                        f"the server of {self.name} ignores byte ranges, so its header cannot be read "
                        "without downloading the whole file; nothing was downloaded"
                    )
                for chunk in response.iter_bytes():
                    if self._cancel is not None and self._cancel.is_set():
                        raise CheckCancelled("cancelled")
                    if time.monotonic() > self._deadline:
                        raise HeaderReadError(
                            f"the hub sent the header of {self.name} too slowly (more than "
                            f"{HEADER_DEADLINE_S:g} s in all); try again later"
                        )
                    chunks.append(chunk[: n_wanted - n_got])
                    n_got += len(chunks[-1])
                    if n_got >= n_wanted:
                        break
        except (HfHubHTTPError, httpx2.TransportError) as e:
            if isinstance(e, httpx2.TimeoutException):
                raise HeaderReadError(
                    f"the hub took more than {self._timeout_s:g} s to send the header of {self.name}; "
                    "try again later"
                ) from e
            raise _hub_error(e, remote.request, self._endpoint, _has_token()) from e
        if n_got < n_wanted:
            raise HeaderReadError(f"the connection closed while reading the header of {self.name}; try again")
        return b"".join(chunks)


@dataclass(frozen=True)
class RemoteHeader:
    """A file's header as read over the network, and what that cost."""

    info: GGUFInfo = field(repr=False)
    size_bytes: int
    fetched_bytes: int
    # The file's bytes before its weights (metadata and tensor table), as read: what a stand-in of
    # the same shape copies (app.library.standin). Already fetched: keeping them costs no request.
    header_bytes: bytes = field(default=b"", repr=False)


def read_remote_header(
    repo_id: str,
    filename: str,
    revision: str = "main",
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> RemoteHeader:
    """Ask the hub where the file is (HEAD), then read its header with Range requests, through
    engine.gguf_info's reader, the one local files go through. It asks for small windows; the
    RangeFile reads ahead, more each time, so a 64 kB header costs one request and a 10 MB
    vocabulary about eight. Any architecture is read (the pair doctor says whether this build runs it)."""
    import httpx2

    request = FileRequest(repo_id, filename, revision)
    try:
        remote = resolve_remote(request, timeout_s=timeout_s)
    except DownloadError as e:
        if isinstance(e.__cause__, httpx2.TimeoutException):
            raise HeaderReadError(
                f"the hub took more than {timeout_s:g} s to answer about {repo_id}/{filename}; try again later"
            ) from e
        raise
    if remote.size_bytes == 0:
        from engine.errors import EmptyModelError

        raise EmptyModelError(f"{repo_id}/{filename} is empty (0 bytes)")
    f = RangeFile(remote, timeout_s=timeout_s, cancel=cancel)
    source = cast(BinaryIO, f)  # seek() and read(): what the reader uses
    info = read_gguf_header(source, f.size, PurePosixPath(f.name), False, True, PARSER_WINDOW_BYTES)
    header = f.read_at(0, info.header_end)
    return RemoteHeader(info, remote.size_bytes, f.fetched_bytes, header)


def read_local_header(path: Path) -> RemoteHeader:
    info = read_gguf_info(path, check_architecture=False)
    try:
        with open(path, "rb") as f:
            header = f.read(info.header_end)
    except OSError:
        header = b""  # read a moment ago: a file gone since cannot be measured, and says so then
    return RemoteHeader(info, info.size_bytes, 0, header)
