"""Speculation numbers as the window shows them: one short line, and a longer tooltip."""

from __future__ import annotations

from engine.events import Speculation, StatsRecord

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


def plain_estimate(stats: StatsRecord) -> float | None:
    """The engine's own estimate of plain tokens/s, where a reply is long enough to compare."""
    if stats.n_generated < MIN_TOKENS_FOR_ESTIMATE:
        return None
    estimate = stats.plain_tokens_per_s_est
    return estimate if estimate is not None and estimate > 0 else None


def live_line(stats: StatsRecord, plain_tokens_per_s: float | None) -> str:
    """The live indicator: tokens/s, acceptance, mean accepted length, speedup vs plain."""
    tps = stats.decode_tokens_per_s
    parts = [f"{tps:.1f} tok/s" if tps > 0 else f"{DASH} tok/s"]
    if not stats.is_speculative:
        parts += [f"acceptance {DASH}", f"mean accepted {DASH}"]
    else:
        drafted = stats.n_drafted
        parts.append(f"acceptance {stats.acceptance_rate:.0%}" if drafted else f"acceptance {DASH}")
        # A server reports what it accepted but not in how many steps: unknown, not 0.
        known = stats.mean_accepted_length or not stats.n_accepted
        parts.append(
            f"mean accepted {stats.mean_accepted_length:.2f}"
            if drafted and known
            else f"mean accepted {DASH}"
        )
    parts.append(f"speedup {speedup_text(tps, plain_tokens_per_s, stats.speculation, plain_estimate(stats))}")
    if stats.note:
        parts.append(stats.note)
    return " · ".join(parts)


def draft_sources(stats: StatsRecord) -> str:
    """Where the accepted drafts came from: the draft model, attached documents, the text so far
    (n-gram matches), earlier replies (the engine's reply memory). "" where n-gram drafts all came from the text
    (what n-gram means) or there is nothing to tell (nothing accepted; a server, which does not
    say)."""
    accepted = stats.n_accepted
    if not stats.is_speculative or not accepted or not stats.n_steps_with_draft:
        return ""
    memory = stats.n_accepted_memory
    document = stats.n_accepted_document
    is_model = stats.speculation is Speculation.DRAFT
    if not is_model and not memory and not document:
        return ""
    text = stats.n_accepted_text if is_model else accepted
    sources = [
        (accepted - text, "the draft model"),
        (document, "the attached documents"),
        (text - memory - document, "the conversation" if document else "the text"),
        (memory, "earlier replies"),
    ]
    return "accepted from " + ", ".join(f"{name} {n / accepted:.0%}" for n, name in sources if n > 0)


def details_line(stats: StatsRecord) -> str:
    """The line kept under a finished reply."""
    speculation = stats.speculation
    tps = stats.decode_tokens_per_s
    parts = [
        f"{stats.n_generated} tokens",
        f"{tps:.1f} tok/s",
        SPECULATION_NAMES.get(speculation, speculation),
    ]
    if stats.is_speculative and stats.n_drafted:
        parts.append(f"{stats.acceptance_rate:.0%} of drafted tokens accepted")
        if stats.mean_accepted_length or not stats.n_accepted:  # a server does not say
            parts.append(f"{stats.mean_accepted_length:.2f} accepted per draft")
        if sources := draft_sources(stats):
            parts.append(sources)
    if stats.is_speculative:
        parts.append(
            f"speedup {speedup_text(tps, stats.plain_tokens_per_s, speculation, plain_estimate(stats))}"
        )
    return " · ".join(parts)


def details_tooltip(stats: StatsRecord) -> str:
    speculation = stats.speculation
    plain = stats.plain_tokens_per_s
    estimate = plain_estimate(stats)
    rows = [
        ("Speculation", SPECULATION_NAMES.get(speculation, speculation)),
        ("Tokens generated", stats.n_generated),
        ("Decode speed", f"{stats.decode_tokens_per_s:.1f} tok/s"),
        ("Plain speed (baseline)", _baseline_text(plain, estimate)),
        ("Speedup vs plain", speedup_text(stats.decode_tokens_per_s, plain, speculation, estimate)),
        ("Drafted / accepted", f"{stats.n_drafted} / {stats.n_accepted}"),
        ("Acceptance rate", f"{stats.acceptance_rate:.1%}"),
        ("Mean accepted length", f"{stats.mean_accepted_length:.2f}"),
        ("Accepted drafts", draft_sources(stats).removeprefix("accepted ") or DASH),
        ("Verify steps", stats.n_steps),
        ("Prompt tokens (new / total)", f"{stats.n_prefilled} / {stats.n_prompt_tokens}"),
        ("Prefill", f"{stats.prefill_s * 1000:.0f} ms"),
        ("Decode", f"{stats.decode_s:.2f} s"),
        ("Time in llama.cpp", f"{stats.llama_fraction:.0%}"),
        ("Stop reason", stats.stop_reason or DASH),
    ]
    body = "".join(f"<tr><td>{k}</td><td>&nbsp;&nbsp;{v}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _baseline_text(plain: float | None, estimate: float | None) -> str:
    if plain:
        return f"{plain:.1f} tok/s (measured)"
    if estimate:
        return f"≈{estimate:.1f} tok/s (estimated from the engine's own plain steps)"
    return DASH
