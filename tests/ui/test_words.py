"""The window's words: one headline a reply, from the engine's typed values, in plain language."""

from __future__ import annotations

from engine.events import DraftingState, Stats
from ui.presenters import verdict, words
from ui.presenters.verdict import Verdict


def _stats(**changes: object) -> Stats:
    values: dict[str, object] = dict(
        speculation="ngram",
        n_prompt_tokens=400,
        n_prefilled=400,
        n_generated=300,
        n_drafted=260,
        n_accepted=240,
        n_steps=70,
        n_steps_with_draft=60,
        prefill_s=2.0,
        decode_s=3.0,
        llama_s=4.5,
        draft_max=32,
        plain_tokens_per_s_est=40.0,
    )
    values.update(changes)
    return Stats(**values)  # type: ignore[arg-type]


def test_a_reply_that_paid_reads_as_one_headline_over_the_whole_request() -> None:
    # Plain here: 2 s of prompt + 300 tokens at 30 tok/s = 12 s; it took 5 s.
    h = verdict.headline(_stats(), measured_plain=30.0)
    assert h.verdict is Verdict.FASTER
    assert h.text == "2.4× faster, 7.0 s saved"
    assert not h.is_estimate and h.reason == ""
    # A short quick reply: what it saved in milliseconds, never "1.2× faster, 0.0 s saved".
    # Plain: 0.01 s of prompt + 20 tokens at 100 tok/s = 0.21 s; it took 0.17 s.
    short = _stats(
        n_generated=20,
        n_drafted=8,
        n_accepted=6,
        n_steps=14,
        n_steps_with_draft=4,
        prefill_s=0.01,
        decode_s=0.16,
        plain_tokens_per_s_est=100.0,  # its own plain steps ran at the usual speed: not busy
    )
    assert verdict.headline(short, measured_plain=100.0).text == "1.2× faster, 40 ms saved"


def test_without_a_measured_plain_speed_the_engine_estimate_is_said_to_be_one() -> None:
    h = verdict.headline(_stats(), measured_plain=None)  # 2 + 300/40 = 9.5 s against 5 s
    assert h.text == "About 1.9× faster, 4.5 s saved" and h.is_estimate


def test_a_reply_that_did_not_pay_is_neutral_with_a_plain_reason() -> None:
    slow = _stats(decode_s=9.0, n_accepted=40, n_steps=280)  # 11 s against 12 s plain
    h = verdict.headline(slow, measured_plain=30.0)
    assert h.verdict is Verdict.NEUTRAL and h.text == "About as fast as usual"
    assert h.reason.startswith("Most guesses were wrong")
    paused = verdict.headline(slow, 30.0, note_kind=DraftingState.SUSPENDED)
    assert paused.reason == "Speed-up paused: its guesses were not paying off on this text."
    nothing = verdict.headline(_stats(decode_s=10.0, n_drafted=0, n_accepted=0), 30.0)
    assert nothing.reason.startswith("Nothing to reuse")


def test_no_engine_sentence_reaches_the_words() -> None:
    engine_note = "drafts stopped paying: decoding plainly for now, trying again soon"
    slow = _stats(decode_s=9.0, note=engine_note, note_kind=DraftingState.SUSPENDED)
    h = verdict.headline(slow, 30.0, note_kind=slow.note_kind)
    assert engine_note not in h.text + h.reason
    assert "paying" in h.reason and "draft" not in h.reason.lower()
    every = " ".join([*verdict.STATE_REASONS.values(), *(c.why for c in words.SPEED_UP_CHOICES)])
    for jargon in ("per draft", "mean accepted", "vs plain", "FINDINGS", "shared/", "tok/s"):
        assert jargon not in every


def test_speed_up_off_and_pending() -> None:
    assert verdict.headline(_stats(speculation="none"), 30.0).verdict is Verdict.OFF
    assert verdict.headline(_stats(n_generated=0, decode_s=0.0), 30.0).verdict is Verdict.PENDING


def test_the_details_hold_each_figure_once() -> None:
    rows = verdict.details(_stats(), 30.0)
    labels = [label for label, _ in rows]
    assert len(labels) == len(set(labels))
    assert dict(rows)["Usual speed"] == "30.0 tokens/s (measured on this computer)"
    assert dict(rows)["Reused and confirmed"] == "80% of the reply"
    assert verdict.seconds(725) == "12 min 5 s" and verdict.seconds(0.42) == "0.4 s"
    assert verdict.seconds(0.04) == "40 ms" and verdict.seconds(0.0949) == "95 ms"  # never "0.0 s saved"


def test_compare_counts_both_runs_on_one_clock() -> None:
    # The second run finds the prompt already read: both are counted with the first run's reading,
    # and the panes say the headline's two figures (not each run's own, which disagreed with it).
    plain = _stats(speculation="none", prefill_s=8.0, decode_s=160.0, n_drafted=0, n_accepted=0)
    sped = _stats(prefill_s=0.1, decode_s=63.0)
    assert words.compare_seconds(plain, sped) == (168.0, 71.0)
    assert words.compare_headline(plain, sped) == "71 s instead of 168 s: 2.4× faster"


def test_compare_headline_and_the_same_text_check() -> None:
    plain = _stats(speculation="none", prefill_s=8.0, decode_s=160.0, n_drafted=0, n_accepted=0)
    sped = _stats(prefill_s=8.0, decode_s=63.0)
    assert words.compare_headline(plain, sped) == "71 s instead of 168 s: 2.4× faster"
    assert words.compare_headline(plain, _stats(prefill_s=8.0, decode_s=158.0)).endswith(
        "about as fast as usual"
    )
    assert words.same_text_words("a b c", "a b c", is_greedy=True) == (
        True,
        "✓ The same text, word for word.",
    )
    same, note = words.same_text_words("a b c", "a b d", is_greedy=False)
    assert not same and note.startswith("The texts differ by design: sampling is on")
    same, note = words.same_text_words("a b c", "a b d", is_greedy=True)
    assert not same and note.startswith("⚠ The texts part at character 5")
