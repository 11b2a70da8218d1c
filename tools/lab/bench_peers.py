"""The lab bench's peers: other programs' speculative decoding on the same prompts, each in a
process of its own (tools/lab/bench.py runs them beside Tandem).

- llama-cpp-python's own prompt lookup (LlamaPromptLookupDecoding), `run_peer`;
- llama.cpp's `llama-lookup` (built from the same vendored sources with the same flags), greedy;
- llama.cpp's `llama-server` with each of its n-gram `--spec-type` kinds at their defaults.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from engine.errors import TandemError

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `-m tools.lab.bench_peers` runs from there


@dataclass(frozen=True)
class ProcessRun:
    """One `tandem generate` (or `llama-lookup`) process, timed from outside."""

    wall_s: float
    load_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    catch_up_s: float = 0.0  # a draft model's first pass over the prompt (part of decode_s)
    n_generated: int = 0
    token_ids: tuple[int, ...] = ()


class PeerPromptLookup:
    """llama-cpp-python's own speculative decoding (LlamaPromptLookupDecoding), for comparison.
    Used in a process of its own (`run_peer`): loaded beside Tandem's engine, its model and
    threads cost Tandem's runs about 3% (A/B in one process, AVX-512 Xeon: 4.27x vs 4.39x)."""

    def __init__(self, model_path: str, n_ctx: int, n_threads: int, n_gpu_layers: int) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        # Its draft_model path needs logits for every position (docs/findings.md): logits_all=True.
        self.llm = Llama(
            model_path=model_path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,  # (its default is every core: with --threads 1, two)
            n_gpu_layers=n_gpu_layers,
            logits_all=True,
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10),
            verbose=False,
        )

    def tokens_per_s(self, prompt: str, max_tokens: int) -> float:
        self.llm.reset()
        times = []
        for _chunk in self.llm.create_completion(
            prompt, max_tokens=max_tokens, temperature=0.0, repeat_penalty=1.0, stream=True
        ):
            times.append(time.perf_counter())
        # Tokens after the first, over the time after the first: excludes the prompt, as ours does.
        return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0

    def close(self) -> None:
        self.llm.close()


def run_peer(
    model: str, prompt_file: str, max_tokens: int, n_ctx: int, n_threads: int, n_gpu_layers: int
) -> float:
    """llama-cpp-python's prompt lookup on one prompt, in a process of its own: decode tok/s."""
    cmd = [
        sys.executable, "-m", "tools.lab.bench_peers", "--peer-child", model, prompt_file,
        str(max_tokens), str(n_ctx), str(n_threads), str(n_gpu_layers),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600, cwd=ROOT)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise TandemError(f"llama-cpp-python's prompt lookup failed (exit {done.returncode}): {tail[0]}")
    return float(done.stdout.strip().splitlines()[-1])


def _peer_child(argv: list[str]) -> None:
    model, prompt_file, max_tokens, n_ctx, n_threads, n_gpu_layers = argv
    peer = PeerPromptLookup(model, int(n_ctx), int(n_threads), int(n_gpu_layers))
    try:
        prompt = Path(prompt_file).read_text(encoding="utf-8")
        print(peer.tokens_per_s(prompt, int(max_tokens)))
    finally:
        peer.close()


def find_tool(name: str) -> str | None:
    """llama.cpp's own tools: `make setup` copies them next to the venv's python."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


_LOOKUP_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_LOOKUP_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
_LOOKUP_ACCEPT = re.compile(r"n_accept\s*=\s*(\d+)")
_LOOKUP_TRIES = 6


def run_llama_lookup(
    binary: str,
    model: str,
    prompt_file: str,
    max_tokens: int,
    n_threads: int,
    n_ctx: int,
    extra: tuple[str, ...] = (),
) -> tuple[float | None, float | None, ProcessRun]:
    """llama.cpp's n-gram speculative example, greedy: (decode tok/s, acceptance, the process).
    extra: where the layers go, as for Tandem (-ngl, --rpc)."""
    cmd = [
        binary, "-m", model, "-f", prompt_file, "-n", str(max_tokens), "-t", str(n_threads),
        "-tb", str(n_threads), "-c", str(n_ctx), "--temp", "0", "--spec-draft-n-max", "10", *extra,
    ]  # fmt: skip
    # llama.cpp's logger is a thread that prints a queue, and the process exits without waiting
    # for it (common_log_main() is leaked on purpose), so on a busy machine the closing lines,
    # the timing among them, are sometimes lost (3 runs in 20 with both cores loaded). Such a
    # run is repeated; a run that prints its timing is the figure.
    for _ in range(_LOOKUP_TRIES):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
        wall = time.perf_counter() - t0
        log = done.stdout + done.stderr
        if done.returncode != 0:
            tail = log.strip().splitlines()[-1:] or ["no output"]
            raise TandemError(f"llama-lookup failed (exit {done.returncode}): {tail[0]}")
        m = _LOOKUP_DECODED.search(log)
        if m is not None:
            break
    else:
        return None, None, ProcessRun(wall)
    n, seconds = int(m.group(1)), float(m.group(2))
    drafted, accepted = _LOOKUP_DRAFTED.search(log), _LOOKUP_ACCEPT.search(log)
    rate = (
        int(accepted.group(1)) / int(drafted.group(1))
        if drafted and accepted and int(drafted.group(1))
        else None
    )
    return n / seconds if seconds > 0 else 0.0, rate, ProcessRun(wall, n_generated=n)


SERVER_KINDS = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")


@dataclass(frozen=True)
class ServerRun:
    """One reply from llama-server with one n-gram kind, as its /completion timings report it."""

    tokens_per_s: float
    n_drafted: int
    n_accepted: int
    text: str


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_llama_server(
    binary: str,
    model: str,
    prompt: str,
    max_tokens: int,
    n_threads: int,
    n_ctx: int,
    spec_type: str,
    extra: tuple[str, ...] = (),
) -> ServerRun:
    """llama.cpp's server with one n-gram speculative kind at its defaults (`--spec-type`), greedy,
    one request on a fresh server: decode tok/s as its timings report it (predicted_per_second)."""
    import urllib.error
    import urllib.request

    port = _free_port()
    cmd = [
        binary, "-m", model, "-t", str(n_threads), "-tb", str(n_threads), "-c", str(n_ctx),
        "-np", "1", "--host", "127.0.0.1", "--port", str(port), "--spec-type", spec_type, *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                tail = (proc.stderr.read() if proc.stderr else "").strip().splitlines()[-1:] or ["no output"]
                raise TandemError(
                    f"llama-server --spec-type {spec_type} exited ({proc.returncode}): {tail[0]}"
                )
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TandemError(f"llama-server --spec-type {spec_type} did not start within 120 s")
            time.sleep(0.1)
        body = json.dumps(
            {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "top_k": 1, "cache_prompt": False}
        ).encode()
        request = urllib.request.Request(
            f"{base}/completion", body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=600) as r:
            reply = json.loads(r.read())
        timings = reply.get("timings", {})
        return ServerRun(
            float(timings.get("predicted_per_second", 0.0)),
            int(timings.get("draft_n", 0)),
            int(timings.get("draft_n_accepted", 0)),
            str(reply.get("content", "")),
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__" and sys.argv[1:2] == ["--peer-child"]:
    _peer_child(sys.argv[2:])
