"""A request to the API, checked: the JSON of /v1/chat/completions or /v1/completions parsed
field by field into a GenerationRequest, every bad value a 400 naming the field, and the errors
the way OpenAI's API writes them (ApiError). The server is app/api/serve.py."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.host.messages import ChatTurn
from engine.config import SamplingParams

DEFAULT_TEMPERATURE = 0.8  # llama-server's default when a request names none

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Errors, the way OpenAI's API writes them


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    async def send(self, send: Send) -> None:
        await send_json(send, self.status, self.body(), self.headers)


async def send_json(send: Send, status: int, obj: object, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(obj, ensure_ascii=False).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


# Requests: checked field by field, every bad value a 400 naming the field


@dataclass
class GenerationRequest:
    chat: bool
    model: str | None
    turns: tuple[ChatTurn, ...] = ()
    system_prompt: str = ""
    prompt: str | None = None  # a text completion's raw prompt
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    speculate: bool | None = None
    timings_per_token: bool = False  # llama-server's option: `timings` on every streamed chunk
    return_progress: bool = False  # llama-server's option: `prompt_progress` chunks while reading


def _describe(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(body: dict[str, Any], key: str, lo: float, hi: float, integer: bool = False) -> Any:
    value = body.get(key)
    if value is None:
        return None
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise bad_request(f"'{key}' must be {kind} (got {_describe(value)})", key)
    if not lo <= value <= hi:
        raise bad_request(f"'{key}' must be between {lo:g} and {hi:g} (got {value})", key)
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise bad_request(f"'{key}' must be true or false (got {_describe(value)})", key)
    return value


def _unicode(text: str, where: str, param: str) -> str:
    """Text the engine can encode: JSON's "\\ud800" (a lone surrogate) is valid JSON but no text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise bad_request(
            f"{where} holds a lone surrogate (\\u{ord(text[e.start]):04x} at character {e.start}): "
            "it is not valid Unicode text",
            param,
        ) from None
    return text


def _text_content(content: object, where: str) -> str:
    """A message's content: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return _unicode(content, f"{where}.content", "messages")
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                kind = part.get("type") if isinstance(part, dict) else None
                raise bad_request(
                    f"{where}.content: only text parts are supported (got a part of type {_describe(kind)})",
                    "messages",
                )
            texts.append(part["text"])
        return _unicode("".join(texts), f"{where}.content", "messages")
    raise bad_request(
        f"{where}.content must be a string or a list of text parts (got {_describe(content)})", "messages"
    )


def parse_request(body: object, chat: bool, n_ctx: int) -> GenerationRequest:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request(f"'model' must be a string (got {_describe(model)})", "model")
    n = _number(body, "n", 1, 128, integer=True)
    if n is not None and n != 1:
        raise bad_request(f"'n' must be 1: this server generates one choice per request (got {n})", "n")
    if body.get("logprobs") not in (None, False, 0):
        raise bad_request("'logprobs' is not supported by this server", "logprobs")
    # Refused, not ignored: a client that bans a token must not get a reply that uses it.
    for key in ("logit_bias", "top_logprobs"):
        if body.get(key) not in (None, {}, 0):
            raise bad_request(f"'{key}' is not supported by this server", key)
    if body.get("tools") or body.get("functions"):
        raise bad_request("tools and function calling are not supported by this server", "tools")
    if body.get("echo") not in (None, False):
        raise bad_request("'echo' is not supported by this server", "echo")
    if body.get("suffix") not in (None, ""):
        raise bad_request("'suffix' is not supported by this server", "suffix")
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type") != "text"
    ):
        raise bad_request(
            '\'response_format\' must be {"type": "text"}: structured output is not supported',
            "response_format",
        )
    for key in ("frequency_penalty", "presence_penalty"):  # checked, unused: repeat_penalty is used
        _number(body, key, -2.0, 2.0)

    temperature = _number(body, "temperature", 0.0, 5.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0:
        raise bad_request("'top_p' must be more than 0 (got 0)", "top_p")
    top_k = _number(body, "top_k", 0, 1_000_000, integer=True)
    min_p = _number(body, "min_p", 0.0, 1.0)
    repeat_penalty = _number(body, "repeat_penalty", 0.0, 10.0)
    if repeat_penalty == 0:  # llama.cpp divides by it
        raise bad_request("'repeat_penalty' must be more than 0 (got 0)", "repeat_penalty")
    seed = _number(body, "seed", -(2**63), 2**63 - 1, integer=True)
    defaults = SamplingParams()
    params = SamplingParams(
        temperature=DEFAULT_TEMPERATURE if temperature is None else float(temperature),
        top_k=defaults.top_k if top_k is None else int(top_k),
        top_p=defaults.top_p if top_p is None else float(top_p),
        min_p=defaults.min_p if min_p is None else float(min_p),
        repeat_penalty=defaults.repeat_penalty if repeat_penalty is None else float(repeat_penalty),
        seed=None if seed is None else int(seed) % (2**63),
    )

    max_tokens = _number(body, "max_completion_tokens", 1, 10**9, integer=True)
    if max_tokens is None:
        max_tokens = _number(body, "max_tokens", 1, 10**9, integer=True)
    if max_tokens is not None and max_tokens > n_ctx:
        max_tokens = n_ctx  # the reply ends at the context's end anyway

    stop_value = body.get("stop")
    if stop_value is None:
        stop: tuple[str, ...] = ()
    elif isinstance(stop_value, str):
        stop = (stop_value,) if stop_value else ()
    elif isinstance(stop_value, list) and all(isinstance(s, str) for s in stop_value):
        if len(stop_value) > 16:
            raise bad_request(f"'stop' may hold at most 16 strings (got {len(stop_value)})", "stop")
        stop = tuple(s for s in stop_value if s)
    else:
        raise bad_request(
            f"'stop' must be a string or a list of strings (got {_describe(stop_value)})", "stop"
        )

    stream = _flag(body, "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise bad_request(
                f"'stream_options' must be an object (got {_describe(options)})", "stream_options"
            )
        include_usage = _flag(options, "include_usage")

    speculation = body.get("speculation")
    if speculation not in (None, "on", "off"):
        raise bad_request(
            f'\'speculation\' must be "on" or "off" (got {_describe(speculation)})', "speculation"
        )

    request = GenerationRequest(
        chat=chat,
        model=model,
        params=params,
        max_tokens=max_tokens,
        stop=stop,
        stream=stream,
        include_usage=include_usage,
        speculate=False if speculation == "off" else None,
        timings_per_token=_flag(body, "timings_per_token"),
        return_progress=_flag(body, "return_progress"),
    )
    if chat:
        request.turns, request.system_prompt = _parse_messages(body.get("messages"))
    else:
        request.prompt = _parse_prompt(body.get("prompt"))
    return request


def _parse_messages(messages: object) -> tuple[tuple[ChatTurn, ...], str]:
    if not isinstance(messages, list) or not messages:
        raise bad_request(
            f"'messages' must be a non-empty list of messages (got {_describe(messages)})", "messages"
        )
    turns: list[ChatTurn] = []
    system: list[str] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad_request(
                f"{where} must be an object with 'role' and 'content' (got {_describe(message)})", "messages"
            )
        role = message.get("role")
        content = _text_content(message.get("content"), where)
        if role in ("system", "developer"):
            system.append(content)
        elif role in ("user", "assistant"):
            turns.append(ChatTurn(role, content))
        else:
            raise bad_request(
                f'{where}.role must be "system", "developer", "user" or "assistant" (got {_describe(role)})',
                "messages",
            )
    if not turns:
        raise bad_request("'messages' holds no user or assistant message", "messages")
    return tuple(turns), "\n\n".join(s for s in system if s.strip())


def _parse_prompt(prompt: object) -> str:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
        raise bad_request(
            "'prompt' may hold one prompt: this server generates one choice per request", "prompt"
        )
    if not isinstance(prompt, str):
        raise bad_request(f"'prompt' must be a string (got {_describe(prompt)})", "prompt")
    if not prompt:
        raise bad_request("'prompt' is empty", "prompt")
    return _unicode(prompt, "'prompt'", "prompt")
