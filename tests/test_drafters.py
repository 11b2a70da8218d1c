"""The drafters: what the n-gram drafter proposes and how long a match it reports (its acceptance
bucket); where a draft model stops drafting."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.backend import LlamaRunner
from engine.config import SamplingParams
from engine.drafters import ModelDrafter, NgramDrafter
from engine.reply_memory import ReplyMemory


def test_the_latest_earlier_match_proposes_what_followed_it() -> None:
    d = NgramDrafter()
    ctx = [1, 2, 3, 9, 9, 1, 2, 3, 7, 7, 5, 1, 2, 3]
    d.begin(ctx)
    draft, match_len = d.lookup(ctx, 4)
    assert draft == [7, 7, 5, 1] and match_len == 3  # the later [1, 2, 3], not the first
    assert NgramDrafter.bucket(match_len) == 3


def test_copying_is_told_from_a_recurring_phrase() -> None:
    # A phrase of 8 tokens seen before (max_ngram) in fresh text, and the same 8 tokens at the
    # end of a 30-token stretch being copied: the lookup reports how far the match really goes,
    # so their acceptance is kept apart (bucket 4 and bucket 5).
    phrase = list(range(100, 108))
    prompt = [1, 2, *phrase, 50, 51]
    fresh = [*prompt, 60, 61, *phrase]  # the reply: 60, 61, then the phrase again
    d = NgramDrafter()
    d.begin(prompt)
    draft, match_len = d.lookup(fresh, 8)
    assert draft[:2] == [50, 51] and match_len == 8 and NgramDrafter.bucket(match_len) == 4
    source = list(range(200, 230)) + phrase + [70, 71, 72]
    copy = [*source, 0, *source[: len(source) - 3]]
    d = NgramDrafter()
    d.begin(copy[: len(source) + 1])
    draft, match_len = d.lookup(copy, 8)
    assert draft == [70, 71, 72, 0, 200, 201, 202, 203]
    assert match_len == len(source) - 3 and NgramDrafter.bucket(match_len) == 5  # followed back all the way
    # A match that reaches the start of the text stops there.
    short = [*phrase, 0, 1, *phrase]
    d = NgramDrafter()
    d.begin(short[:9])
    assert d.lookup(short, 4)[1] == 8


def test_a_reply_that_starts_by_copying_is_copying_from_its_first_tokens() -> None:
    source = list(range(200, 240))
    prompt = [1, 2, 3, *source, 4, 5]
    d = NgramDrafter()
    d.begin(prompt)
    reply = prompt + source[:3]  # the reply so far: 3 tokens, the start of the source
    draft, match_len = d.lookup(reply, 4)
    assert draft == source[3:7] and NgramDrafter.bucket(match_len) < 5  # too short to tell
    reply = prompt + source[:5]
    assert NgramDrafter.bucket(d.lookup(reply, 4)[1]) == 5
    # The same 5 tokens in the middle of a reply (after other text) are a recurring phrase.
    reply = [*prompt, 90, 91, 92, *source[:5]]
    assert NgramDrafter.bucket(d.lookup(reply, 4)[1]) == 4


def test_a_reply_that_goes_on_copying_where_its_prompt_began_is_copying() -> None:
    # The prompt itself starts the copy (its last 6 tokens are the source's first); the reply's
    # first 3 tokens go on with it: 9 tokens matched, all of the reply among them.
    source = list(range(200, 240))
    prompt = [1, 2, 3, *source, 4, 5, *source[:6]]
    d = NgramDrafter()
    d.begin(prompt)
    draft, match_len = d.lookup(prompt + source[6:9], 4)
    assert draft == source[9:13] and NgramDrafter.bucket(match_len) == 5


def test_an_earlier_reply_is_drafted_from_the_first_token_of_its_regenerate() -> None:
    memory = ReplyMemory()
    prompt = list(range(300, 340))
    reply = list(range(500, 530))
    memory.add(prompt, reply)
    d = NgramDrafter(memory=memory)
    d.begin(list(prompt))
    draft, bucket = d.offer(list(prompt), 8)
    assert draft == reply[:8] and bucket == 7  # the prompt's end matched 16 tokens: a regenerate
    # Halfway through, the continuation stops at the end of that reply, never in the next one.
    memory.add([1, 2, 3], [7, 7, 7, 7, 7, 7])
    ctx = [*prompt, *reply[:26]]
    assert d.offer(ctx, 8) == (reply[26:], 7)
    # Asked not to (Compare), the drafter does not look there.
    assert d.offer(ctx, 8, use_memory=False)[0] != reply[26:]


def test_the_text_so_far_wins_over_an_earlier_reply_that_matches_as_long() -> None:
    memory = ReplyMemory()
    memory.add([9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 40, 41])
    d = NgramDrafter(memory=memory)
    ctx = [1, 2, 3, 4, 5, 6, 30, 31, 0, 1, 2, 3, 4, 5, 6]
    d.begin(ctx[:8])  # the reply: 0, then the phrase
    draft, bucket = d.offer(ctx, 2)
    assert draft == [30, 31] and bucket == 4  # 6 tokens matched in the text: its own phrase
    # A short match in the text loses to a longer one in an earlier reply.
    ctx = [8, 3, 4, 5, 6, 30, 1, 2, 3, 4, 5, 6]
    d.begin(ctx[:6])
    assert d.offer(ctx, 2) == ([40, 41], 6)
    # Under ReplyMemory.MIN_MATCH tokens, an earlier reply is not asked.
    assert ReplyMemory().lookup([5, 6], 4) == ([], 0)
    assert memory.lookup([0, 5, 6], 4) == ([], 0)


def test_reply_memory_keeps_the_latest_replies_within_its_bound() -> None:
    memory = ReplyMemory(max_tokens=100)
    for i in range(10):
        memory.add([], [1000 + i] * 4 + list(range(i * 100, i * 100 + 20)))
    assert 0 < len(memory) < 10
    assert memory.lookup([1009] * 4, 3) == ([900, 901, 902], 4)  # the newest is kept
    assert memory.lookup([1000] * 4, 3) == ([], 0)  # the oldest is gone
    memory.add([1, 2], [])  # an empty reply is not kept
    n = len(memory)
    memory.clear()
    assert len(memory) == 0 and n > 0 and memory.lookup([1009] * 4, 3) == ([], 0)


def test_a_reply_given_again_wins_over_a_shorter_copy_in_the_text() -> None:
    # Both match 16 tokens or more: the text so far 18 (a stretch seen before, then 99), the
    # earlier reply 26 (the end of its prompt and the reply so far). Matches are followed back
    # far enough to tell them apart, and the longer one drafts.
    memory = ReplyMemory()
    prompt, reply = list(range(600, 640)), list(range(500, 540))
    memory.add(prompt, reply)
    ctx = [*prompt[-8:], *reply[:10], 99, *prompt, *reply[:10]]
    d = NgramDrafter(memory=memory)
    d.begin(ctx[:-10])
    assert d.lookup(ctx, 4) == ([99, *prompt[:3]], 18)
    assert d.offer(ctx, 4) == (reply[10:14], 7)


def test_a_short_match_drafts_what_followed_it_most_often() -> None:
    # "a b" was followed by "c" twice, then once by "x": what follows it now is most likely "c".
    a, b, c, x = 1, 2, 3, 9
    d = NgramDrafter()
    ctx = [a, b, c, 5, a, b, c, 6, a, b, x, 7, a, b]
    d.begin(ctx[:1])
    tokens, n = d.lookup(ctx, 3)
    assert n == 2 and tokens == [c, 6, a]  # not [x, 7, a], what followed it last
    # Once it mostly follows otherwise, the latest continuation is drafted.
    ctx2 = [a, b, c, 5, a, b, x, 6, a, b, x, 7, a, b]
    d2 = NgramDrafter()
    d2.begin(ctx2[:1])
    assert d2.lookup(ctx2, 2) == ([x, 7], 2)
    # A long match (text being copied, a loop) drafts what followed it last, whatever came before.
    ctx3 = [*range(20, 30), c, *range(20, 30), x, *range(20, 30)]
    d3 = NgramDrafter()
    d3.begin(ctx3[:1])
    assert d3.lookup(ctx3, 1)[0] == [x]


def test_a_draft_model_drafts_while_it_is_sure_and_stops_at_its_first_doubt(tiny_draft: Path) -> None:
    # Along the draft model's own greedy path, the softmax probability of each top token.
    runner = LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1)
    ctx = runner.tokenize("the quick brown fox", add_special=True)
    path, sureness = [], []
    logits = runner.decode(ctx, n_logits=1)[0]
    for _ in range(12):
        token = int(np.argmax(logits))
        shifted = logits.astype(np.float64) - logits[token]
        sureness.append(float(1.0 / np.exp(shifted).sum()))
        path.append(token)
        logits = runner.decode([token], n_logits=1)[0]
    runner.close()
    # Every threshold halfway between two of those values: the draft ends at the first below it.
    order = sorted(sureness)
    thresholds = [(a + b) / 2 for a, b in zip(order, order[1:]) if b - a > 1e-3]
    assert len(thresholds) >= 6
    drafter = ModelDrafter(lambda: LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1))
    try:
        for p_min in thresholds:
            drafter.p_min = p_min
            cut = next((j for j, s in enumerate(sureness) if s < p_min), len(path))
            draft = drafter.propose(ctx, 12, SamplingParams(), np.random.default_rng(0))
            assert draft.tokens == path[:cut], p_min
    finally:
        drafter.close()
