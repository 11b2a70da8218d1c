"""`tandem generate --remote URL`: stream a reply from any OpenAI-compatible server.

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

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from engine.errors import TandemError

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0
LIST_TIMEOUT_S = 30.0  # a model list is quick; a server that does not answer it is not waited on


class RemoteError(TandemError):
    pass


def api_base(url: str) -> str:
    """The server's API root: `http://host:port/v1` from `host:port`, `http://host:port` or the full root."""
    text = url.strip().rstrip("/")
    if not text:
        raise RemoteError("--remote is empty: give the server's address, e.g. http://127.0.0.1:8080")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"--remote must be an http:// or https:// address (got {url!r})")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise RemoteError(f"--remote has a bad port (got {url!r})") from None
    if parts.path in ("", "/"):
        text += "/v1"
    return text


def _message_of(response: Any) -> str:
    """The error sentence in an HTTP error's body (OpenAI's {"error": {"message"}}, or text)."""
    try:
        body = response.json()
    except Exception:
        text = response.text.strip()
        return text[:200] if text else response.reason_phrase
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
            return RemoteError(f"{self.base} needs an API key (HTTP {code}: {message}); pass --api-key")
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
            return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
        except Exception:
            return None

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
        on_text: Any,
        on_chunk: Any = None,
        cancel: Any = None,
    ) -> RemoteResult:
        """POST with stream=true; on_text(text) for each piece as it arrives.

        on_chunk(chunk, text) sees every parsed chunk (the window reads its numbers and extension
        fields); cancel (a threading.Event) set ends the stream at the next line: the connection
        is closed, which a server takes as the client leaving, and finish_reason is "cancelled".
        """
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
                            on_text(text)
                        if choice.get("finish_reason"):
                            result.finish_reason = choice["finish_reason"]
                    if on_chunk is not None:
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


def _report(
    result: RemoteResult, args: argparse.Namespace, base: str, model: str | None, load_s: float
) -> dict[str, Any]:
    """The keys of a local `generate --json`, from what the server said and what was timed here."""
    n_generated = result.usage.get("completion_tokens")
    if not isinstance(n_generated, int):
        n_generated = result.timings.get("predicted_n")
    if not isinstance(n_generated, int):
        n_generated = result.n_chunks
    n_prompt = result.usage.get("prompt_tokens")
    n_prefilled = result.timings.get("prompt_n")
    drafted, accepted, source = result.drafts()
    t_first = result.t_first if result.t_first is not None else result.t_end
    t_last = result.t_last if result.t_last is not None else result.t_end
    prefill_s = t_first - result.t_sent  # the time to the first token, as this computer sees it
    decode_s = t_last - t_first
    tps = (n_generated - 1) / decode_s if n_generated > 1 and decode_s > 0 else 0.0
    speculation = result.speculation
    if speculation is None and drafted is not None:
        speculation = "draft" if drafted > 0 else "none"
    stop_reason = (
        result.stats.get("stop_reason") if isinstance(result.stats.get("stop_reason"), str) else None
    )
    if stop_reason is None:
        stop_reason = {"length": "length", "stop": "stop" if args.stop else "eos"}.get(
            result.finish_reason or "", result.finish_reason or "eos"
        )
    draft_model = result.stats.get("draft_model")
    note = (
        f"drafted and accepted are the server's own counts (from its `{source}`)"
        if source
        else "the server does not report what it drafted"
    )
    return {
        "text": result.text,
        "token_ids": None,  # a server sends text, not token ids
        "speculation": speculation,
        "n_prompt_tokens": n_prompt if isinstance(n_prompt, int) else None,
        "n_prefilled": n_prefilled if isinstance(n_prefilled, int) else None,
        "n_generated": n_generated,
        "n_drafted": drafted,
        "n_accepted": accepted,
        "n_steps": None,
        "acceptance_rate": round(accepted / drafted, 4) if drafted and accepted is not None else 0.0,
        "mean_accepted_length": None,
        "prefill_s": round(prefill_s, 4),
        "decode_s": round(decode_s, 4),
        "prefill_tokens_per_s": (
            round(n_prefilled / prefill_s, 2) if isinstance(n_prefilled, int) and prefill_s > 0 else None
        ),
        "decode_tokens_per_s": round(tps, 2),
        "llama_s": None,
        "llama_fraction": None,
        "step_overhead_ms_median": None,
        "note": note,
        "plain_tokens_per_s_est": None,
        "draft_catch_up_s": None,
        "load_s": round(load_s, 4),
        "stop_reason": stop_reason,
        "model": result.model or model,
        "draft": draft_model if isinstance(draft_model, str) else None,
        "remote": base,
        "time_to_first_token_s": round(prefill_s, 4),
        "server_timings": result.timings or None,
    }


def cmd_generate_remote(args: argparse.Namespace) -> int:
    from app.cli import UserError, read_prompt

    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1 (got {args.max_tokens})")
    if args.temperature < 0:
        raise UserError(f"--temperature must be 0 or more (got {args.temperature})")
    if not 0.0 < args.top_p <= 1.0:
        raise UserError(f"--top-p must be in (0, 1] (got {args.top_p})")
    if args.draft not in (None, "", "none"):
        raise UserError("--draft is for a local model: with --remote the server decides its own speculation")
    base = api_base(args.remote)
    prompt = read_prompt(args)
    client = RemoteClient(base, args.api_key)
    try:
        t0 = time.perf_counter()
        model = client.pick_model(args.model or None)
        load_s = time.perf_counter() - t0
        body: dict[str, Any] = {
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if model:
            body["model"] = model
        if args.seed is not None:
            body["seed"] = args.seed
        if args.stop:
            body["stop"] = args.stop
        # llama.cpp's samplers, sent only when asked for (servers that do not know them may refuse them).
        for key, default in (("top_k", 40), ("min_p", 0.05), ("repeat_penalty", 1.0)):
            if getattr(args, key) != default:
                body[key] = getattr(args, key)
        if args.chat:
            messages = [{"role": "system", "content": args.system}] if args.system else []
            messages.append({"role": "user", "content": prompt})
            body["messages"] = messages
            path = "/chat/completions"
        else:
            body["prompt"] = prompt
            path = "/completions"

        def on_text(text: str) -> None:
            if not args.json:
                sys.stdout.write(text)
                sys.stdout.flush()

        result = client.stream(path, body, on_text)
    finally:
        client.close()
    report = _report(result, args, base, model, load_s)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        drafted = report["n_drafted"]
        drafts = (
            f"drafted {drafted}, accepted {report['n_accepted']} ({report['acceptance_rate']:.0%}, the server's counts)"
            if drafted is not None
            else "drafts not reported by the server"
        )
        print(
            f"[remote {base}] {report['n_generated']} tokens, {report['decode_tokens_per_s']:.1f} tok/s, "
            f"first token after {report['prefill_s']:.2f} s (measured here), {drafts}, "
            f"stop: {report['stop_reason']}",
            file=sys.stderr,
        )
    return 0
