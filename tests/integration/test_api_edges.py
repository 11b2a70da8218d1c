"""The API's edges from review 5 (F4, F7, N1, and the health of a model that cannot load), against
a real `tandem serve` or a real server in this process: a lone surrogate is a 400 naming its field,
`logit_bias` and `top_logprobs` are refused rather than silently ignored, a streaming client that
takes nothing loses its reply at the write deadline (the turn is freed), and /health says "error"
with the reason when the model cannot load."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from app.api.requests import ApiError, parse_request
from tests.serve_process import ServeProcess


@pytest.mark.parametrize(
    ("body", "chat", "param"),
    [
        ({"prompt": "a\ud800"}, False, "prompt"),
        ({"messages": [{"role": "user", "content": "hi \udfff"}]}, True, "messages"),
        (
            {"messages": [{"role": "system", "content": "\ud800"}, {"role": "user", "content": "a"}]},
            True,
            "messages",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "\ud800"}]}]}, True, "messages"),
        ({"prompt": "a", "logit_bias": {"106": 100}}, False, "logit_bias"),
        ({"prompt": "a", "logit_bias": "x"}, False, "logit_bias"),
        ({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 3}, True, "top_logprobs"),
    ],
)
def test_inputs_the_engine_cannot_honour_are_400_naming_the_field(
    body: dict[str, object], chat: bool, param: str
) -> None:
    with pytest.raises(ApiError) as e:
        parse_request(body, chat, 2048)
    assert e.value.status == 400 and e.value.body()["error"]["param"] == param
    assert "\n" not in e.value.message


def test_an_empty_logit_bias_is_accepted() -> None:
    assert parse_request({"prompt": "a", "logit_bias": {}}, False, 2048).prompt == "a"


def test_a_real_server_answers_a_surrogate_with_400(tmp_path: Path, tiny_target: Path) -> None:
    server = ServeProcess(tmp_path, "--model", str(tiny_target), "--threads", "1").started()
    try:
        raw = '{"prompt": "a\\ud800", "max_tokens": 2}'  # valid JSON, not valid Unicode
        r = httpx.post(f"{server.url}/completions", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text  # a 500 with a worker traceback before
        assert r.json()["error"]["param"] == "prompt" and "lone surrogate" in r.json()["error"]["message"]
        r = httpx.post(f"{server.url}/completions", json={"prompt": "a", "logit_bias": {"5": -100}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "logit_bias"  # 200, ignored, before
    finally:
        server.stop()


@pytest.mark.slow  # waits out the server's write deadline (seconds)
def test_a_stream_whose_client_takes_nothing_loses_its_turn_at_the_write_deadline(
    slow_target: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from app.api.engine_bridge import ApiEngine
    from app.api.serve import ApiServer, BackgroundServer, listen
    from app.host.supervisor import EngineSupervisor
    from engine.config import DraftChoice, EngineConfig

    config = EngineConfig(str(slow_target), draft=DraftChoice.parse("none"), n_ctx=2048, n_threads=1)
    host = ApiEngine(EngineSupervisor(), config)
    host.start()
    host.supervisor.wait_loaded(60)
    api = ApiServer(host)
    api.write_timeout_s = 1.0  # 30 s in use (--timeout shortens it)
    sock = listen("127.0.0.1", 0)
    # Small socket buffers (kept by the accepted sockets): the reply outgrows them in a few
    # hundred tokens, as a long reply outgrows the usual ones.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    server = BackgroundServer(api, sock)
    server.start()
    port = sock.getsockname()[1]
    stalled = socket.socket()
    try:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(("127.0.0.1", port))
        # Sampled, not greedy: the tiny model's greedy text repeats a line, and the loop guard
        # would end the reply before it outgrows the buffers.
        body = json.dumps(
            {"prompt": "the", "max_tokens": 2000, "temperature": 1.0, "seed": 1, "stream": True,
             "speculation": "off", "timings_per_token": True}
        ).encode()  # fmt: skip
        stalled.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        time.sleep(0.5)  # (its reply starts first: the plain request waits for the turn)
        started = time.monotonic()
        # Before: the stalled stream held the one turn until its client closed (this timed out).
        r = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "the", "max_tokens": 2}, timeout=60
        )
        waited = time.monotonic() - started
        print(
            f"\nbeside a stream that takes nothing, a plain request answered in {waited:.2f} s (under load)"
        )
        assert r.status_code == 200
        assert "took nothing for 1 s; reply cancelled" in capfd.readouterr().err
    finally:
        stalled.close()
        server.stop()
        host.shutdown()


def test_health_says_error_with_the_reason_when_the_model_cannot_load(tmp_path: Path) -> None:
    from app.api.engine_bridge import ApiEngine
    from app.api.serve import ApiServer, BackgroundServer, listen
    from app.host.supervisor import EngineSupervisor
    from engine.config import DraftChoice, EngineConfig

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)  # a header and nothing after it
    host = ApiEngine(
        EngineSupervisor(), EngineConfig(str(broken), draft=DraftChoice.parse("none"), n_threads=1)
    )
    host.start()
    deadline = time.monotonic() + 60
    while host.supervisor.is_loading and time.monotonic() < deadline:
        time.sleep(0.1)
    server = BackgroundServer(ApiServer(host), listen("127.0.0.1", 0))
    server.start()
    try:
        r = httpx.get(f"http://127.0.0.1:{server.sock.getsockname()[1]}/health", timeout=30)
        assert r.status_code == 503
        assert r.json()["status"] == "error", r.json()  # "loading" for ever before
        assert r.json()["reason"] and "\n" not in r.json()["reason"]
    finally:
        server.stop()
        host.shutdown()
