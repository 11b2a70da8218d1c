"""The verdict under a reply, from the reply's own evidence: one rule, used while it streams and
when it has ended (the same numbers give the same words), and the raw figures behind it.

What "usual" means: this computer's plain speed for the model, measured (a plain reply, or a
Compare run that Compare found fair), else the quickest one-token steps the engine timed on
earlier replies with this model and setup (quiet moments, kept in the settings by
ui/presenters/speed_presenter.py), else this reply's own one-token steps (said "about"). A reply's own steps are never the yardstick where a better one exists: they slow down
with the computer's load, and a busy reply compared with them looked like a speed-up (issue 47:
"About 3.4x faster, 389 s saved" for 80 tokens in 162 s).

The rule, in order:
- speed-up off: "Speed-up off"; nothing written yet: nothing to say.
- the computer was busy (the reply's own one-token steps ran below BUSY_SHARE of the usual
  speed, or its slowdown is more than its guesses could cost): never "faster" nor "saved". A
  reply slower than usual says "N× slower" and that the computer was busy; any other says
  "About as fast as usual", the busy computer its reason.
- no drafted token accepted: "About as fast as usual" with its reason, never "faster".
- a reply under MIN_TOKENS tokens with guesses accepted: nothing while it streams (its first step
  weighs too much), and once it has ended, that it was too short to tell.
- otherwise the whole request against the usual speed, with two bounds from the reply's own
  numbers: it is never more "× faster" than the tokens it wrote a step (each step costs at least
  one plain step), and the guesses are never blamed for more than (written + drafted) / written
  (a slowdown beyond that is the computer's).
A busy reply stays busy: once seen while it streamed, the window keeps saying so to the end
(BUSY_KEY in its record), so the reason does not flip between the computer and the guesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from engine.events import DraftingState, Speculation, Stats

FASTER_AT = 1.1  # below this a reply is "about as fast as usual": the gain is within noise
AS_USUAL = "About as fast as usual"
MIN_TOKENS = 16  # shorter replies: too few steps to compare fairly (their first step weighs too much)
TOO_SHORT = "Too short to tell"
TOO_SHORT_REASON = f"Under {MIN_TOKENS} tokens: too few to compare with the usual speed."
LOW_ACCEPTANCE = 0.4  # below this share of guesses confirmed, the guesses are the reason
# The plain speed this reply's own plain steps ran at, against the usual one: below this share of
# it, the computer itself was slower during the reply (something else ran).
BUSY_SHARE = 0.75
# A record's extras: the reply was seen busy while it streamed; the usual one-token-step speed
# it was compared with (where no plain speed was measured).
BUSY_KEY = "busy_seen"
STEPS_KEY = "usual_steps_tokens_per_s"
FAILURE_KEY = "failure"  # why a reply failed, in the window's words (shown again with it)

# What the words read of a reply's numbers: a snapshot (engine.events.Stats) or its stored record
# (engine.events.StatsRecord, a Stats with its rates kept).
ReplyNumbers = Stats
E = TypeVar("E", bound=StrEnum)


class Verdict(StrEnum):
    FASTER = "faster"  # the speed-up paid: the headline is a ratio and the time saved
    NEUTRAL = "neutral"  # it ran and did not pay (or too little to tell): a plain reason
    SLOWER = "slower"  # it ran slower than plain decoding here: "N× slower", and why
    OFF = "off"  # the speed-up was off for this reply
    PENDING = "pending"  # nothing to say yet (no tokens, no plain speed known)


@dataclass(frozen=True)
class Headline:
    verdict: Verdict
    text: str  # the one line under a reply: "2.4× faster, 12 s saved", "3.1× slower"
    reason: str = ""  # NEUTRAL, SLOWER: why, in one plain line
    speedup: float | None = None  # whole request against plain decoding here
    is_estimate: bool = False  # the plain speed is the engine's estimate, not a measured run
    is_busy: bool = False  # the computer was busy: the ratio does not measure the speed-up


def seconds(s: float) -> str:
    """A duration as people say it: "40 ms", "0.4 s", "12 s", "168 s", "12 min 5 s" (never "0.0 s")."""
    if s < 0.095:
        return f"{s * 1000:.0f} ms"
    if s < 10:
        return f"{s:.1f} s"
    if s < 600:
        return f"{s:.0f} s"
    minutes, rest = divmod(round(s), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def member(kind: type[E], value: object) -> E:
    """kind's member whose value is str(value) (a record keeps a StrEnum's value); its empty one
    ("": nothing to say) for None or a value this version does not know."""
    try:
        return kind(str(value))
    except ValueError:
        return kind("")


# Why the speed-up did not pay, from the engine's state: what a person can understand and act on.
STATE_REASONS = {
    DraftingState.SUSPENDED: "Speed-up paused: its guesses were not paying off on this text.",
    DraftingState.SHORT_REPLY: "The reply was too short to be worth starting the draft model.",
    DraftingState.DRAFT_TOO_SLOW: "The draft model is not faster than the model itself on this computer.",
    DraftingState.DRAFT_LOAD_FAILED: "The draft model could not be loaded; the model wrote alone.",
}

BUSY_REASON = "The computer was busy: even its plain speed fell during this reply."
# Slower than its guesses could make it, while its own plain steps did not show it.
UNEXPLAINED_REASON = "The computer was busy: its guesses could not have slowed it this much."
COSTLY_REASON = "The guesses cost more than they saved."


def neutral_reason(numbers: ReplyNumbers, note_kind: object = "") -> str:
    """One plain line: why the speed-up did not make this reply faster."""
    state = member(DraftingState, note_kind)
    if state in STATE_REASONS:
        return STATE_REASONS[state]
    if numbers.n_drafted == 0:
        # (True with a document attached too: the reply repeated none of it.)
        return "Nothing to reuse: this reply did not repeat text from the conversation or a document."
    if numbers.n_accepted == 0:
        return "None of its guesses was right: this reply says new things rather than reusing text."
    if numbers.acceptance_rate < LOW_ACCEPTANCE:
        return "Most guesses were wrong: this reply says new things rather than reusing text."
    return "The guesses cost about as much time as they saved here."


def was_busy(numbers: ReplyNumbers, measured_plain: float | None) -> bool:
    """Whether the computer itself ran slower during this reply than its usual plain speed (a
    measured one, or earlier quiet steps'): the reply's own plain steps ran well below it."""
    during = numbers.plain_tokens_per_s_est
    return bool(measured_plain and during and during < BUSY_SHARE * measured_plain)


def slower_reason(note_kind: object = "") -> str:
    """One plain line: why this reply was slower than plain decoding here, the computer not busy."""
    state = member(DraftingState, note_kind)
    if state in (DraftingState.DRAFT_TOO_SLOW, DraftingState.DRAFT_LOAD_FAILED):
        return STATE_REASONS[state]
    return COSTLY_REASON


def _usual_steps(numbers: ReplyNumbers, usual_steps: float | None) -> float | None:
    """The quiet one-token-step speed this reply is compared with: given, or kept in its record."""
    if usual_steps and usual_steps > 0:
        return usual_steps
    kept = getattr(numbers, "extras", {}).get(STEPS_KEY)
    return float(kept) if isinstance(kept, int | float) and not isinstance(kept, bool) and kept > 0 else None


def plain_speed(
    numbers: ReplyNumbers, measured: float | None, usual_steps: float | None = None
) -> tuple[float | None, bool]:
    """(plain tokens/s to compare with, whether it is the engine's estimate): the measured one;
    else the quickest one-token steps timed here (earlier quiet ones, or this reply's own), with
    the work each step does around llama.cpp added: the engine times its steps without it, and
    on a small model it is a good part of a token's time (a reply drafting nothing read "1.9×
    slower" against its own steps' speed)."""
    if measured and measured > 0:
        return measured, False
    steps = max(_usual_steps(numbers, usual_steps) or 0.0, numbers.plain_tokens_per_s_est or 0.0)
    if steps <= 0:
        return None, False
    return 1.0 / (1.0 / steps + max(0.0, numbers.step_overhead_ms_median) / 1000), True


def usual_how(numbers: ReplyNumbers, measured: float | None, usual_steps: float | None = None) -> str:
    """Where the usual speed comes from, in words (the Details' "Usual speed" row)."""
    if measured and measured > 0:
        return "measured on this computer"
    steps = _usual_steps(numbers, usual_steps)
    if steps and steps >= (numbers.plain_tokens_per_s_est or 0.0):
        return "from the model's own steps on this computer, at a quiet moment"
    return "estimated from the model's own steps in this reply"


def _busy_seen(numbers: ReplyNumbers) -> bool:
    return getattr(numbers, "extras", {}).get(BUSY_KEY) is True


def _headline(text: str) -> str:
    return text[0].upper() + text[1:]


def headline(
    numbers: ReplyNumbers,
    measured_plain: float | None,
    note_kind: object = "",
    usual_steps: float | None = None,
    busy_seen: bool = False,
    ended: bool = False,
) -> Headline:
    """The one line a reply gets: how much sooner the whole request ended than plain decoding
    here, within what its own numbers allow (the module's docstring has the rule). ended: the
    reply has ended (a short one then says so)."""
    if numbers.speculation == Speculation.NONE:
        return Headline(Verdict.OFF, "Speed-up off")
    if numbers.n_generated <= 0 or numbers.decode_s <= 0:
        return Headline(Verdict.PENDING, "")
    plain, is_estimate = plain_speed(numbers, measured_plain, usual_steps)
    # Busy is told on like measures where there are: the reply's one-token steps against quiet
    # ones with a prompt of its size; else against the measured plain speed.
    reference = _usual_steps(numbers, usual_steps) or measured_plain
    busy = busy_seen or _busy_seen(numbers) or was_busy(numbers, reference)
    nothing_accepted = numbers.n_accepted <= 0
    if plain is None or numbers.n_generated < MIN_TOKENS:
        if busy:
            return Headline(Verdict.NEUTRAL, AS_USUAL, BUSY_REASON, is_busy=True)
        if member(DraftingState, note_kind) in STATE_REASONS or nothing_accepted:
            return Headline(Verdict.NEUTRAL, AS_USUAL, neutral_reason(numbers, note_kind))
        if ended and numbers.n_generated < MIN_TOKENS:
            return Headline(Verdict.NEUTRAL, TOO_SHORT, TOO_SHORT_REASON)
        return Headline(Verdict.PENDING, "")
    written, taken = numbers.n_generated, numbers.prefill_s + numbers.decode_s
    plain_decode_s = written / plain
    if numbers.n_steps > 0:  # each step costs at least one plain step
        plain_decode_s = min(plain_decode_s, numbers.decode_s * written / numbers.n_steps)
    plain_s = numbers.prefill_s + plain_decode_s
    if taken <= 0 or plain_s <= 0:  # a hand-edited or damaged record: nothing to compare
        return Headline(Verdict.PENDING, "")
    speedup = plain_s / taken
    saved = plain_s - taken
    # The guesses cost at most the checking of every drafted token: beyond that, the computer.
    unexplained = speedup < 1 and 1 / speedup > max((written + numbers.n_drafted) / written, FASTER_AT)
    if nothing_accepted:  # the speed-up changed nothing: as fast as usual, and why
        # Busy, or slower than usual with nothing to blame but the computer: all its steps were
        # plain, and they ran below the usual speed.
        reason = BUSY_REASON if busy or unexplained else neutral_reason(numbers, note_kind)
        return Headline(
            Verdict.NEUTRAL, AS_USUAL, reason, min(speedup, 1.0), is_estimate, busy or unexplained
        )
    about = "about " if is_estimate else ""
    slower = _headline(f"{about}{1 / speedup:.1f}× slower")
    figures = (speedup, is_estimate)
    if busy or unexplained:
        reason = BUSY_REASON if busy else UNEXPLAINED_REASON
        if speedup <= 1 / FASTER_AT:
            return Headline(Verdict.SLOWER, slower, reason, *figures, True)
        return Headline(Verdict.NEUTRAL, AS_USUAL, reason, *figures, True)
    if speedup >= FASTER_AT:
        return Headline(
            Verdict.FASTER,
            _headline(
                f"{about}{speedup:.1f}× faster" + (f", {seconds(saved)} saved" if saved >= 0.0005 else "")
            ),
            "",
            *figures,
        )
    if speedup <= 1 / FASTER_AT:
        return Headline(Verdict.SLOWER, slower, slower_reason(note_kind), *figures)
    return Headline(Verdict.NEUTRAL, AS_USUAL, neutral_reason(numbers, note_kind), *figures)


# How a reply ended (engine.events.StopReason values, and the store's "interrupted"): the
# Details' "Ended" row says every end; the line under a reply says the ends worth a look.
ENDED = {
    "eos": "finished",
    "stop": "finished",
    "length": "stopped at the reply-length cap",
    "context": "stopped at the context limit",
    "repetition": "stopped: it was repeating itself",
    "cancelled": "stopped by you",
    "interrupted": "interrupted before it finished",
}
# A reply stopped at the cap: Continue sends this, and the model writes on from there.
CONTINUE_REQUEST = "Continue from where you stopped."
END_NOTES = {
    "length": "stopped at the reply-length cap",
    "context": "stopped at the context limit",
    "repetition": "stopped: the reply was repeating itself",
}


def end_note(stop_reason: str | None, n_tokens: int = 0) -> str:
    """One line on how a reply ended ("" where it ended as replies do): the reply-length cap with
    its size ("stopped at the reply-length cap (512 tokens)")."""
    note = END_NOTES.get(stop_reason or "", "")
    if stop_reason == "length" and n_tokens > 0:
        note += f" ({n_tokens} tokens)"
    return note


def details(
    numbers: ReplyNumbers, measured_plain: float | None, usual_steps: float | None = None
) -> list[tuple[str, str]]:
    """The raw figures behind a headline, shown on demand (each once): (label, value) rows.
    Every reply's: its tokens, time to first token, writing speed, accepted drafts, how it ended."""
    rows: list[tuple[str, str]] = []
    n = numbers.n_generated
    taken = numbers.prefill_s + numbers.decode_s
    rows.append(("Reply", f"{n} tokens in {seconds(taken)}"))
    if n > 0:  # as timed by the engine where it says; else the prompt's reading and a usual step
        first_step_s = numbers.decode_s / numbers.n_steps if numbers.n_steps else 0.0
        first_s = getattr(numbers, "first_token_s", 0.0) or numbers.prefill_s + first_step_s
        rows.append(("Time to first token", seconds(first_s)))
    if numbers.decode_s > 0:
        rows.append(("Writing speed", f"{n / numbers.decode_s:.1f} tokens/s"))
    plain, _ = plain_speed(numbers, measured_plain, usual_steps)
    if plain is not None:
        rows.append(
            ("Usual speed", f"{plain:.1f} tokens/s ({usual_how(numbers, measured_plain, usual_steps)})")
        )
    if numbers.speculation != Speculation.NONE:
        drafted, accepted = numbers.n_drafted, numbers.n_accepted
        rows.append(
            ("Accepted drafts", f"{accepted} of {drafted} drafted tokens" if drafted else "none drafted")
        )
    if numbers.speculation != Speculation.NONE and numbers.n_drafted:
        share = numbers.n_accepted / n if n else 0.0
        rows.append(("Reused and confirmed", f"{share:.0%} of the reply"))
        rows.append(("Guesses confirmed", f"{numbers.acceptance_rate:.0%}"))
        if numbers.n_steps and numbers.n_steps_with_draft:  # a server does not say its steps
            rows.append(("Tokens a step", f"{n / numbers.n_steps:.1f}"))
    ended = ENDED.get(getattr(numbers, "stop_reason", None) or "")
    if ended:
        rows.append(("Ended", ended))
    return rows
