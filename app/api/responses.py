"""What the API answers: the JSON of a whole response or of its streamed chunks (Reply), with
speculation reported the way existing clients read it (llama-server's `timings`, LM Studio's
`stats`), and the server's log line (say)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from app.api.requests import GenerationRequest
from app.host.messages import EngineInfo
from app.library.logs import say as say  # the server's log line: stderr, rate-limited by kind
from engine.events import Finished, Reading, Speculation, Stats


def _ms_per_token(seconds: float, n_tokens: int) -> float:
    return round(seconds * 1000 / n_tokens, 3) if n_tokens else 0.0


def timings(stats: Stats) -> dict[str, Any]:
    """llama-server's `timings` object."""
    return {
        "cache_n": stats.n_prompt_tokens - stats.n_prefilled,
        "prompt_n": stats.n_prefilled,
        "prompt_ms": round(stats.prefill_s * 1000, 3),
        "prompt_per_token_ms": _ms_per_token(stats.prefill_s, stats.n_prefilled),
        "prompt_per_second": round(stats.prefill_tokens_per_s, 3),
        "predicted_n": stats.n_generated,
        "predicted_ms": round(stats.decode_s * 1000, 3),
        "predicted_per_token_ms": _ms_per_token(stats.decode_s, stats.n_generated),
        "predicted_per_second": round(stats.decode_tokens_per_s, 3),
        "draft_n": stats.n_drafted,
        "draft_n_accepted": stats.n_accepted,
    }


def _lmstudio_stats(stats: Stats, info: EngineInfo, stop_reason: str) -> dict[str, Any]:
    """LM Studio's `stats` object (its speculative-decoding counters)."""
    return {
        "tokens_per_second": round(stats.decode_tokens_per_s, 3),
        "time_to_first_token": round(stats.prefill_s, 4),
        "generation_time": round(stats.decode_s, 4),
        "stop_reason": stop_reason,
        "draft_model": info.draft_name if stats.speculation != Speculation.NONE else None,
        "total_draft_tokens_count": stats.n_drafted,
        "accepted_draft_tokens_count": stats.n_accepted,
        "rejected_draft_tokens_count": stats.n_drafted - stats.n_accepted,
        "ignored_draft_tokens_count": 0,
    }


def _usage(stats: Stats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.n_prompt_tokens,
        "completion_tokens": stats.n_generated,
        "total_tokens": stats.n_prompt_tokens + stats.n_generated,
    }


# How a reply ended, as the API says it: OpenAI's "stop" (finished: an end token or a stop
# string) and "length" (the max_tokens cap or the context), and Tandem's own two ends beside them,
# as the window says them: "repetition" (the loop guard stopped a reply repeating itself, which
# "stop" would call finished) and "cancelled" (stopped before its end). The exact engine reason
# is also in stats.stop_reason.
FINISH_REASONS = {
    "length": "length",
    "context": "length",
    "eos": "stop",
    "stop": "stop",
    "cancelled": "cancelled",
    "repetition": "repetition",
}


def model_id(info: EngineInfo) -> str:
    return Path(info.target_path).stem


class Reply:
    """Builds the JSON of one response (whole or streamed) for a chat or a text completion."""

    def __init__(self, request: GenerationRequest, info: EngineInfo) -> None:
        self.request = request
        self.info = info
        prefix = "chatcmpl" if request.chat else "cmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model_id(info)

    def _head(self, chunk: bool) -> dict[str, Any]:
        if self.request.chat:
            kind = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            kind = "text_completion"
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "tandem",
        }

    def extras(self, stats: Stats, stop_reason: str) -> dict[str, Any]:
        return {
            "timings": timings(stats),
            "stats": _lmstudio_stats(stats, self.info, stop_reason),
            "speculation": stats.speculation,
        }

    def whole(self, finished: Finished) -> dict[str, Any]:
        reason = FINISH_REASONS.get(finished.stop_reason, "stop")
        if self.request.chat:
            content: dict[str, Any] = {"message": {"role": "assistant", "content": finished.text}}
        else:
            content = {"text": finished.text}
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": reason}
        return {
            **self._head(chunk=False),
            "choices": [choice],
            "usage": _usage(finished.stats),
            **self.extras(finished.stats, finished.stop_reason),
        }

    def chunk(
        self, text: str | None, finish_reason: str | None = None, first: bool = False
    ) -> dict[str, Any]:
        if self.request.chat:
            delta: dict[str, Any] = {"role": "assistant"} if first else {}
            if text is not None:
                delta["content"] = text
            content: dict[str, Any] = {"delta": delta}
        else:
            content = {"text": text or ""}
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": finish_reason}
        out = {**self._head(chunk=True), "choices": [choice]}
        if self.request.include_usage:
            out["usage"] = None
        return out

    def progress_chunk(self, reading: Reading) -> dict[str, Any]:
        """llama-server's `prompt_progress` chunk (`return_progress`): an empty delta with the
        prompt's tokens, those reused from the cache, those in the cache now and the time so far."""
        progress = {
            "total": reading.n_prompt_tokens,
            "cache": reading.n_cached,
            "processed": reading.n_processed,
            "time_ms": round(reading.elapsed_s * 1000),
        }
        return {**self.chunk(None, first=True), "prompt_progress": progress}

    def last_chunks(self, finished: Finished) -> list[dict[str, Any]]:
        reason = FINISH_REASONS.get(finished.stop_reason, "stop")
        extras = self.extras(finished.stats, finished.stop_reason)
        last = {**self.chunk(None, reason), **extras}
        if not self.request.include_usage:
            return [last]
        usage = {**self._head(chunk=True), "choices": [], "usage": _usage(finished.stats), **extras}
        return [last, usage]


def sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"
