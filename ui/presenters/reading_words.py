"""What the window says about a prompt's reading: live while it is read, and in a reply's Details
what was read new, what came from the cache, and why more was read again than what was new.

From typed values only (engine.events.Reading, Stats' n_prompt_tokens, n_prefilled, prefill_s
and its Reread), as ui/presenters/verdict.py does for speed (its Details say the time to the
first token, from Stats.first_token_s: each figure once).
"""

from __future__ import annotations

import dataclasses

from engine.events import Reading, Reread, Stats
from ui.presenters.verdict import member, seconds

# Why a reply read again part of the conversation the model had read before.
REREAD_REASONS = {
    Reread.FIRST: "the model had just been loaded, so nothing was read before",
    Reread.CHANGED: "the text differed from what the model had read before",
    Reread.SYSTEM_PROMPT: "the system prompt (or preset) changed",
    Reread.EARLIER_MESSAGE: "an earlier message was edited",
    Reread.OTHER_CONVERSATION: "another conversation was read in between",
    Reread.OLDEST_LEFT_OUT: "the oldest messages were left out to fit the context",
    Reread.CANNOT_TRIM: "this kind of model (recurrent or hybrid) cannot keep part of what it read",
}


def reading_line(reading: Reading) -> str:
    """The live line while a prompt is read: "Reading 3,200 tokens – 40%, about 6 s left"; before
    the speed is known (the first chunk of a model's first reading), the time so far once it is
    a second: "Reading 3,200 tokens – 0%, 2.5 s so far"; in its last second "under a second left"."""
    line = f"Reading {reading.n_to_read:,} tokens – {reading.fraction:.0%}"
    if reading.seconds_left is not None and reading.fraction < 1:
        if reading.seconds_left >= 1:
            line += f", about {seconds(reading.seconds_left)} left"
        elif reading.seconds_left >= 0.05:  # read but for the last token: not "about 0.0 s left"
            # A tenth of a second is below what a speed measured chunk by chunk can promise (the
            # last chunk, reading the longest cache, runs slowest): 0.3 s said, 0.6 s real.
            line += ", under a second left"
    elif reading.seconds_left is None and reading.elapsed_s >= 1:
        line += f", {seconds(reading.elapsed_s)} so far"
    return line


def reading_after(reading: Reading, waited_s: float) -> Reading:
    """The reading `waited_s` after it was reported, as the display says it until the next report
    (a 7B model's chunk takes seconds on a CPU): the count moved on at the speed its time left
    implies, never to the end of the chunk in flight (n_next: only the engine's count, when that
    chunk is read, gets there), and the time left what that count leaves. A chunk later than that
    speed says: the count waits short of its end, and the time left is what comes after it at
    the speed the chunk shows at least (none said in the last chunk: nothing is known of it but
    that it is late). Unchanged but the time where there is no speed or no chunk end to stop
    short of (a server's reports)."""
    end = reading.n_prompt_tokens - 1  # the prompt's last token is read with the reply's first step
    n_left = end - reading.n_processed
    n_chunk = reading.n_next - reading.n_processed
    left = reading.seconds_left
    waited_s = max(waited_s, 0.0)
    elapsed_s = reading.elapsed_s + waited_s
    if left is None or left <= 0 or n_left <= 0 or n_chunk <= 0:
        return dataclasses.replace(reading, elapsed_s=elapsed_s)
    s_per_token = left / n_left
    n_now = reading.n_processed + int(waited_s / s_per_token)
    if n_now < reading.n_next:
        return dataclasses.replace(
            reading, n_processed=n_now, elapsed_s=elapsed_s, seconds_left=(end - n_now) * s_per_token
        )
    n_after = end - reading.n_next
    return dataclasses.replace(
        reading,
        n_processed=reading.n_next - 1,
        elapsed_s=elapsed_s,
        seconds_left=n_after * max(s_per_token, waited_s / n_chunk) if n_after > 0 else None,
    )


def reading_rows(numbers: Stats) -> list[tuple[str, str]]:
    """Details' rows on the reading: (label, value), each figure once."""
    rows: list[tuple[str, str]] = []
    n_new, n_prompt = numbers.n_prefilled, numbers.n_prompt_tokens
    if n_prompt <= 0:
        return rows
    n_cached = n_prompt - n_new
    read = (
        f"read {n_new:,} new tokens ({n_cached:,} from the cache)"
        if n_cached
        else f"read all {n_new:,} tokens"
    )
    if numbers.prefill_s > 0:
        read += f" in {seconds(numbers.prefill_s)}"
    rows.append(("Prompt", read))
    reason = REREAD_REASONS.get(member(Reread, numbers.reread))
    if reason:
        rows.append(("Read again because", reason))
    return rows
