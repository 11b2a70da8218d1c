"""Speculation numbers as the window shows them: one short line, and a longer tooltip."""

from __future__ import annotations

from typing import Any

DASH = "—"

SPECULATION_NAMES = {"none": "plain decoding", "ngram": "n-gram lookup", "draft": "draft model"}


def speedup_text(
    tokens_per_s: float,
    plain_tokens_per_s: float | None,
    speculation: str,
    plain_tokens_per_s_est: float | None = None,
) -> str:
    """Speed against plain decoding of this model: measured once a plain run exists; until then
    estimated from the plain speed the engine times itself (its 1-row steps), marked "est."."""
    if speculation == "none":
        return "1.00× (plain)"
    if tokens_per_s <= 0:
        return DASH
    if plain_tokens_per_s:
        return f"{tokens_per_s / plain_tokens_per_s:.2f}×"
    if plain_tokens_per_s_est:
        return f"≈{tokens_per_s / plain_tokens_per_s_est:.1f}× est."
    return DASH


# The estimate compares a reply's speed with steady plain steps; a reply's first step (the end of
# the prompt goes in with it) weighs too much in a short reply for that to be fair.
MIN_TOKENS_FOR_ESTIMATE = 16


def plain_estimate(stats: dict[str, Any]) -> float | None:
    """The engine's own estimate of plain tokens/s, where a reply is long enough to compare."""
    return _estimate(stats)


def _estimate(stats: dict[str, Any]) -> float | None:
    value = stats.get("plain_tokens_per_s_est")
    if int(stats.get("n_generated", MIN_TOKENS_FOR_ESTIMATE)) < MIN_TOKENS_FOR_ESTIMATE:
        return None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def live_line(stats: dict[str, Any], plain_tokens_per_s: float | None) -> str:
    """The live indicator: tokens/s, acceptance, mean accepted length, speedup vs plain."""
    speculation = str(stats.get("speculation", "none"))
    tps = float(stats.get("decode_tokens_per_s", 0.0))
    parts = [f"{tps:.1f} tok/s" if tps > 0 else f"{DASH} tok/s"]
    if speculation == "none":
        parts += [f"acceptance {DASH}", f"mean accepted {DASH}"]
    else:
        drafted = int(stats.get("n_drafted", 0))
        parts.append(
            f"acceptance {stats.get('acceptance_rate', 0.0):.0%}" if drafted else f"acceptance {DASH}"
        )
        # A server reports what it accepted but not in how many steps: unknown, not 0.
        known = stats.get("mean_accepted_length") or not stats.get("n_accepted")
        parts.append(
            f"mean accepted {stats.get('mean_accepted_length', 0.0):.2f}"
            if drafted and known
            else f"mean accepted {DASH}"
        )
    parts.append(f"speedup {speedup_text(tps, plain_tokens_per_s, speculation, _estimate(stats))}")
    if stats.get("note"):
        parts.append(str(stats["note"]))
    return " · ".join(parts)


def draft_sources(stats: dict[str, Any]) -> str:
    """Where the accepted drafts came from: the draft model, the text so far (n-gram matches),
    earlier replies (the engine's reply memory). "" where n-gram drafts all came from the text
    (what n-gram means) or there is nothing to tell (nothing accepted; a server, which does not
    say)."""
    speculation = str(stats.get("speculation", "none"))
    accepted = int(stats.get("n_accepted", 0) or 0)
    if speculation == "none" or not accepted or not stats.get("n_steps_with_draft"):
        return ""
    memory = int(stats.get("n_accepted_memory", 0) or 0)
    if speculation != "draft" and not memory:
        return ""
    text = int(stats.get("n_accepted_text", 0) or 0) if speculation == "draft" else accepted
    sources = [
        (accepted - text, "the draft model"),
        (text - memory, "the text"),
        (memory, "earlier replies"),
    ]
    return "accepted from " + ", ".join(f"{name} {n / accepted:.0%}" for n, name in sources if n > 0)


def details_line(stats: dict[str, Any]) -> str:
    """The line kept under a finished reply."""
    speculation = str(stats.get("speculation", "none"))
    tps = float(stats.get("decode_tokens_per_s", 0.0))
    parts = [
        f"{stats.get('n_generated', 0)} tokens",
        f"{tps:.1f} tok/s",
        SPECULATION_NAMES.get(speculation, speculation),
    ]
    if speculation != "none" and stats.get("n_drafted"):
        parts.append(f"{stats.get('acceptance_rate', 0.0):.0%} of drafted tokens accepted")
        if stats.get("mean_accepted_length") or not stats.get("n_accepted"):  # a server does not say
            parts.append(f"{stats.get('mean_accepted_length', 0.0):.2f} accepted per draft")
        if sources := draft_sources(stats):
            parts.append(sources)
    plain = stats.get("plain_tokens_per_s")
    if speculation != "none":
        parts.append(f"speedup {speedup_text(tps, plain, speculation, _estimate(stats))}")
    return " · ".join(parts)


def details_tooltip(stats: dict[str, Any]) -> str:
    speculation = str(stats.get("speculation", "none"))
    plain = stats.get("plain_tokens_per_s")
    rows = [
        ("Speculation", SPECULATION_NAMES.get(speculation, speculation)),
        ("Tokens generated", stats.get("n_generated", 0)),
        ("Decode speed", f"{float(stats.get('decode_tokens_per_s', 0.0)):.1f} tok/s"),
        ("Plain speed (baseline)", _baseline_text(plain, _estimate(stats))),
        (
            "Speedup vs plain",
            speedup_text(float(stats.get("decode_tokens_per_s", 0.0)), plain, speculation, _estimate(stats)),
        ),
        ("Drafted / accepted", f"{stats.get('n_drafted', 0)} / {stats.get('n_accepted', 0)}"),
        ("Acceptance rate", f"{float(stats.get('acceptance_rate', 0.0)):.1%}"),
        ("Mean accepted length", f"{float(stats.get('mean_accepted_length', 0.0)):.2f}"),
        ("Accepted drafts", draft_sources(stats).removeprefix("accepted ") or DASH),
        ("Verify steps", stats.get("n_steps", 0)),
        ("Prompt tokens (new / total)", f"{stats.get('n_prefilled', 0)} / {stats.get('n_prompt_tokens', 0)}"),
        ("Prefill", f"{float(stats.get('prefill_s', 0.0)) * 1000:.0f} ms"),
        ("Decode", f"{float(stats.get('decode_s', 0.0)):.2f} s"),
        ("Time in llama.cpp", f"{float(stats.get('llama_fraction', 0.0)):.0%}"),
        ("Stop reason", stats.get("stop_reason", DASH)),
    ]
    body = "".join(f"<tr><td>{k}</td><td>&nbsp;&nbsp;{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _baseline_text(plain: float | None, estimate: float | None) -> str:
    if plain:
        return f"{plain:.1f} tok/s (measured)"
    if estimate:
        return f"≈{estimate:.1f} tok/s (estimated from the engine's own plain steps)"
    return DASH
