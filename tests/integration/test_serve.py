"""`tandem serve` against the real `openai` client: a real server process on 127.0.0.1, a real engine.

One server on the tiny model serves most tests (module scope); tests that stop, crash or fill
it start their own, on the slow model, whose long replies last seconds.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.events import Finished
from tests.serve_process import ServeProcess, free_port, tandem_env
from tests.waiting import wait_until

TIMINGS_KEYS = {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second", "draft_n",
                "draft_n_accepted"}  # fmt: skip
STATS_KEYS = {"total_draft_tokens_count", "accepted_draft_tokens_count", "rejected_draft_tokens_count",
              "draft_model"}  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("serve-home")
    s = ServeProcess(home, "--model", str(tiny_target), "--draft", "ngram", "--threads", "1")
    try:
        yield s.started()
    finally:
        s.stop()


def client_for(s: ServeProcess, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url, api_key=key, max_retries=0, timeout=120)


def local_greedy(model: Path, prompt: str, max_tokens: int) -> str:
    """The same work in this process, plain decoding: what the server must return."""
    from engine.session import Engine

    engine = Engine(EngineConfig(str(model), n_threads=1))
    try:
        events = engine.generate(prompt, SamplingParams(temperature=0.0), max_tokens=max_tokens)
        finished = [e for e in events if isinstance(e, Finished)][0]
        return finished.text
    finally:
        engine.close()


def local_chat(model: Path, system: str, user: str, max_tokens: int) -> str:
    """A chat reply in this process, through the engine's own chat formatting (engine.chat)."""
    from engine.chat import chat_prompt, generate_reply
    from engine.session import Engine

    engine = Engine(EngineConfig(str(model), n_threads=1))
    try:
        prompt = chat_prompt(engine, [{"role": "user", "content": user}], system)
        events = generate_reply(engine, prompt, SamplingParams(temperature=0.0), max_tokens=max_tokens)
        return [e for e in events if isinstance(e, Finished)][0].text
    finally:
        engine.close()


@pytest.mark.parametrize("base", [False, True])
def test_chat_uses_the_engines_chat_formatting(
    server: ServeProcess, tiny_target: Path, tiny_base: Path, tmp_path: Path, base: bool
) -> None:
    """The model's chat template, or for a base model the transcript the window uses."""
    s = ServeProcess(tmp_path, "--model", str(tiny_base), "--threads", "1").started() if base else server
    model = tiny_base if base else tiny_target
    try:
        r = client_for(s).chat.completions.create(
            model=model.stem,
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "the cat"}],
            max_tokens=24, temperature=0, extra_body={"speculation": "off"},
        )  # fmt: skip
        assert r.choices[0].message.content == local_chat(model, "Be brief.", "the cat", 24)
        assert r.choices[0].message.content.strip()  # (a reply to compare, not two empty ones)
    finally:
        if base:
            s.stop()


def test_list_models(server: ServeProcess) -> None:
    models = client_for(server).models.list().data
    assert [m.id for m in models] == ["target"]
    assert models[0].model_extra["speculation"] == "ngram"


def test_completion_equals_in_process(server: ServeProcess, tiny_target: Path) -> None:
    prompt = "the cat sat on the mat and the cat"
    c = client_for(server).completions.create(
        model="target", prompt=prompt, max_tokens=24, temperature=0, extra_body={"speculation": "off"}
    )
    assert c.choices[0].text == local_greedy(tiny_target, prompt, 24)
    assert c.choices[0].finish_reason in ("length", "stop")
    extra = c.model_extra
    assert extra["speculation"] == "none"
    assert set(extra["timings"]) >= TIMINGS_KEYS and extra["timings"]["draft_n"] == 0
    assert extra["timings"]["predicted_n"] == c.usage.completion_tokens
    assert (
        c.usage.prompt_tokens > 0
        and c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    )


def test_chat_with_timings_and_stats(server: ServeProcess) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "the the the the the"},
    ]
    r = client_for(server).chat.completions.create(
        model="target", messages=messages, max_tokens=32, temperature=0
    )
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str)
    assert r.usage.completion_tokens <= 32
    extra = r.model_extra
    assert extra["speculation"] == "ngram"
    assert set(extra["timings"]) >= TIMINGS_KEYS
    assert set(extra["stats"]) >= STATS_KEYS and extra["stats"]["draft_model"] == "n-gram lookup"
    t, s = extra["timings"], extra["stats"]
    assert s["total_draft_tokens_count"] == t["draft_n"]
    assert s["accepted_draft_tokens_count"] == t["draft_n_accepted"] <= t["draft_n"]
    assert s["rejected_draft_tokens_count"] == t["draft_n"] - t["draft_n_accepted"]

    # The same conversation one turn on: the engine's KV cache already holds its prefix.
    messages += [
        {"role": "assistant", "content": r.choices[0].message.content},
        {"role": "user", "content": "and?"},
    ]
    r2 = client_for(server).chat.completions.create(
        model="target", messages=messages, max_tokens=4, temperature=0
    )
    t2 = r2.model_extra["timings"]
    assert t2["cache_n"] > 0 and t2["prompt_n"] + t2["cache_n"] == r2.usage.prompt_tokens


def test_stream_ends_with_timings_usage_and_done(server: ServeProcess) -> None:
    messages = [{"role": "user", "content": "tell me about the cat"}]
    client = client_for(server)
    whole = client.chat.completions.create(model="target", messages=messages, max_tokens=20, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="target", messages=messages, max_tokens=20, temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and set(finish[0].model_extra["timings"]) >= TIMINGS_KEYS
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == whole.usage.completion_tokens
    assert set(last.model_extra["timings"]) >= TIMINGS_KEYS and set(last.model_extra["stats"]) >= STATS_KEYS

    # On the wire: server-sent events ending in `data: [DONE]`.
    with httpx.stream(
        "POST", f"{server.url}/completions", json={"prompt": "the", "max_tokens": 3, "stream": True}
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
    assert "timings" in json.loads(events[-2][6:])


def test_stop_seed_and_max_tokens(server: ServeProcess) -> None:
    client = client_for(server)
    prompt = "once upon a time the cat"
    full = (
        client.completions.create(model="target", prompt=prompt, max_tokens=30, temperature=0).choices[0].text
    )
    assert len(full) > 6
    stop = full[3:6]
    cut = client.completions.create(model="target", prompt=prompt, max_tokens=30, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[: full.index(stop)]
    assert cut.choices[0].finish_reason == "stop"

    sampled = [
        client.completions.create(model="target", prompt=prompt, max_tokens=12, temperature=1.0, seed=7)
        .choices[0]
        .text
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]

    short = client.completions.create(model="target", prompt=prompt, max_tokens=3, temperature=0)
    assert short.usage.completion_tokens <= 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        ({"messages": "hi"}, "'messages' must be a non-empty list"),
        ({"messages": []}, "'messages' must be a non-empty list"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"},
            "'max_tokens' must be an integer",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "'max_tokens' must be between"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "temperature": -1},
            "'temperature' must be between",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "top_p": "x"}, "'top_p' must be a number"),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": 5}, "'stop' must be a string"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"},
            "'stream' must be true or false",
        ),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "'n' must be 1"),
        ({"messages": [{"role": "user", "content": "hi"}], "speculation": "maybe"}, "'speculation' must be"),
    ],
)
def test_bad_requests_get_400(server: ServeProcess, body: object, message: str) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(
        f"{server.url}/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
    assert "Traceback" not in r.text


def test_openai_client_sees_400_404_and_the_server_goes_on(server: ServeProcess) -> None:
    client = client_for(server)
    with pytest.raises(openai.BadRequestError, match="'n' must be 1"):
        client.chat.completions.create(model="target", messages=[{"role": "user", "content": "hi"}], n=2)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="only text parts"):
        client.chat.completions.create(
            model="target",
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        )
    assert httpx.get(f"{server.url}/nothing-here").json()["error"]["message"] == "Not Found"
    r = client.chat.completions.create(
        model="target", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert r.choices[0].finish_reason in ("length", "stop")


def test_two_clients_at_once(server: ServeProcess, tiny_target: Path) -> None:
    prompts = ["the cat sat on", "a dog ran to the"]
    results: dict[str, str] = {}
    errors: list[BaseException] = []

    def run(prompt: str) -> None:
        try:
            stream = client_for(server).completions.create(
                model="target", prompt=prompt, max_tokens=40, temperature=0, stream=True,
                extra_body={"speculation": "off"},
            )  # fmt: skip
            results[prompt] = "".join(c.choices[0].text for c in stream if c.choices)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    for p in prompts:
        assert results[p] == local_greedy(tiny_target, p, 40)


def test_api_key(tiny_target: Path, tmp_path: Path) -> None:
    s = ServeProcess(tmp_path, "--model", str(tiny_target), "--threads", "1", "--api-key", "sesame").started()
    try:
        messages = [{"role": "user", "content": "hi"}]
        for key in ("wrong", ""):
            with pytest.raises(openai.AuthenticationError, match="Bearer"):
                client_for(s, key or "x").chat.completions.create(
                    model="target", messages=messages, max_tokens=2
                )
        assert httpx.get(f"{s.url}/models").status_code == 401
        r = httpx.post(f"{s.url}/completions", json={"prompt": "hi"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"http://127.0.0.1:{s.port}/health").status_code == 200
        r2 = client_for(s, "sesame").chat.completions.create(model="target", messages=messages, max_tokens=2)
        assert r2.usage.completion_tokens <= 2
    finally:
        s.stop()


def test_disconnect_cancels_and_the_next_request_runs(slow_target: Path, tmp_path: Path) -> None:
    s = ServeProcess(tmp_path, "--model", str(slow_target), "--threads", "1", "--ctx", "2048").started()
    try:
        client = client_for(s)
        stream = client.completions.create(model="slow-target", prompt="the", max_tokens=2000, temperature=0,
                                           stream=True, extra_body={"speculation": "off"})  # fmt: skip
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()
        # The engine stopped early, told by the disconnect, not by the length.
        line = s.wait_for_line("(client went away)", 30)
        assert "stop: cancelled" in line
        assert int(line.split(" generated")[0].rsplit(" ", 1)[1]) < 2000
        r = client.completions.create(model="slow-target", prompt="a", max_tokens=4, temperature=0)
        assert r.usage.completion_tokens <= 4
    finally:
        s.stop()


@pytest.mark.slow  # a long prompt read on a server, seconds
def test_a_client_leaving_during_the_prefill_stops_it(
    slow_target: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A streaming client that gives up before the first token (a long prompt, read 8 tokens a
    batch): the prefill stops between two batches, the part read stays cached for the next."""
    from app.api.engine_bridge import ApiEngine
    from app.api.serve import ApiServer, BackgroundServer, listen
    from app.host.supervisor import EngineSupervisor

    config = EngineConfig(
        str(slow_target), draft=DraftChoice.parse("ngram"), n_ctx=2048, n_batch=8, n_threads=1
    )
    host = ApiEngine(EngineSupervisor(), config)
    host.start()
    host.supervisor.wait_loaded(60)
    server = BackgroundServer(ApiServer(host), listen("127.0.0.1", 0))
    server.start()
    url = f"http://127.0.0.1:{server.sock.getsockname()[1]}/v1"
    try:
        body = {"prompt": " ".join(f"line {i}: the cat sat on the mat." for i in range(75)), "max_tokens": 50}
        with pytest.raises(httpx.ReadTimeout):  # the full prefill takes seconds; the client leaves
            httpx.post(f"{url}/completions", json={**body, "stream": True},
                       timeout=httpx.Timeout(30, read=0.3))  # fmt: skip
        r = httpx.post(f"{url}/completions", json={**body, "max_tokens": 1}, timeout=60)
        assert r.status_code == 200
        n_prompt, cached = r.json()["usage"]["prompt_tokens"], r.json()["timings"]["cache_n"]
        assert n_prompt > 1500 and 0 < cached < n_prompt - 1  # read in part, then stopped
        log = capfd.readouterr().err
        assert f"completion: {n_prompt} prompt tokens ({cached} read before the stop), 0 generated" in log
        assert "stop: cancelled (client went away)" in log
    finally:
        server.stop()
        host.shutdown()


def test_queue_full_gets_503_with_retry_after(slow_target: Path, tmp_path: Path) -> None:
    s = ServeProcess(tmp_path, "--model", str(slow_target), "--threads", "1", "--queue", "0").started()
    try:
        body = {"prompt": "the", "max_tokens": 2000, "temperature": 0, "stream": True, "speculation": "off"}
        with httpx.stream("POST", f"{s.url}/completions", json=body, timeout=60) as running:
            lines = running.iter_lines()  # (kept: a dropped iterator closes the response)
            assert next(lines).startswith("data: ")  # generating now
            busy = httpx.post(f"{s.url}/completions", json={"prompt": "a", "max_tokens": 2})
            assert busy.status_code == 503 and busy.headers["retry-after"].isdigit()
            assert "busy" in busy.json()["error"]["message"]
        s.wait_for_line("(client went away)", 30)
        assert httpx.post(f"{s.url}/completions", json={"prompt": "a", "max_tokens": 2}).status_code == 200
    finally:
        s.stop()


def test_engine_crash_answers_500_and_next_request_gets_a_fresh_engine(
    slow_target: Path, tmp_path: Path
) -> None:
    s = ServeProcess(tmp_path, "--model", str(slow_target), "--threads", "1").started()
    try:
        client = client_for(s)
        outcome: list[BaseException] = []

        def long_request() -> None:
            try:
                client.completions.create(model="slow-target", prompt="the", max_tokens=2000, temperature=0)
            except BaseException as e:  # noqa: BLE001
                outcome.append(e)

        t = threading.Thread(target=long_request)
        t.start()
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{s.port}/health").json().get("generating") == 1,
            60,
            "the request to start generating",
            interval_s=0.05,
        )
        os.kill(s.worker_pid(), signal.SIGSEGV)  # as a native crash inside llama.cpp would
        t.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], openai.InternalServerError)
        assert "crashed inside llama.cpp (SIGSEGV) during this reply" in str(outcome[0])
        r = client.completions.create(model="slow-target", prompt="a", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens <= 3
        s.wait_for_line("starting a fresh engine")
    finally:
        s.stop()


def test_bad_model_port_in_use_and_open_host_warning(tiny_target: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.serve_process import ROOT

    def serve(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "app.main", "serve", *args], capture_output=True, text=True,
                              timeout=60, cwd=ROOT, env=tandem_env(tmp_path))  # fmt: skip

    def error_line(r: subprocess.CompletedProcess[str]) -> str:
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        return r.stderr.strip().splitlines()[-1]

    missing = tmp_path / "missing.gguf"
    r = serve("--model", str(missing), "--host", "0.0.0.0", "--port", str(free_port()))
    assert "warning: serving on 0.0.0.0 without --api-key" in r.stderr
    assert error_line(r).startswith("error: ") and "missing.gguf" in error_line(r)

    # A key others on this computer can read: on the command line, or in a file open to them.
    r = serve("--model", str(missing), "--api-key", "sesame")
    assert "warning: the key given with --api-key is visible to every user" in r.stderr
    key_file = tmp_path / "key.txt"
    key_file.write_text("sesame\n")
    key_file.chmod(0o644)
    r = serve("--model", str(missing), "--api-key-file", str(key_file))
    assert f"warning: the API key file {key_file} can be read by other users" in r.stderr
    key_file.chmod(0o600)
    r = serve("--model", str(missing), "--api-key-file", str(key_file))
    assert "warning" not in r.stderr and error_line(r).startswith("error: ")

    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = error_line(serve("--model", str(tiny_target), "--port", str(port)))
        assert line == f"error: cannot listen on 127.0.0.1:{port}: the port is in use by another program"
    assert "must be between" in error_line(serve("--model", str(tiny_target), "--port", "70000"))
    assert "--threads must be at least 1" in error_line(serve("--model", str(tiny_target), "--threads", "0"))
