"""The hub's JSON API for the pair doctor: GGUF repositories that match a search, and a
repository's GGUF files with their sizes, through huggingface_hub's HfApi.

HfApi.list_models has no timeout of its own and huggingface_hub 2.x retries a refused
connection for about 23 s, so every call runs on a thread with a deadline and a cancel flag, and
a quick connection probe says "cannot reach the hub" at once. No Qt; nothing is downloaded.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import urlsplit

from app.library.downloads import DEFAULT_TIMEOUT_S, hub_endpoint, hub_unreachable
from app.library.remote_gguf import CheckCancelled
from app.store import SHARD_RE
from engine.errors import DownloadError, TandemError

T = TypeVar("T")

SEARCH_LIMIT = 10
OFFLINE = "the hub is off because HF_HUB_OFFLINE is set; unset it to search"

_QUANT_RE = re.compile(
    r"(?i)(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32|FP16|FP32|TQ\d_\d|MXFP4(?:_MOE)?)(?=[-_.]|$)"
)


class HubSearchError(DownloadError):
    """The hub could not answer a search or a listing."""


def quantization_of(filename: str) -> str:
    """The quantisation a file name announces (Q4_K_M, IQ2_XS, F16...), or "other"."""
    stem = SHARD_RE.sub(".gguf", filename).rsplit("/", 1)[-1].removesuffix(".gguf")
    found = _QUANT_RE.findall(stem)
    return found[-1].upper() if found else "other"


def _with_deadline(fn: Callable[[], T], timeout_s: float, cancel: threading.Event | None, what: str) -> T:
    """Run a hub call on a thread and stop waiting for it after timeout_s (HfApi.list_models has
    no timeout of its own): a slow hub never freezes the caller. The thread ends with its socket."""
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as e:  # handed to the caller
            error.append(e)

    thread = threading.Thread(target=run, name="hub-call", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive():
        if cancel is not None and cancel.is_set():
            raise CheckCancelled("cancelled")
        left = deadline - time.monotonic()
        if left <= 0:
            raise HubSearchError(f"the hub did not answer {what} within {timeout_s:g} s; try again later")
        thread.join(min(left, 0.05))
    if error:
        raise _search_error(error[0], what)
    return result[0]


def _search_error(exc: BaseException, what: str) -> BaseException:
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    if isinstance(exc, TandemError):
        return exc
    if isinstance(exc, OfflineModeIsEnabled):
        return HubSearchError(OFFLINE)
    if isinstance(exc, RepositoryNotFoundError):
        return HubSearchError(f"{what}: the repository was not found on the hub")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "an error"
        return HubSearchError(f"the hub answered HTTP {status} to {what}; try again later")
    if isinstance(exc, httpx2.TimeoutException):
        return HubSearchError(f"the hub did not answer {what} in time; try again later")
    if isinstance(exc, httpx2.TransportError):
        return hub_unreachable("offline?")
    return exc


def _api() -> Any:
    import logging

    from huggingface_hub import HfApi

    # Its retry notices ("Retrying in 8s") would land on the terminal between our own lines.
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    return HfApi(endpoint=hub_endpoint())


_PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


def _check_online(timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Offline mode, or a hub nobody answers at: say so now. huggingface_hub 2.x retries a refused
    connection five times with backoff (about 23 s) before giving up."""
    import os
    import socket

    from app.library.downloads import _is_offline

    if _is_offline():
        raise HubSearchError(OFFLINE)
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return  # the proxy decides; a direct connection says nothing
    endpoint = hub_endpoint()
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=min(timeout_s, 10.0)):
            pass
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__)
        raise hub_unreachable(reason, endpoint) from e


@dataclass(frozen=True)
class HubGGUF:
    """One model file in a repository (a split model's shards counted as one)."""

    repo_id: str
    filename: str  # the first shard of a split model
    size_bytes: int  # all shards together; 0 when the hub did not say
    quantization: str
    n_shards: int = 1


@dataclass(frozen=True)
class HubRepo:
    repo_id: str
    downloads: int
    files: tuple[HubGGUF, ...] = ()

    def by_quantization(self) -> list[tuple[str, list[HubGGUF]]]:
        groups: dict[str, list[HubGGUF]] = {}
        for f in sorted(self.files, key=lambda f: (f.size_bytes, f.filename)):
            groups.setdefault(f.quantization, []).append(f)
        return sorted(groups.items(), key=lambda g: min(f.size_bytes for f in g[1]))


def gguf_files(siblings: Iterable[Any], repo_id: str) -> tuple[HubGGUF, ...]:
    """The GGUF files of a listing (huggingface_hub's RepoSibling), split models joined."""
    shards: dict[str, list[Any]] = {}
    singles: list[HubGGUF] = []
    for s in siblings:
        name = s.rfilename
        if not name.lower().endswith(".gguf"):
            continue
        size = int(s.size or (s.lfs.size if s.lfs else 0) or 0)
        m = SHARD_RE.search(name)
        if m:
            shards.setdefault(name[: m.start()], []).append((name, size))
        else:
            singles.append(HubGGUF(repo_id, name, size, quantization_of(name)))
    for parts in shards.values():
        parts.sort()
        first = parts[0][0]
        singles.append(HubGGUF(repo_id, first, sum(p[1] for p in parts), quantization_of(first), len(parts)))
    return tuple(singles)


def list_files(
    repo_id: str,
    revision: str = "main",
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
) -> tuple[HubGGUF, ...]:
    """A repository's GGUF files with their sizes (model_info with files_metadata)."""
    _check_online(timeout_s)
    api = _api()
    info = _with_deadline(
        lambda: api.model_info(
            repo_id, revision=revision if revision != "main" else None, files_metadata=True, timeout=timeout_s
        ),
        timeout_s,
        cancel,
        f"the listing of {repo_id}",
    )
    return gguf_files(info.siblings or [], repo_id)


def search(
    query: str,
    *,
    limit: int = SEARCH_LIMIT,
    author: str | None = None,
    with_files: bool = True,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cancel: threading.Event | None = None,
    on_listed: Callable[[int, int], None] | None = None,
) -> list[HubRepo]:
    """GGUF repositories matching query, most downloaded first, each with its files and sizes.
    on_listed(n_done, n_repos) is called (from the calling thread) as each listing comes in."""
    query = query.strip()
    if not query:
        raise TandemError("give something to search for, e.g. `qwen2.5 7b instruct`")
    _check_online(timeout_s)
    api = _api()
    found = _with_deadline(
        lambda: list(
            api.list_models(search=query, author=author, filter="gguf", sort="downloads", limit=limit)
        ),
        timeout_s,
        cancel,
        f"the search for '{query}'",
    )
    repos = [HubRepo(m.id, int(m.downloads or 0)) for m in found]
    if not with_files or not repos:
        return repos

    def with_listing(repo: HubRepo) -> HubRepo:
        try:
            return replace(repo, files=list_files(repo.repo_id, timeout_s=timeout_s, cancel=cancel))
        except (HubSearchError, DownloadError):
            return repo

    with ThreadPoolExecutor(4) as pool:
        listed = [pool.submit(with_listing, repo) for repo in repos]
        for n_done, done in enumerate(as_completed(listed), 1):
            done.result()  # a cancel ends the search here
            if on_listed is not None:
                on_listed(n_done, len(repos))
        return [f.result() for f in listed]
