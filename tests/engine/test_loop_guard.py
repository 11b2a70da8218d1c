"""The loop guard: a reply that repeats one stretch again and again is stopped, with a typed
reason ("repetition"), whatever runs it; text that only resembles a loop is left alone."""

from __future__ import annotations

import numpy as np

from engine.loop_guard import MIN_REPEATS, MIN_SPAN, LoopGuard


def _first_stop(tokens: list[int], guard: LoopGuard | None = None) -> int | None:
    guard = guard or LoopGuard()
    for i, token in enumerate(tokens):
        if guard.add(token):
            return i
    return None


def test_a_sentence_told_again_and_again_is_stopped_at_its_fourth_telling() -> None:
    sentence = list(range(100, 120))  # 20 tokens: "I've added a comma after "morning" …"
    opening = list(range(500, 540))
    tokens = opening + sentence * 30
    at = _first_stop(tokens)
    assert at == len(opening) + MIN_REPEATS * len(sentence) - 1  # the last token of the fourth
    # The stretch found is the sentence, whatever came before it: a loop of period p ends the reply
    # at the last of max(MIN_REPEATS * p, MIN_SPAN) repeated tokens (two sentences: at 4 x 40).
    assert _first_stop(sentence * 30) == MIN_REPEATS * len(sentence) - 1


def test_a_short_motif_must_run_long_before_it_counts() -> None:
    motif = [7, 8]  # "- -", "0, 0,"
    assert _first_stop(motif * 20) is None  # 40 tokens: a rule line, a row of zeros
    assert _first_stop(motif * 40) == MIN_SPAN - 1
    assert _first_stop([9] * (MIN_SPAN - 1)) is None


def test_text_that_does_not_repeat_whole_is_left_alone() -> None:
    rng = np.random.default_rng(0)
    assert _first_stop([int(t) for t in rng.integers(0, 50_000, 2000)]) is None
    # One paragraph given back twice (a copy of a document) or three times: not a loop.
    paragraph = [int(t) for t in rng.integers(0, 50_000, 120)]
    assert _first_stop(paragraph * 3) is None
    # Lines that share their start and differ after it (a list, a table).
    rows = [tok for i in range(60) for tok in (11, 12, 13, 1000 + i, 14)]
    assert _first_stop(rows) is None


def test_a_new_reply_starts_clean() -> None:
    guard = LoopGuard()
    sentence = list(range(20))
    assert _first_stop(sentence * 3, guard) is None
    guard.reset()
    assert _first_stop(sentence * 3, guard) is None  # 3 + 3 would have been a loop without reset


def test_a_draft_is_kept_up_to_where_it_would_make_the_reply_a_loop() -> None:
    sentence = list(range(100, 120))
    guard = LoopGuard()
    assert _first_stop(list(range(500, 540)) + sentence * 3, guard) is None
    assert guard.tokens_before_loop(sentence * 2) == len(sentence)  # its fourth telling ends it
    assert guard.tokens_before_loop([1, 2, 3]) == 3  # (no loop: all of it)
    assert guard.tokens_before_loop(list(range(200, 300))) == 100
    # Asking changes nothing: the guard goes on from the text itself.
    assert _first_stop(sentence, guard) == len(sentence) - 1


def test_where_a_draft_would_make_a_loop_is_where_the_guard_finds_it_token_by_token() -> None:
    rng = np.random.default_rng(1)
    for trial in range(300):
        # Texts of small alphabets and loops of every period the guard looks for, some cut short.
        motif = [int(t) for t in rng.integers(0, 6, int(rng.integers(1, 40)))]
        text = (motif * 300)[: int(rng.integers(0, 260))] + [int(t) for t in rng.integers(0, 4, 30)]
        split = int(rng.integers(0, len(text) + 1))
        guard = LoopGuard()
        if _first_stop(text[:split], guard) is not None:
            continue
        draft = text[split : split + int(rng.integers(0, 80))]
        alone = LoopGuard()
        _first_stop(text[:split], alone)
        stop = _first_stop(draft, alone)
        assert guard.tokens_before_loop(draft) == (len(draft) if stop is None else stop + 1), trial


def test_a_real_reply_that_loops_ends_with_the_typed_reason_whatever_drafts(models_dir) -> None:  # type: ignore[no-untyped-def]
    # A tiny random model that falls into a loop on this prompt (seed 0, greedy): before the
    # guard it wrote all 400 tokens of "�E��E��E…".
    from engine.config import NGRAM_LOOKUP, DraftChoice, EngineConfig, SamplingParams
    from engine.events import Finished
    from engine.session import Engine
    from tests.tiny import write_tiny_model

    looper = write_tiny_model(models_dir / "looper.gguf", seed=0)
    ends = []
    for draft in (DraftChoice(), NGRAM_LOOKUP):
        engine = Engine(EngineConfig(str(looper), draft=draft, n_ctx=1024, n_threads=1))
        try:
            events = list(engine.generate("abc abc abc abd abd abc", params=SamplingParams(), max_tokens=400))
        finally:
            engine.close()
        finished = events[-1]
        assert isinstance(finished, Finished)
        assert finished.stop_reason == "repetition"
        assert MIN_SPAN <= finished.stats.n_generated < 400
        # Drafts of the loop are cut where it is found: nothing is verified past the reply's end
        # (every step emits one token of the target's own after the drafts it kept, the last
        # step's perhaps past the end).
        s = finished.stats
        assert s.n_accepted + s.n_steps - 1 <= s.n_generated
        ends.append((finished.text, finished.token_ids))
    assert ends[0] == ends[1]  # plain and n-gram stop at the same token: the text is the model's


def _text_stop(text: str, chunk: int) -> int | None:
    """Where in `text`, fed `chunk` characters at a time, the text guard says loop."""
    from engine.loop_guard import TextLoopGuard

    guard = TextLoopGuard()
    for at in range(0, len(text), chunk):
        if guard.add(text[at : at + chunk]):
            return at + chunk
    return None


def test_a_servers_text_loops_are_stopped_however_its_chunks_cut_the_words() -> None:
    # A server's reply is text (app/host/remote_worker.py): words and marks stand for tokens.
    sentence = 'I\'ve added a comma after "morning" in the note. '  # 13 words and marks
    reply = "Sure, here is the note with the comma. " + sentence * 30
    stops = {chunk: _text_stop(reply, chunk) for chunk in (1, 3, 5, 64)}
    assert all(at is not None for at in stops.values()), stops
    # Stopped once MIN_SPAN (64) words repeat, whatever the chunks: in the 5th or 6th telling of
    # the 13 words, and at the same word for any cut (one chunk's length past it at most).
    told = {chunk: reply[:at].count("I've added") for chunk, at in stops.items() if at is not None}
    assert set(told.values()) <= {5, 6}, told
    assert max(stops.values()) - min(stops.values()) <= 64, stops  # type: ignore[operator]
    # Prose that only resembles a loop (repeated words, a refrain once) is left alone.
    prose = " ".join(f"Line {i}: the cat sat on the mat, and the dog sat on mat {i % 7}." for i in range(60))
    assert _text_stop(prose, 4) is None


# --- near-repeats: one line told again with a new number each time (issue 47) ----------------------

# The review's reply (SmolLM2, "Write a long list of tips for studying for exams"): items 10-23 one
# line with a new number, to the 512-token cap, with no note. No stretch of tokens repeats exactly.
STUDY_TIPS = (
    "Here are some tips for studying for exams:\n\n"
    + "".join(
        f"{i}. {tip}\n"
        for i, tip in enumerate(
            [
                "Make a study plan and stick to it every day.",
                "Take short breaks every hour to rest your mind.",
                "Sleep well the night before the exam.",
                "Practise with old exam papers under timed conditions.",
                "Teach what you learned to a friend or a family member.",
                "Keep your desk tidy and your phone in another room.",
                "Drink water and eat something light before you start.",
                "Write short summaries of each chapter in your own words.",
                "Ask your teacher about anything you do not understand.",
            ],
            start=1,
        )
    )
    + "".join(
        f"{i}. Use a study app: it helps you keep track of your progress and your goals.\n"
        for i in range(10, 24)
    )
)


def _line_stop(text: str, tokenize, token_bytes) -> int | None:  # type: ignore[no-untyped-def]
    """Where the guard stops `text`, fed token by token as the engine feeds it (id and bytes): the
    characters kept up to and including the token that made it a loop."""
    guard, kept = LoopGuard(), b""
    for token in tokenize(text):
        piece = token_bytes(token)
        kept += piece
        if guard.add(token, piece):
            return len(kept.decode("utf-8", "replace"))
    return None


def test_a_numbered_list_looping_on_one_item_is_stopped_within_three_repeats(tiny_target) -> None:  # type: ignore[no-untyped-def]
    # With a real model's tokenizer (the tiny model's byte-level BPE): each id and its bytes, as
    # engine/speculative.py hands them to the guard.
    from engine.config import EngineConfig
    from engine.session import Engine

    engine = Engine(EngineConfig(str(tiny_target), n_ctx=512, n_threads=1))
    try:
        at = _line_stop(
            STUDY_TIPS, lambda t: engine.tokenize(t, add_special=False), engine.target.token_bytes
        )
        # Without the near-repeat rule the exact guard never fires: the numbers differ.
        exact = LoopGuard()
        assert not any(exact.add(t) for t in engine.tokenize(STUDY_TIPS, add_special=False))
    finally:
        engine.close()
    assert at is not None
    kept = STUDY_TIPS[:at]
    assert kept.count("Use a study app") == 4  # the line and 3 repeats: item 13 ends it
    assert kept.endswith("13. Use a study app: it helps you keep track of your progress and your goals.\n")


def test_near_repeats_apart_from_bullets_spacing_and_blank_lines() -> None:
    from engine.loop_guard import LineRepeats, line_key

    assert line_key("  10. Use a study app:  it helps\t") == line_key("- Use a study app: it helps")
    assert line_key("**11.** Use a study app: it helps") == line_key("(12) Use a study app: it helps")
    assert line_key("b) Use a study app: it helps") == line_key("• Use a study app: it helps")

    def stops(lines: list[str], tokens_a_line: int = 10) -> int | None:
        guard = LineRepeats()
        for i, line in enumerate(lines):
            if guard.add(line.encode() + b"\n", tokens_a_line):
                return i
        return None

    item = "Use a study app: it helps you keep track of your progress."
    bullets = [f"{m} {item}" for m in ("-", "*", "•", "-", "-")]
    assert stops(bullets) == 3  # the fourth telling
    spaced = [f"{i}.  {item}" if i % 2 else "" for i in range(1, 12)]  # blank lines between items
    assert stops(spaced) == 6  # the fourth item (its line 7), whatever lies between
    # Short lines (fewer than 8 tokens) repeat in lists and tables: left alone.
    assert stops([f"{i}. TODO" for i in range(40)], tokens_a_line=3) is None
    # A list of distinct items, a paragraph given back three times, a line told 3 times: left alone.
    assert stops([f"{i}. Item number {i} says something new each time." for i in range(40)]) is None
    paragraph = ["The market opens in June.", "Stalls cost twenty pounds.", "Everyone is welcome."]
    assert stops(paragraph * 3, tokens_a_line=9) is None
    assert stops([item] * 3) is None


def test_a_servers_numbered_loop_is_stopped_too() -> None:
    # Text from a server (app/host/remote_worker.py): the same rule on its lines, each word a token.
    at = _text_stop(STUDY_TIPS, 7)
    assert at is not None and STUDY_TIPS[:at].count("Use a study app") == 4
