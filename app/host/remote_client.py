"""A client of any OpenAI-compatible server: it streams a reply for `tandem generate --remote URL`
(app/cli/remote.py) and for the window's remote engine (app/host/remote_worker.py).

llama-server, LM Studio, vLLM, SGLang, Ollama's /v1, `tandem serve`: all speak the same
`/v1/completions` and `/v1/chat/completions` with server-sent events. Tokens per second and the
time to the first token are measured here; what was drafted and accepted is the server's own
count, when it reports one: llama-server's `timings` (draft_n, draft_n_accepted, also sent by
`tandem serve`), LM Studio's `stats` (total/accepted_draft_tokens_count), vLLM's per-request
`metrics.speculative_decoding` (when started with --per-request-spec-decode-metrics). A server
that reports none leaves those numbers null: nothing is guessed.

Every failure is one sentence naming the address: nothing listening, a refused key, an unknown
model, an HTTP error, a stream cut mid-reply.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from engine.errors import ErrorKind, TandemError
from engine.rpc import is_loopback

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0
LIST_TIMEOUT_S = 30.0  # a model list is quick; a server that does not answer it is not waited on


class RemoteFix(StrEnum):
    """What the user can change to fix a RemoteError, as data: each edge names the input its own
    way (the command line: --remote, --api-key; the window: its Settings fields)."""

    ADDRESS = "address"  # the server's address is wrong: the sentence is about it
    API_KEY = "api_key"  # the server wants an API key and none was given


class RemoteError(TandemError):
    kind = ErrorKind.REMOTE

    def __init__(self, problem: str, fix: RemoteFix | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(self.sentence())

    def sentence(self, address: str = "--remote", give_key: str = "pass --api-key") -> str:
        """The error with the input to change named as an edge names it (default: the command
        line's; str(error) is this)."""
        if self.fix is RemoteFix.ADDRESS:
            return f"{address} {self.problem}"
        if self.fix is RemoteFix.API_KEY:
            return f"{self.problem}; {give_key}"
        return self.problem


def api_base(url: str) -> str:
    """The server's API root: `http://host:port/v1` from `host:port`, `http://host:port` or the full root."""
    text = url.strip().rstrip("/")
    if not text:
        raise RemoteError(
            "is empty: give the server's address, e.g. http://127.0.0.1:8080", RemoteFix.ADDRESS
        )
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"must be an http:// or https:// address (got {url!r})", RemoteFix.ADDRESS)
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise RemoteError(f"has a bad port (got {url!r})", RemoteFix.ADDRESS) from None
    if parts.path in ("", "/"):
        text += "/v1"
    return text


def _message_of(response: Any) -> str:
    """The error sentence in an HTTP error's body (OpenAI's {"error": {"message"}}, or text)."""
    try:
        body = response.json()
    except Exception:
        text = " ".join(response.text.split())  # one line
        if not text or text.startswith("<"):  # an HTML error page: its status line says it
            return str(response.reason_phrase)
        return text[:200]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("detail") or json.dumps(error)[:200])
        if isinstance(error, str):
            return error
        if "detail" in body:
            return str(body["detail"])
    return json.dumps(body)[:200]


@dataclass
class RemoteResult:
    text: str = ""
    n_chunks: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    speculation: str | None = None  # as `tandem serve` reports it
    model: str | None = None
    t_sent: float = 0.0
    t_first: float | None = None
    t_last: float | None = None
    t_end: float = 0.0

    def absorb(self, chunk: dict[str, Any]) -> None:
        """One streamed chunk (or a whole response): text, and the numbers some servers add."""
        for key in ("timings", "stats", "metrics"):
            value = chunk.get(key)
            if isinstance(value, dict) and value:
                getattr(self, key).update(value)
        if isinstance(chunk.get("usage"), dict):
            self.usage.update(chunk["usage"])
        if isinstance(chunk.get("speculation"), str):
            self.speculation = chunk["speculation"]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]

    def drafts(self) -> tuple[int | None, int | None, str | None]:
        """(drafted, accepted, where the server said so), or Nones when it did not."""
        t = self.timings
        if isinstance(t.get("draft_n"), int):
            return t["draft_n"], int(t.get("draft_n_accepted") or 0), "timings"
        s = self.stats
        if isinstance(s.get("total_draft_tokens_count"), int):
            return s["total_draft_tokens_count"], int(s.get("accepted_draft_tokens_count") or 0), "stats"
        spec = self.metrics.get("speculative_decoding")
        if isinstance(spec, dict):
            drafted = next((v for k, v in spec.items() if "draft" in k and isinstance(v, int)), None)
            accepted = next((v for k, v in spec.items() if "accept" in k and isinstance(v, int)), None)
            if drafted is not None:
                return drafted, accepted or 0, "metrics"
        return None, None, None


def cleartext_warning(base: str, api_key: str | None) -> str | None:
    """A sentence when an API key would cross the network unencrypted: plain http:// to another
    computer (on this computer, 127.0.0.1 or localhost, it never leaves it). None otherwise."""
    if not api_key:
        return None
    parts = urlsplit(base)
    host = (parts.hostname or "").lower()
    if parts.scheme != "http" or is_loopback(host):
        return None
    return (
        f"the API key for {host} is sent unencrypted (plain http://): anyone on the network between "
        "can read it; use https:// where the server offers it"
    )


class RemoteClient:
    def __init__(self, base: str, api_key: str | None) -> None:
        import httpx

        self.base = base
        self.api_key = api_key
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            follow_redirects=True,
        )
        self.entries: dict[str, dict[str, Any]] = {}  # the /models entries last listed, by id

    def close(self) -> None:
        self._http.close()

    def _transport_error(self, e: Exception, n_tokens: int | None = None) -> RemoteError:
        import httpx

        reason = str(e) or type(e).__name__
        if n_tokens is not None:
            if isinstance(e, httpx.ReadTimeout):
                reason = f"nothing came for {READ_TIMEOUT_S:.0f} s"
            return RemoteError(
                f"the stream from {self.base} was cut after {n_tokens} characters of reply ({reason})"
            )
        if isinstance(e, httpx.ConnectTimeout):
            return RemoteError(f"{self.base} did not answer within {CONNECT_TIMEOUT_S:.0f} s")
        if isinstance(e, httpx.ConnectError):
            if "refused" in reason.lower():
                return RemoteError(f"nothing is listening at {self.base} (connection refused)")
            return RemoteError(f"cannot reach {self.base}: {reason}")
        if isinstance(e, httpx.ReadTimeout):
            return RemoteError(f"{self.base} sent no answer for {READ_TIMEOUT_S:.0f} s")
        return RemoteError(f"{self.base} broke off the connection ({reason})")

    def _status_error(self, response: Any, what: str) -> RemoteError:
        code = response.status_code
        message = _message_of(response)
        if code in (401, 403):
            if self.api_key:
                return RemoteError(f"{self.base} refused the API key (HTTP {code}: {message})")
            return RemoteError(f"{self.base} needs an API key (HTTP {code}: {message})", RemoteFix.API_KEY)
        return RemoteError(f"{self.base} answered {what} with HTTP {code}: {message}")

    def list_models(self) -> list[str] | None:
        """The ids the server lists, or None where it has no /models."""
        import httpx

        try:
            response = self._http.get(
                f"{self.base}/models", timeout=httpx.Timeout(LIST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
            )
        except httpx.ReadTimeout:
            raise RemoteError(f"{self.base} did not list its models within {LIST_TIMEOUT_S:.0f} s") from None
        except httpx.HTTPError as e:
            raise self._transport_error(e) from None
        if response.status_code in (401, 403):
            raise self._status_error(response, "GET /models")
        if response.status_code in (404, 405, 501):
            return None
        if response.status_code >= 400:
            raise self._status_error(response, "GET /models")
        try:
            data = response.json().get("data", [])
            self.entries = {str(m["id"]): m for m in data if isinstance(m, dict) and "id" in m}
        except Exception:
            return None
        return list(self.entries)

    def pick_model(self, wanted: str | None) -> str | None:
        models = self.list_models()
        if models is None:
            return wanted
        if wanted:
            if wanted not in models:
                listed = ", ".join(repr(m) for m in models[:10]) or "none"
                raise RemoteError(f"{self.base} has no model {wanted!r} (it serves: {listed})")
            return wanted
        return models[0] if models else None

    def stream(
        self,
        path: str,
        body: dict[str, Any],
        on_chunk: Callable[[dict[str, Any], str], None],
        cancel: Any = None,
    ) -> RemoteResult:
        """POST with stream=true; on_chunk(chunk, its text) for every parsed chunk as it arrives (the
        window reads its numbers and extension fields too). cancel (a threading.Event) set ends the
        stream at the next line: the connection is closed, which a server takes as the client
        leaving, and finish_reason is "cancelled"."""
        import httpx

        result = RemoteResult()
        result.t_sent = time.perf_counter()
        done = False
        try:
            with self._http.stream("POST", f"{self.base}{path}", json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    error = self._status_error(response, f"POST {path}")
                    if response.status_code == 404 and "model" in _message_of(response).lower():
                        error = RemoteError(
                            f"{self.base} has no model {body.get('model')!r} ({_message_of(response)})"
                        )
                    raise error
                for line in response.iter_lines():
                    if cancel is not None and cancel.is_set():
                        result.finish_reason = "cancelled"
                        break
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                        break
                    try:
                        chunk = json.loads(payload)
                    except ValueError:
                        continue
                    if not isinstance(chunk, dict):
                        continue
                    if "error" in chunk:
                        error = chunk["error"]
                        message = error.get("message") if isinstance(error, dict) else str(error)
                        raise RemoteError(
                            f"{self.base} failed mid-reply after {len(result.text)} characters: {message}"
                        )
                    result.absorb(chunk)
                    chunk_text = ""
                    for choice in chunk.get("choices") or []:
                        if not isinstance(choice, dict):
                            continue
                        delta = choice.get("delta")
                        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
                        if text:
                            now = time.perf_counter()
                            if result.t_first is None:
                                result.t_first = now
                            result.t_last = now
                            result.text += text
                            result.n_chunks += 1
                            chunk_text += text
                        if choice.get("finish_reason"):
                            result.finish_reason = choice["finish_reason"]
                    on_chunk(chunk, chunk_text)
        except httpx.HTTPError as e:
            raise self._transport_error(e, len(result.text)) from None
        result.t_end = time.perf_counter()
        if not done and result.finish_reason is None:
            raise RemoteError(
                f"the stream from {self.base} was cut after {len(result.text)} characters of reply "
                "(the connection closed before the reply ended)"
            )
        return result
