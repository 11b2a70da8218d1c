"""`tandem generate --remote URL`: stream a reply from any OpenAI-compatible server (the client
itself: app/host/remote_client.py) and report it with the keys of a local `generate --json`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from app.host.remote_client import RemoteClient, RemoteResult, api_base
from engine.events import Speculation


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
        speculation = Speculation.DRAFT if drafted > 0 else Speculation.NONE
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
    from app.cli.options import UserError, read_prompt

    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1 (got {args.max_tokens})")
    if args.draft.kind is not Speculation.NONE:
        raise UserError("--draft is for a local model: with --remote the server decides its own speculation")
    from app.host.remote_client import cleartext_warning
    from app.settings import REMOTE_KEY_ENV, api_key_from, api_key_warnings

    key_file = getattr(args, "api_key_file", None)
    api_key = api_key_from(args.api_key, key_file, REMOTE_KEY_ENV)
    base = api_base(args.remote)
    for warning in [*api_key_warnings(args.api_key, key_file), cleartext_warning(base, api_key)]:
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    prompt = read_prompt(args)
    client = RemoteClient(base, api_key)
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

        def on_chunk(_chunk: dict[str, Any], text: str) -> None:
            if text and not args.json:
                sys.stdout.write(text)
                sys.stdout.flush()

        result = client.stream(path, body, on_chunk)
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
