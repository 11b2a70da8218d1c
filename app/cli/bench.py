"""`tandem bench`: plain and speculative decoding side by side, in one run, on the same prompts.

Two views of the same work, because a user waits for both:
- **Decode**: tokens per second once the prompt is in, in this process. Beside it the ceiling
  the machine allows right now: with every drafted token accepted, the best speedup is
  max over k of (k+1)·t(1)/t(k+1), where t(n) is one n-row verify batch, timed in the same run
  after the prompt and half the reply (where the reply's steps run: see measure_ceiling).
  Peers on the same prompts: llama-cpp-python's own prompt lookup (LlamaPromptLookupDecoding)
  and llama.cpp's `llama-lookup` (built from the same vendored sources with the same flags).
- **Whole process**: `tandem generate` run as a separate process, plain and speculative, timed
  from outside: start-up, model load, any measuring, prefill and decode, all of it. The cost
  cache is warmed first by one run on another prompt and by timing the machine's verify batches
  (what the window does when first idle: Engine.calibrate), as it is for a user's second run, and
  every measured run, here or in a process, starts from that same cache (the bench keeps its
  own in a temporary folder: the user's is never touched).

For every prompt and repeat the runs alternate (plain, speculative, peers) so machine noise hits
them alike, and every run starts from a fresh KV cache and fresh acceptance statistics (a draft
cache reused between runs of the same prompt inflates speculative numbers: llama.cpp PR #10455).
Speed claims live here, as ratios measured side by side, never in unit tests.

--again measures a request asked a second time (Regenerate, a client sending the same request):
a first answer, not timed (another seed when sampling), is what Tandem's reply memory drafts from
(engine.text_index) and what llama-lookup's dynamic n-gram cache (-lcd) holds. The plain run
neither drafts from it nor adds to it. In-process only: earlier answers live in a process.

Why this file is long: one command's measurement and its report (run_bench, the ceiling, the peers,
to_markdown and the JSON) change together; the report is the part to move out when it grows again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.paths import resources_dir
from engine.chat import transcript
from engine.config import PLAIN_DECODING, DraftChoice, SamplingParams
from engine.errors import TandemError
from engine.events import Finished, Speculation, TextPiece
from engine.session import Engine

CEILING_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# Sets whose plain replies are checked for doing the work their prompt names (copied from the
# prompt, not looping): copy and edit prompts, the held-out ones, and mixed work (a Markdown table
# or an HTML list made from the prompt's data: short copies between new text, where llama-server's
# n-gram kinds draft little and a drafter that guesses wrong is slower than plain decoding).
CHECKED_SETS = ("copy", "held-out", "mixed")
WARM_UP_PROMPT = (
    "Original text:\nThe river rises in the hills above the town and runs south to the sea.\n\n"
    "Copy of the original text:\nThe river rises"
)
# ...and, with a draft model, first a prompt with nothing to copy: beside a draft model the text's
# own drafts win on the copy prompt, and a user's first run would have measured the model on
# fresh text (without it, the cache knows nothing of the model's acceptance).
WARM_UP_FRESH_PROMPT = "Question: How do bees make honey, and why do they store it?\nAnswer:"


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    set: str
    prompt: str
    # The documents set: files under resources/ attached to `request`, the prompt made from them in
    # the model's own chat template (render_prompt) as the window and `generate --attach` make it.
    documents: tuple[str, ...] = ()
    request: str = ""


def render_prompt(engine: Engine, p: BenchPrompt) -> BenchPrompt:
    """A documents prompt as the model reads it: the documents and the request as one user message."""
    if not p.documents:
        return p
    from app.library.documents import read_document, with_documents
    from engine.chat import chat_prompt

    documents = [read_document(resources_dir() / d) for d in p.documents]
    message = with_documents(p.request, documents)
    prompt = chat_prompt(engine, [{"role": "user", "content": message}])
    return dataclasses.replace(p, prompt=prompt)


def document_spans_of(engine: Engine, p: BenchPrompt) -> tuple[tuple[int, int], ...]:
    """Where a documents prompt's documents lie, in tokens (drafts from them are counted apart)."""
    if not p.documents:
        return ()
    from app.library.documents import read_document
    from engine.chat import document_token_spans

    return document_token_spans(
        engine, p.prompt, [read_document(resources_dir() / d).text for d in p.documents]
    )


def copy_and_loop_shares(reply: tuple[int, ...], source: list[int], n: int = 6) -> tuple[float, float]:
    """Does a reply do the work its prompt names? (share of the reply's tokens inside n-grams that
    occur in the source documents, share of its n-grams it said before: a loop, which drafts fast
    and is no copy)."""
    if len(reply) < n:
        return 0.0, 0.0
    in_source = {tuple(source[i : i + n]) for i in range(len(source) - n + 1)}
    covered = [False] * len(reply)
    seen: set[tuple[int, ...]] = set()
    n_repeats = 0
    for i in range(len(reply) - n + 1):
        gram = tuple(reply[i : i + n])
        if gram in in_source:
            covered[i : i + n] = [True] * n
        n_repeats += gram in seen
        seen.add(gram)
    return sum(covered) / len(reply), n_repeats / (len(reply) - n + 1)


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


@dataclass(frozen=True)
class PromptResult:
    name: str
    set: str
    plain_tokens_per_s: float
    spec_tokens_per_s: float
    ceiling: float | None  # best possible decode speedup on this machine now (all drafts accepted)
    peer_tokens_per_s: float | None  # llama-cpp-python's LlamaPromptLookupDecoding
    lookup_tokens_per_s: float | None  # llama.cpp's llama-lookup
    lookup_acceptance: float | None
    acceptance_rate: float
    mean_accepted_length: float
    n_generated: int
    same_text: bool  # speculative output == plain output, in this process
    same_text_processes: bool | None  # the same across the two `tandem generate` processes
    step_overhead_ms_median: float
    # With a draft model: the share of accepted drafts that came from n-gram matches in the text.
    accepted_from_text: float | None
    # Asked again (--again): the share of accepted drafts that came from the earlier answer.
    accepted_from_memory: float | None
    plain_process_s: float | None  # whole processes, timed from outside (medians)
    spec_process_s: float | None
    lookup_process_s: float | None
    spec_load_s: float | None
    spec_catch_up_s: float | None
    spec_prefill_s: float | None
    spec_decode_s: float | None
    batch_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # verify batch t(n), ms
    # The documents set, of the plain reply: the share copied from the documents, the share that
    # repeats itself (copy_and_loop_shares), its opening words; and drafts taken from the documents.
    copied: float | None = None
    looped: float | None = None
    opening: str = ""
    accepted_from_document: float | None = None
    # llama-server's n-gram kinds (median decode tok/s, and drafted/accepted of the last run).
    server_tokens_per_s: dict[str, float] = dataclasses.field(default_factory=dict)
    server_accepted: dict[str, str] = dataclasses.field(default_factory=dict)
    server_same_text: bool | None = None  # the best kind's text is Tandem's plain text
    # `tandem generate` decode tok/s: a first use (an empty data folder every run), and warmed.
    first_use_tokens_per_s: float | None = None
    warmed_tokens_per_s: float | None = None
    first_use_process_s: float | None = None
    first_use_prefill_s: float | None = None  # with the first reply's timing of a few batch sizes
    plain_process_tokens_per_s: float | None = None  # `tandem generate` without drafts, decode tok/s

    @property
    def best_server(self) -> tuple[str, float] | None:
        if not self.server_tokens_per_s:
            return None
        kind = max(self.server_tokens_per_s, key=lambda k: self.server_tokens_per_s[k])
        return kind, self.server_tokens_per_s[kind]

    @property
    def first_use_vs_server(self) -> float | None:
        best = self.best_server
        return (
            self.first_use_tokens_per_s / best[1]
            if best and best[1] and self.first_use_tokens_per_s
            else None
        )

    @property
    def warmed_vs_server(self) -> float | None:
        best = self.best_server
        return self.warmed_tokens_per_s / best[1] if best and best[1] and self.warmed_tokens_per_s else None

    def of_ceiling_at(self, tokens_per_s: float | None) -> float | None:
        """A process's decode speed as a share of the ceiling (against the plain process's speed)."""
        plain = self.plain_process_tokens_per_s or self.plain_tokens_per_s
        if not tokens_per_s or not plain or not self.ceiling:
            return None
        return tokens_per_s / plain / self.ceiling

    @property
    def speedup(self) -> float:
        return self.spec_tokens_per_s / self.plain_tokens_per_s if self.plain_tokens_per_s else 0.0

    @property
    def of_ceiling(self) -> float | None:
        return self.speedup / self.ceiling if self.ceiling else None

    @property
    def vs_peer(self) -> float | None:
        return self.spec_tokens_per_s / self.peer_tokens_per_s if self.peer_tokens_per_s else None

    @property
    def vs_lookup(self) -> float | None:
        return self.spec_tokens_per_s / self.lookup_tokens_per_s if self.lookup_tokens_per_s else None

    @property
    def process_speedup(self) -> float | None:
        if not self.plain_process_s or not self.spec_process_s:
            return None
        return self.plain_process_s / self.spec_process_s


def load_prompts(path: str | None, sets: str | None) -> list[BenchPrompt]:
    source = Path(path) if path else resources_dir() / "bench_prompts.jsonl"
    if not source.is_file():
        raise TandemError(f"prompt file not found: {source}")
    prompts = []
    for i, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            documents = tuple(str(d) for d in item.get("documents", ()))
            prompts.append(
                BenchPrompt(
                    str(item.get("name", f"prompt-{i}")),
                    str(item.get("set", "custom")),
                    str(item.get("prompt", "") if documents else item["prompt"]),
                    documents,
                    str(item.get("request", "")),
                )
            )
        except (ValueError, KeyError, TypeError) as e:
            raise TandemError(f'{source}, line {i}: not a JSON object with a "prompt" field') from e
    if sets:
        wanted = {s.strip() for s in sets.split(",")}
        prompts = [p for p in prompts if p.set in wanted]
    if not prompts:
        raise TandemError(f"no prompts to run in {source}")
    return prompts


def _run(
    engine: Engine,
    prompt: str,
    max_tokens: int,
    params: SamplingParams,
    speculate: bool,
    again: bool = False,
    document_spans: tuple[tuple[int, int], ...] = (),
) -> Finished:
    """One reply, started as a new process would (the caller resets the cost cache). again: the
    engine keeps the earlier replies it was given (a regenerate); a plain run then neither drafts
    from them nor is kept, so the speculative run has only the first answer to draft from."""
    engine.reset_cache(keep_memory=again)
    finished = None
    use_memory = speculate or not again
    for event in engine.generate(
        prompt,
        params,
        max_tokens=max_tokens,
        speculate=speculate,
        use_memory=use_memory,
        document_spans=document_spans,
    ):
        if isinstance(event, Finished):
            finished = event
    assert finished is not None
    return finished


def measure_ceiling(
    engine: Engine, prompt: str, max_tokens: int, sizes: Sequence[int] = CEILING_SIZES
) -> tuple[float | None, dict[int, float]]:
    """max over k of (k+1)·t(1)/t(k+1): the decode speedup if every drafted token were accepted,
    and the verify batch costs t(n) (seconds) it comes from.

    Timed where the reply's steps run: after the prompt and half the reply. A verify batch's
    attention grows with the text before it (AVX2, Gemma 3 270M: 64 rows cost 283 ms after 64
    tokens, 305 after 256, 332 after 512, while one row stays at 21 ms), so a ceiling timed
    after the prompt alone is one no reply of max_tokens could reach."""
    engine.reset_cache()
    tokens = engine.tokenize(prompt)
    at = min(len(tokens) + max_tokens // 2, engine.n_ctx - max(sizes) - 2)
    context = (tokens * (1 + at // max(len(tokens), 1)))[: max(at, 1)]
    costs = engine.target.time_batches(sizes, context, repeats=3)
    engine.reset_cache()
    t1 = costs.get(1)
    if not t1:
        return None, costs
    return max(n * t1 / t for n, t in costs.items()), costs


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
        self.llm.reset()  # type: ignore[no-untyped-call]  # llama_cpp's reset() is unannotated
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
        sys.executable, "-m", "app.cli.bench", "--peer-child", model, prompt_file,
        str(max_tokens), str(n_ctx), str(n_threads), str(n_gpu_layers),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
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


def run_process(
    model: str,
    draft: DraftChoice,
    prompt_file: str,
    max_tokens: int,
    args: argparse.Namespace,
    env: dict[str, str],
) -> ProcessRun:
    """One whole `tandem generate` process, timed from outside."""
    cmd = [
        sys.executable, "-m", "app.main", "generate", "--model", model, "--draft", draft.text,
        "--prompt-file", prompt_file, "--max-tokens", str(max_tokens), "--ctx", str(args.ctx),
        "--draft-max", str(args.draft_max), "--temperature", str(args.temperature), "--json",
    ]  # fmt: skip
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.temperature > 0:
        cmd += ["--seed", str(args.seed)]
    if getattr(args, "repeat_penalty", 1.0) != 1.0:
        cmd += ["--repeat-penalty", str(args.repeat_penalty)]
    if args.fixed_draft:
        cmd.append("--fixed-draft")
    if args.model_drafts_only:
        cmd.append("--model-drafts-only")
    if getattr(args, "gpu_layers", 0):
        cmd += ["--gpu-layers", str(args.gpu_layers)]
    if getattr(args, "rpc", None):
        cmd += ["--rpc", args.rpc]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise TandemError(f"tandem generate failed (exit {done.returncode}): {tail[0]}")
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return ProcessRun(
        wall_s=wall,
        load_s=r["load_s"],
        prefill_s=r["prefill_s"],
        decode_s=r["decode_s"],
        catch_up_s=r.get("draft_catch_up_s", 0.0),
        n_generated=r["n_generated"],
        token_ids=tuple(r["token_ids"]),
    )


def follow_up_latency(engine: Engine, n_turns: int, max_tokens: int = 32) -> list[float]:
    """Time to first token (s) for each turn of a growing conversation, with the KV cache kept."""
    engine.reset_cache()
    questions = [
        "What is a good name for a cat?", "Why do cats purr?", "How long do cats sleep?",
        "What do cats eat?", "Are cats good pets for children?", "How do I trim a cat's claws?",
        "Why do cats knead?", "How often should a cat see a vet?", "Do cats like water?",
        "What toys do cats like?", "How do cats see in the dark?", "Why do cats chase lasers?",
    ]  # fmt: skip
    messages: list[dict[str, str]] = []
    ttft = []
    for turn in range(n_turns):
        # The window's own base-model transcript (engine.chat), growing turn by turn.
        messages.append({"role": "user", "content": questions[turn % len(questions)]})
        prompt = transcript("", messages)
        t0 = time.perf_counter()
        first = None
        reply = ""
        for event in engine.generate(prompt, SamplingParams(), max_tokens=max_tokens, stop=["\nUser:"]):
            if isinstance(event, TextPiece) and first is None:
                first = time.perf_counter() - t0
            if isinstance(event, Finished):
                reply = event.text
        ttft.append(first if first is not None else time.perf_counter() - t0)
        messages.append({"role": "assistant", "content": reply})
    return ttft


def _decode_rate(run: ProcessRun) -> float:
    return run.n_generated / run.decode_s if run.decode_s > 0 else 0.0


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    from app.cli.options import engine_config

    workdir = Path(tempfile.mkdtemp(prefix="tandem-bench-"))
    # Measured runs never touch the user's cost cache: they share one of their own, reset before
    # every run to what the warm-up left, so each starts as a user's second process would.
    home = workdir / "home"
    costs, snapshot = home / "costs", workdir / "costs-after-warm-up"
    config = dataclasses.replace(engine_config(args), cost_cache_dir=str(costs))
    env = {**os.environ, "TANDEM_HOME": str(home)}

    def restore_costs() -> None:
        shutil.rmtree(costs, ignore_errors=True)
        if snapshot.is_dir():
            shutil.copytree(snapshot, costs)

    def snapshot_costs() -> None:
        shutil.rmtree(snapshot, ignore_errors=True)
        if costs.is_dir():
            shutil.copytree(costs, snapshot)

    prompts = load_prompts(args.prompts, args.sets)
    params = SamplingParams(
        temperature=args.temperature,
        seed=args.seed if args.temperature > 0 else None,
        repeat_penalty=getattr(args, "repeat_penalty", 1.0),
    )
    first_params = dataclasses.replace(params, seed=params.seed + 1 if params.seed is not None else None)
    is_ngram = config.speculation is Speculation.NGRAM
    log = sys.stderr
    lookup_bin = find_tool("llama-lookup") if is_ngram and not args.no_lookup else None
    placement: tuple[str, ...] = ()
    if getattr(args, "gpu_layers", 0):
        placement += ("-ngl", str(args.gpu_layers))
    if getattr(args, "rpc", None):
        placement += ("--rpc", args.rpc)
    if is_ngram and not args.no_lookup and lookup_bin is None:
        print("llama-lookup not found (make setup builds it): skipping that peer", file=log)
    server_bin = find_tool("llama-server") if is_ngram and not getattr(args, "no_server", False) else None
    if is_ngram and not getattr(args, "no_server", False) and server_bin is None:
        print("llama-server not found (make setup builds it): skipping its n-gram kinds", file=log)
    # A user's second run: the cost cache and the OS file cache already hold what a first run
    # leaves there. Warm both on a prompt that is not measured.
    warm, warm_fresh = workdir / "warm-up.txt", workdir / "warm-up-fresh.txt"
    warm.write_text(WARM_UP_PROMPT, encoding="utf-8")
    warm_fresh.write_text(WARM_UP_FRESH_PROMPT, encoding="utf-8")
    run_process(config.target_path, PLAIN_DECODING, str(warm), 64, args, env)
    if not is_ngram:
        run_process(config.target_path, config.draft, str(warm_fresh), 64, args, env)
    run_process(config.target_path, config.draft, str(warm), 64, args, env)
    engine = Engine(config)
    # The window times this machine's verify batches the first time it is idle with a model
    # (Engine.calibrate, once per machine and model): a user's second run starts from them too.
    calibrate_s = time.perf_counter()
    engine.calibrate()
    print(f"verify batches timed in {time.perf_counter() - calibrate_s:.1f} s", file=sys.stderr)
    snapshot_costs()
    prompts = [render_prompt(engine, p) for p in prompts]
    if args.again:
        # A user who has had an answer given again before: the cost cache knows how earlier
        # answers' drafts fare (their acceptance), as it knows the rest from the runs above.
        restore_costs()
        _run(engine, WARM_UP_FRESH_PROMPT, 64, first_params, speculate=True)
        _run(engine, WARM_UP_FRESH_PROMPT, 64, params, speculate=True, again=True)
        snapshot_costs()
    use_peer = is_ngram and not args.no_peer
    results: list[PromptResult] = []
    try:
        for p in prompts:
            prompt_file = workdir / f"{p.name}.txt"
            prompt_file.write_text(p.prompt, encoding="utf-8")
            ceiling, batch_s = measure_ceiling(engine, p.prompt, args.max_tokens) if is_ngram else (None, {})
            spans = document_spans_of(engine, p)
            plain, spec, peer_rates, lookup_rates, lookup_acc = [], [], [], [], []
            proc_plain: list[ProcessRun] = []
            proc_spec: list[ProcessRun] = []
            proc_lookup: list[ProcessRun] = []
            proc_first: list[ProcessRun] = []
            server_rates: dict[str, list[float]] = {kind: [] for kind in SERVER_KINDS} if server_bin else {}
            server_runs: dict[str, ServerRun] = {}
            finals = []
            for _ in range(args.repeat):
                if args.again:
                    # The first answer (another seed when sampling: a Regenerate), not timed.
                    restore_costs()
                    _run(engine, p.prompt, args.max_tokens, first_params, speculate=True)
                restore_costs()
                a = _run(engine, p.prompt, args.max_tokens, params, False, args.again, spans)
                restore_costs()
                b = _run(engine, p.prompt, args.max_tokens, params, True, args.again, spans)
                plain.append(a.stats.decode_tokens_per_s)
                spec.append(b.stats.decode_tokens_per_s)
                finals.append((a, b))
                if use_peer:
                    peer_rates.append(
                        run_peer(
                            config.target_path,
                            str(prompt_file),
                            args.max_tokens,
                            min(engine.n_ctx, 2048),
                            engine.n_threads,
                            config.n_gpu_layers,
                        )
                    )
                if lookup_bin is not None:
                    lookup_extra = placement
                    if args.again:
                        # llama-lookup's own memory of earlier text: its dynamic n-gram cache,
                        # written by the first run and read by the timed one.
                        cache = workdir / f"{p.name}.lcd"
                        cache.unlink(missing_ok=True)
                        lookup_extra = (*placement, "-lcd", str(cache))
                        run_llama_lookup(
                            lookup_bin, config.target_path, str(prompt_file), args.max_tokens,
                            engine.n_threads, min(engine.n_ctx, 4096), lookup_extra,
                        )  # fmt: skip
                    rate, acc, run = run_llama_lookup(
                        lookup_bin, config.target_path, str(prompt_file), args.max_tokens,
                        engine.n_threads, min(engine.n_ctx, 4096), lookup_extra,
                    )  # fmt: skip
                    if rate is not None:
                        lookup_rates.append(rate)
                        proc_lookup.append(run)
                    if acc is not None:
                        lookup_acc.append(acc)
                if server_bin is not None:
                    for kind in SERVER_KINDS:
                        served = run_llama_server(
                            server_bin, config.target_path, p.prompt, args.max_tokens,
                            engine.n_threads, min(engine.n_ctx, 4096), kind, placement,
                        )  # fmt: skip
                        server_rates[kind].append(served.tokens_per_s)
                        server_runs[kind] = served
                if not args.no_process and not args.again:  # earlier replies live in a process
                    for draft, runs in ((PLAIN_DECODING, proc_plain), (config.draft, proc_spec)):
                        restore_costs()
                        runs.append(
                            run_process(
                                config.target_path, draft, str(prompt_file), args.max_tokens, args, env
                            )
                        )
                    # A first use on a new machine: a data folder of its own, nothing timed or learned.
                    first_home = Path(tempfile.mkdtemp(prefix="tandem-first-use-"))
                    try:
                        proc_first.append(
                            run_process(
                                config.target_path, config.draft, str(prompt_file), args.max_tokens, args,
                                {**env, "TANDEM_HOME": str(first_home)},
                            )
                        )  # fmt: skip
                    finally:
                        shutil.rmtree(first_home, ignore_errors=True)
            a, b = finals[-1]
            s = b.stats
            copied = looped = None
            opening = ""
            if not p.documents and p.set in CHECKED_SETS:
                # Copy and edit prompts: the work is the prompt's own text, copied or edited.
                copied, looped = copy_and_loop_shares(a.token_ids, engine.tokenize(p.prompt, False))
                opening = " ".join(a.text.split()[:8])
            if p.documents:
                from app.library.documents import read_document

                source = [
                    t
                    for d in p.documents
                    for t in engine.tokenize(read_document(resources_dir() / d).text, False)
                ]
                copied, looped = copy_and_loop_shares(a.token_ids, source)
                opening = " ".join(a.text.split()[:8])
            same_processes = None
            if proc_plain and proc_spec:
                same_processes = proc_plain[-1].token_ids == proc_spec[-1].token_ids
            r = PromptResult(
                name=p.name,
                set=p.set,
                plain_tokens_per_s=statistics.median(plain),
                spec_tokens_per_s=statistics.median(spec),
                ceiling=ceiling,
                peer_tokens_per_s=_median(peer_rates),
                lookup_tokens_per_s=_median(lookup_rates),
                lookup_acceptance=_median(lookup_acc),
                acceptance_rate=s.acceptance_rate,
                mean_accepted_length=s.mean_accepted_length,
                n_generated=s.n_generated,
                same_text=a.token_ids == b.token_ids,
                same_text_processes=same_processes,
                step_overhead_ms_median=s.step_overhead_ms_median,
                accepted_from_text=(
                    s.n_accepted_text / s.n_accepted
                    if s.n_accepted and s.speculation is Speculation.DRAFT
                    else None
                ),
                accepted_from_memory=(
                    (s.n_accepted_memory / s.n_accepted if s.n_accepted else 0.0) if args.again else None
                ),
                plain_process_s=_median([x.wall_s for x in proc_plain]),
                spec_process_s=_median([x.wall_s for x in proc_spec]),
                lookup_process_s=_median([x.wall_s for x in proc_lookup]),
                spec_load_s=_median([x.load_s for x in proc_spec]),
                spec_catch_up_s=_median([x.catch_up_s for x in proc_spec]),
                spec_prefill_s=_median([x.prefill_s for x in proc_spec]),
                spec_decode_s=_median([x.decode_s for x in proc_spec]),
                batch_ms={str(n): round(t * 1000, 2) for n, t in batch_s.items()},
                copied=copied,
                looped=looped,
                opening=opening,
                accepted_from_document=(s.n_accepted_document / s.n_accepted if s.n_accepted else 0.0)
                if p.documents
                else None,
                server_tokens_per_s={k: statistics.median(v) for k, v in server_rates.items() if v},
                server_accepted={k: f"{r.n_accepted}/{r.n_drafted}" for k, r in server_runs.items()},
                first_use_tokens_per_s=_median([_decode_rate(x) for x in proc_first]),
                warmed_tokens_per_s=_median([_decode_rate(x) for x in proc_spec]),
                first_use_process_s=_median([x.wall_s for x in proc_first]),
                first_use_prefill_s=_median([x.prefill_s for x in proc_first]),
                plain_process_tokens_per_s=_median([_decode_rate(x) for x in proc_plain]),
            )
            if r.best_server is not None:
                r = dataclasses.replace(r, server_same_text=server_runs[r.best_server[0]].text == a.text)
            results.append(r)
            extra = ""
            if r.ceiling:
                extra += f" (ceiling x{r.ceiling:.2f})"
            if r.peer_tokens_per_s:
                extra += f", llama-cpp-python lookup {r.peer_tokens_per_s:.1f}"
            if r.lookup_tokens_per_s:
                extra += f", llama-lookup {r.lookup_tokens_per_s:.1f}"
            if r.process_speedup:
                extra += f"; whole process x{r.process_speedup:.2f}"
            if r.best_server is not None:
                extra += (
                    f"; llama-server best {r.best_server[0]} {r.best_server[1]:.1f}, Tandem first use "
                    f"{_fmt(r.first_use_vs_server, '.2f', 'x')}, warmed {_fmt(r.warmed_vs_server, '.2f', 'x')}"
                )
            print(
                f"{p.name:16s} plain {r.plain_tokens_per_s:6.1f}  spec {r.spec_tokens_per_s:6.1f} tok/s"
                f"  x{r.speedup:.2f}{extra}  accepted {r.acceptance_rate:.0%}"
                + (f" ({r.accepted_from_text:.0%} from the text)" if r.accepted_from_text is not None else "")
                + (
                    f" ({r.accepted_from_memory:.0%} from the earlier answer)"
                    if r.accepted_from_memory is not None
                    else ""
                ),
                file=log,
            )
        restore_costs()
        ttft = follow_up_latency(engine, args.turns) if args.turns > 0 else []
    finally:
        engine.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return summarize(results, ttft, config.target_path, config.draft, args)


def summarize(
    results: list[PromptResult],
    ttft: list[float],
    model: str,
    draft: DraftChoice,
    args: argparse.Namespace | None = None,
) -> dict[str, object]:
    def med(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    sets: dict[str, dict[str, float | None]] = {}
    for name in dict.fromkeys(r.set for r in results):
        rs = [r for r in results if r.set == name]
        sets[name] = {
            "plain_tokens_per_s": statistics.median(r.plain_tokens_per_s for r in rs),
            "spec_tokens_per_s": statistics.median(r.spec_tokens_per_s for r in rs),
            "speedup": statistics.median(r.speedup for r in rs),
            "ceiling": med([r.ceiling for r in rs]),
            "of_ceiling": med([r.of_ceiling for r in rs]),
            "vs_peer": med([r.vs_peer for r in rs]),
            "vs_lookup": med([r.vs_lookup for r in rs]),
            "process_speedup": med([r.process_speedup for r in rs]),
            "acceptance_rate": statistics.median(r.acceptance_rate for r in rs),
            "first_use_vs_server": med([r.first_use_vs_server for r in rs]),
            "warmed_vs_server": med([r.warmed_vs_server for r in rs]),
        }
    import llama_cpp

    from engine.costcache import build_identity, cpu_identity

    return {
        "model": model,
        "draft": draft.text,
        "max_tokens": getattr(args, "max_tokens", None),
        "again": bool(getattr(args, "again", False)),
        "temperature": getattr(args, "temperature", 0.0),
        "repeat_penalty": getattr(args, "repeat_penalty", 1.0),
        "threads": getattr(args, "threads", None),
        "machine": cpu_identity(),
        "build": build_identity().split("|", 1)[-1].strip(),
        "llama_cpp_python": llama_cpp.__version__,
        "prompts": [
            {
                **asdict(r),
                "speedup": r.speedup,
                "of_ceiling": r.of_ceiling,
                "vs_peer": r.vs_peer,
                "vs_lookup": r.vs_lookup,
                "best_server": r.best_server,
                "first_use_vs_server": r.first_use_vs_server,
                "warmed_vs_server": r.warmed_vs_server,
                "first_use_of_ceiling": r.of_ceiling_at(r.first_use_tokens_per_s),
                "warmed_of_ceiling": r.of_ceiling_at(r.warmed_tokens_per_s),
                "server_of_ceiling": r.of_ceiling_at(r.best_server[1] if r.best_server else None),
                "process_speedup": r.process_speedup,
            }
            for r in results
        ],
        "sets": sets,
        "median_first_use_vs_server": med([r.first_use_vs_server for r in results]),
        "min_first_use_vs_server": min(
            (v for v in (r.first_use_vs_server for r in results) if v), default=None
        ),
        "median_warmed_vs_server": med([r.warmed_vs_server for r in results]),
        "min_warmed_vs_server": min((v for v in (r.warmed_vs_server for r in results) if v), default=None),
        "median_speedup": statistics.median(r.speedup for r in results),
        "min_speedup": min(r.speedup for r in results),
        "median_process_speedup": med([r.process_speedup for r in results]),
        "min_process_speedup": min((v for v in (r.process_speedup for r in results) if v), default=None),
        "step_overhead_ms_median": statistics.median(r.step_overhead_ms_median for r in results),
        "ttft_s": ttft,
        "ttft_turn10_over_turn1": (ttft[-1] / ttft[0]) if len(ttft) > 1 and ttft[0] > 0 else None,
    }


def _fmt(v: float | None, spec: str = ".2f", prefix: str = "") -> str:
    return "—" if v is None else prefix + format(v, spec)


def same_text_note(report: dict[str, object]) -> str:
    """What the "same text" columns compare, and when a NO is expected."""
    flips = (
        "An F16 target gives the same tokens; a quantized one may flip where its two best logits "
        "nearly tie, because llama.cpp's batched and one-row kernels round differently (docs/findings.md)."
    )
    if not report["temperature"]:
        return f"Same text: greedy output with and without speculation. {flips}"
    note = (
        "Same text: sampled output with and without speculation, same seed. Each position's sample "
        "is keyed by (seed, position, token), so drafts from the text keep the text identical."
    )
    if DraftChoice.parse(str(report["draft"])).kind is not Speculation.NGRAM:
        note += (
            " The draft model's drafts are sampled and accepted by the speculative sampling rule, "
            "which keeps the target's distribution, not its tokens: NO is expected wherever the "
            "model drafted."
        )
    return f"{note} {flips}"


def to_markdown(report: dict[str, object]) -> str:
    prompts: list[dict[str, Any]] = report["prompts"]  # type: ignore[assignment]
    lines = [
        f"# Tandem bench: {Path(str(report['model'])).name}, draft {report['draft'] or 'none'}",
        "",
        f"{report['max_tokens']} tokens, temperature {report['temperature']}, repeat penalty "
        f"{report.get('repeat_penalty', 1.0)}, threads "
        f"{report['threads'] or 'all cores'}; CPU: {report['machine']}; llama-cpp-python "
        f"{report['llama_cpp_python']}, llama.cpp built with: {report['build']}",
        *(
            [
                "",
                "Each request asked again: the measured runs follow a first answer (not timed, "
                "another seed when sampling) that Tandem drafts from, and llama-lookup from its "
                "dynamic n-gram cache (-lcd). No whole-process runs: earlier answers live in a process.",
            ]
            if report.get("again")
            else []
        ),
        "",
        "## Decode (tokens/s once the prompt is in)",
        "",
        "| prompt | set | plain | spec | speedup | ceiling | of ceiling | llama-cpp-python lookup "
        "| spec/it | llama-lookup | spec/it | accepted | llama-lookup accepted | mean accepted "
        "| accepted from the text | from the earlier answer | same text |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    same = {True: "yes", False: "NO", None: "—"}
    for r in prompts:
        lines.append(
            f"| {r['name']} | {r['set']} | {r['plain_tokens_per_s']:.1f} | {r['spec_tokens_per_s']:.1f} | "
            f"x{r['speedup']:.2f} | {_fmt(r['ceiling'], '.2f', 'x')} | {_fmt(r['of_ceiling'], '.0%')} | "
            f"{_fmt(r['peer_tokens_per_s'], '.1f')} | {_fmt(r['vs_peer'], '.2f', 'x')} | "
            f"{_fmt(r['lookup_tokens_per_s'], '.1f')} | {_fmt(r['vs_lookup'], '.2f', 'x')} | "
            f"{r['acceptance_rate']:.0%} | {_fmt(r['lookup_acceptance'], '.0%')} | "
            f"{r['mean_accepted_length']:.1f} | {_fmt(r.get('accepted_from_text'), '.0%')} | "
            f"{_fmt(r.get('accepted_from_memory'), '.0%')} | {same[r['same_text']]} |"
        )
    if any(r.get("best_server") for r in prompts):
        lines += [
            "",
            "## Against llama-server's n-gram kinds (decode tok/s as each reports it)",
            "",
            "Tandem by `tandem generate`, two states: a first use on a new machine (an empty data "
            "folder every run: nothing timed or learned) and warmed (the bench's cost cache: one "
            "earlier reply and the machine's batches timed, as the window leaves it). llama-server "
            "(same build) at each `--spec-type` default, a fresh server a reply.",
            "",
            "| prompt | " + " | ".join(SERVER_KINDS) + " | best kind | of ceiling | Tandem first use "
            "| first / best | of ceiling | Tandem warmed | warmed / best | of ceiling "
            "| best kind's text = plain | first use: prefill s / whole s | warmed: prefill s / whole s |",
            "|---|" + "---|" * len(SERVER_KINDS) + "---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prompts:
            if not r.get("best_server"):
                continue
            rates = r["server_tokens_per_s"]
            accepted = r.get("server_accepted") or {}
            cells = [f"{rates[k]:.1f} ({accepted.get(k, '?')})" if k in rates else "—" for k in SERVER_KINDS]
            kind, best = r["best_server"]
            lines.append(
                f"| {r['name']} | " + " | ".join(cells) + f" | {kind} {best:.1f} | "
                f"{_fmt(r.get('server_of_ceiling'), '.0%')} | {_fmt(r['first_use_tokens_per_s'], '.1f')} | {_fmt(r['first_use_vs_server'], '.2f', 'x')} | "
                f"{_fmt(r['first_use_of_ceiling'], '.0%')} | {_fmt(r['warmed_tokens_per_s'], '.1f')} | "
                f"{_fmt(r['warmed_vs_server'], '.2f', 'x')} | {_fmt(r['warmed_of_ceiling'], '.0%')} | "
                f"{same[r.get('server_same_text')]} | {_fmt(r.get('first_use_prefill_s'))} / "
                f"{_fmt(r.get('first_use_process_s'))} | {_fmt(r.get('spec_prefill_s'))} / "
                f"{_fmt(r.get('spec_process_s'))} |"
            )
        lines += [
            "",
            f"Tandem against the best kind per prompt: first use median "
            f"{_fmt(report.get('median_first_use_vs_server'), '.2f', 'x')} "  # type: ignore[arg-type]
            f"(lowest {_fmt(report.get('min_first_use_vs_server'), '.2f', 'x')}), warmed median "  # type: ignore[arg-type]
            f"{_fmt(report.get('median_warmed_vs_server'), '.2f', 'x')} "  # type: ignore[arg-type]
            f"(lowest {_fmt(report.get('min_warmed_vs_server'), '.2f', 'x')}). (n/m): drafted tokens "  # type: ignore[arg-type]
            "accepted of drafted. Of ceiling: the process's decode speed over the plain process's, "
            "as a share of the ceiling measured in the same run (for the best kind: its speed over "
            "the plain process's; k times the best kind needs k times its share). A first use's "
            "prefill includes timing "
            "a few verify batch sizes once (engine.adaptive.FIRST_REPLY_SIZES).",
        ]
    batch_ms = [r.get("batch_ms") or {} for r in prompts]
    sizes = sorted({int(n) for b in batch_ms for n in b})
    if sizes:
        medians = {n: statistics.median(b[str(n)] for b in batch_ms if str(n) in b) for n in sizes}
        lines += [
            "",
            "Verify batch cost t(n) on this machine during the run, after the prompt and half the "
            "reply (ms, median over prompts): "
            + ", ".join(f"{n}: {medians[n]:.1f}" for n in sizes)
            + ". Ceiling = max over n of n·t(1)/t(n).",
        ]
    if any(r["plain_process_s"] for r in prompts):
        lines += [
            "",
            "## Whole process (`tandem generate`, timed from outside, cost cache warm)",
            "",
            "| prompt | plain s | spec s | speedup | spec: load | draft catch-up | prefill | decode "
            "| llama-lookup s | same text |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in prompts:
            lines.append(
                f"| {r['name']} | {_fmt(r['plain_process_s'])} | {_fmt(r['spec_process_s'])} | "
                f"{_fmt(r['process_speedup'], '.2f', 'x')} | {_fmt(r['spec_load_s'])} | "
                f"{_fmt(r['spec_catch_up_s'])} | {_fmt(r['spec_prefill_s'])} | {_fmt(r['spec_decode_s'])} | "
                f"{_fmt(r['lookup_process_s'])} | {same[r['same_text_processes']]} |"
            )
    if any(r.get("copied") is not None for r in prompts):
        # The documents set's reports (and their readers) know this section by its old heading.
        documents = "Documents: does" if any(r.get("set") == "documents" for r in prompts) else "Does"
        lines += [
            "",
            f"## {documents} the model do the work the request names? (the plain reply)",
            "",
            "| prompt | reply tokens | copied from the documents (or prompt) | repeats itself | drafts from the documents "
            "| opens with |",
            "|---|---|---|---|---|---|",
        ]
        for r in prompts:
            if r.get("copied") is not None:
                lines.append(
                    f"| {r['name']} | {r['n_generated']} | {r['copied']:.0%} | {r['looped']:.0%} | "
                    f"{_fmt(r.get('accepted_from_document'), '.0%')} | {r['opening']} |"
                )
        lines.append(
            "Copied: the share of the reply's tokens inside 6-grams found in the documents; repeats "
            "itself: the share of its 6-grams it had said before (a loop drafts fast and is no copy)."
        )
    lines += [
        "",
        "## Sets (medians)",
        "",
        "| set | plain tok/s | spec tok/s | decode speedup | of ceiling | vs llama-cpp-python | "
        "vs llama-lookup | whole process | accepted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["sets"].items():  # type: ignore[attr-defined]
        lines.append(
            f"| {name} | {s['plain_tokens_per_s']:.1f} | {s['spec_tokens_per_s']:.1f} | x{s['speedup']:.2f} | "
            f"{_fmt(s['of_ceiling'], '.0%')} | {_fmt(s['vs_peer'], '.2f', 'x')} | "
            f"{_fmt(s['vs_lookup'], '.2f', 'x')} | {_fmt(s['process_speedup'], '.2f', 'x')} | "
            f"{s['acceptance_rate']:.0%} |"
        )
    lines += [
        "",
        f"Decode: median speedup x{report['median_speedup']:.2f}, lowest x{report['min_speedup']:.2f}. "
        f"Whole process: median {_fmt(report['median_process_speedup'], '.2f', 'x')}, "  # type: ignore[arg-type]
        f"lowest {_fmt(report['min_process_speedup'], '.2f', 'x')}. "  # type: ignore[arg-type]
        f"Time outside llama.cpp per step (median of prompt medians): {report['step_overhead_ms_median']:.2f} ms.",
        same_text_note(report),
    ]
    ttft = report["ttft_s"]
    if ttft:
        lines.append(
            "Time to first token by conversation turn (KV cache kept between turns): "
            + ", ".join(f"{t * 1000:.0f} ms" for t in ttft)  # type: ignore[attr-defined]
            + f"; turn {len(ttft)} / turn 1 = {report['ttft_turn10_over_turn1']:.2f}."  # type: ignore[arg-type]
        )
    return "\n".join(lines) + "\n"


def cmd_bench(args: argparse.Namespace) -> int:
    from app.cli.options import UserError, validate_engine_args

    validate_engine_args(args)
    if args.draft.kind is Speculation.NONE:
        raise UserError("bench needs --draft PATH or --draft ngram (it compares against plain decoding)")
    if args.repeat < 1:
        raise UserError(f"--repeat must be at least 1 (got {args.repeat})")
    if args.temperature < 0:
        raise UserError(f"--temperature must be 0 or more (got {args.temperature})")
    report = run_bench(args)
    markdown = to_markdown(report)
    if args.out:
        Path(args.out).write_text(markdown, encoding="utf-8")
    if args.json:
        print(json.dumps(report))
    else:
        print(markdown)
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--peer-child"]:
    _peer_child(sys.argv[2:])
