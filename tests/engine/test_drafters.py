"""The drafters: what the n-gram drafter proposes and how long a match it reports (its acceptance
kind); where a draft model stops drafting."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.backend import LlamaRunner
from engine.config import SamplingParams
from engine.drafters import Confidence, ModelDrafter, NgramDrafter
from engine.events import DraftSource
from engine.kinds import DrafterKind
from engine.text_index import TextIndex


def test_the_latest_earlier_match_proposes_what_followed_it() -> None:
    d = NgramDrafter()
    ctx = [1, 2, 3, 9, 9, 1, 2, 3, 7, 7, 5, 1, 2, 3]
    d.begin(ctx)
    draft, match_len = d.lookup(ctx, 4)
    assert draft == [7, 7, 5, 1] and match_len == 3  # the later [1, 2, 3], not the first
    assert NgramDrafter.kind_of(match_len) == 3


def test_copying_is_told_from_a_recurring_phrase() -> None:
    # A phrase of 8 tokens seen before (max_ngram) in fresh text, and the same 8 tokens at the
    # end of a 30-token stretch being copied: the lookup reports how far the match really goes,
    # so their acceptance is kept apart (kinds 4 and 5).
    phrase = list(range(100, 108))
    prompt = [1, 2, *phrase, 50, 51]
    fresh = [*prompt, 60, 61, *phrase]  # the reply: 60, 61, then the phrase again
    d = NgramDrafter()
    d.begin(prompt)
    draft, match_len = d.lookup(fresh, 8)
    assert draft[:2] == [50, 51] and match_len == 8 and NgramDrafter.kind_of(match_len) == 4
    source = list(range(200, 230)) + phrase + [70, 71, 72]
    copy = [*source, 0, *source[: len(source) - 3]]
    d = NgramDrafter()
    d.begin(copy[: len(source) + 1])
    draft, match_len = d.lookup(copy, 8)
    assert draft == [70, 71, 72, 0, 200, 201, 202, 203]
    assert match_len == len(source) - 3 and NgramDrafter.kind_of(match_len) == 5  # followed back all the way
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
    assert draft == source[3:7] and NgramDrafter.kind_of(match_len) < 5  # too short to tell
    reply = prompt + source[:5]
    assert NgramDrafter.kind_of(d.lookup(reply, 4)[1]) == 5
    # The same 5 tokens in the middle of a reply (after other text) are a recurring phrase.
    reply = [*prompt, 90, 91, 92, *source[:5]]
    assert NgramDrafter.kind_of(d.lookup(reply, 4)[1]) == 4


def test_before_a_replys_first_token_a_match_of_the_prompts_end_is_not_a_copy() -> None:
    # A chat template's turn (the prompt's last 5 tokens) seen earlier in the prompt: before the
    # reply has said anything, that match says nothing of a copy (the JSON edit held out of the
    # copy set: such a first draft was rejected at its first token, and the reply counted its copy
    # as broken). Its first token copying the document makes it one.
    turn = [7, 8, 9, 10, 11]
    source = list(range(200, 240))
    prompt = [*turn, 1, 2, *source, 3, *turn]
    d = NgramDrafter()
    d.begin(prompt)
    assert NgramDrafter.kind_of(d.lookup(prompt, 4)[1]) == 4
    reply = [*prompt, *source[:1]]
    assert NgramDrafter.kind_of(d.lookup(reply, 4)[1]) < 5  # 1 token: a match like any other
    reply = [*prompt, *source[:4]]
    assert NgramDrafter.kind_of(d.lookup(reply, 4)[1]) == 5  # all of the reply continues the source


def test_a_reply_that_goes_on_copying_where_its_prompt_began_is_copying() -> None:
    # The prompt itself starts the copy (its last 6 tokens are the source's first); the reply's
    # first 3 tokens go on with it: 9 tokens matched, all of the reply among them.
    source = list(range(200, 240))
    prompt = [1, 2, 3, *source, 4, 5, *source[:6]]
    d = NgramDrafter()
    d.begin(prompt)
    draft, match_len = d.lookup(prompt + source[6:9], 4)
    assert draft == source[9:13] and NgramDrafter.kind_of(match_len) == 5


def test_an_earlier_reply_is_drafted_from_the_first_token_of_its_regenerate() -> None:
    memory = TextIndex()
    prompt = list(range(300, 340))
    reply = list(range(500, 530))
    memory.add(prompt, reply)
    d = NgramDrafter(memory)
    d.begin(list(prompt))
    draft, kind = d.offer(list(prompt), 8)
    assert draft == reply[:8] and kind == DrafterKind.MEMORY_COPY  # the whole prompt matched
    assert d.offer_source is DraftSource.MEMORY
    # Halfway through, the continuation stops at the end of that reply, never in the next one.
    memory.add([1, 2, 3], [7, 7, 7, 7, 7, 7])
    ctx = [*prompt, *reply[:26]]
    d.begin(list(prompt))
    assert d.offer(ctx, 8) == (reply[26:], DrafterKind.MEMORY_COPY)
    # Asked not to (Compare), the drafter does not look there, and leaves nothing behind.
    n_segments = len(memory)
    d.begin(list(prompt), use_memory=False)
    assert d.offer(ctx, 8)[0] != reply[26:]
    assert len(memory) == n_segments


def test_the_text_so_far_wins_over_an_earlier_reply_that_matches_as_long() -> None:
    memory = TextIndex()
    memory.add([9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 40, 41])
    d = NgramDrafter(memory)
    ctx = [1, 2, 3, 4, 5, 6, 30, 31, 0, 1, 2, 3, 4, 5, 6]
    d.begin(ctx[:8])  # the reply: 0, then the phrase
    draft, kind = d.offer(ctx, 2)
    assert draft == [30, 31] and kind == DrafterKind.PHRASE  # 6 tokens matched: the latest is the text's
    # A short match in the text loses to a longer one in an earlier reply.
    memory = TextIndex()
    memory.add([9, 9, 9, 9], [1, 2, 3, 4, 5, 6, 40, 41])
    d = NgramDrafter(memory)
    ctx = [8, 3, 4, 5, 6, 30, 1, 2, 3, 4, 5, 6]
    d.begin(ctx[:6])
    assert d.offer(ctx, 2)[0] == [40, 41] and d.offer_source is DraftSource.MEMORY


def test_the_index_keeps_the_latest_text_within_its_bound() -> None:
    memory = TextIndex(window=64)
    for i in range(10):
        memory.add([], [1000 + i] * 4 + list(range(i * 100, i * 100 + 20)))
    assert memory.n_tokens <= 3 * 64 and len(memory) == 10
    d = NgramDrafter(memory)
    d.begin([5, 1009, 1009, 1009, 1009])
    assert d.lookup([5, 1009, 1009, 1009, 1009], 3)[0] == [900, 901, 902]  # the newest is kept
    d.begin([5, 1000, 1000, 1000, 1000])
    assert d.lookup([5, 1000, 1000, 1000, 1000], 3)[0] != [0, 1, 2]  # the oldest is gone
    memory.add([1, 2], [])  # an empty reply is not kept
    memory.clear()
    assert len(memory) == 0 and memory.n_tokens == 0


def test_a_reply_given_again_wins_over_a_shorter_copy_in_the_text() -> None:
    # Both match 16 tokens or more: the text so far 18 (a stretch seen before, then 99), the
    # earlier reply with its whole prompt. The longer match drafts, however far back it began.
    memory = TextIndex()
    prompt, reply = list(range(600, 640)), list(range(500, 540))
    memory.add(prompt, reply)
    ctx = [*prompt[-8:], *reply[:10], 99, *prompt, *reply[:10]]
    d = NgramDrafter(memory)
    d.begin(ctx[:-10])
    assert d.offer(ctx, 4) == (reply[10:14], DrafterKind.MEMORY_COPY)
    assert d.match_len == len(prompt) + 10


def test_the_longest_earlier_context_drafts_not_the_latest_occurrence_of_the_last_tokens() -> None:
    # Code repeats itself: a 12-token stretch once in full (then 50, 51), then its last 8 tokens
    # again (then 60, 61). The text now ends with the full stretch: the latest occurrence of its
    # last 8 tokens (what a fixed n-gram key finds) continues 60, 61; the longest earlier context
    # (12 tokens) continues 50, 51.
    stretch = list(range(30, 42))
    ctx = [7, *stretch, 50, 51, 8, *stretch[4:], 60, 61, 9, *stretch]
    d = NgramDrafter()
    d.begin(ctx[:1])
    assert d.lookup(ctx, 2) == ([50, 51], 12)


def test_where_several_continuations_follow_the_same_context_the_latest_drafts() -> None:
    a, b, c, x = 1, 2, 3, 9
    ctx = [a, b, c, 5, a, b, c, 6, a, b, x, 7, a, b]
    d = NgramDrafter()
    d.begin(ctx[:1])
    assert d.lookup(ctx, 2) == ([x, 7], 2)
    # A long match (text being copied, a loop) drafts what followed it last.
    ctx3 = [*range(20, 30), c, *range(20, 30), x, *range(20, 30)]
    d3 = NgramDrafter()
    d3.begin(ctx3[:1])
    assert d3.lookup(ctx3, 1)[0] == [x]


def test_a_long_history_is_held_within_the_index_bound() -> None:
    # The index over 100,000 tokens holds a bounded window (two automata of at most 2 x and 1 x
    # the window), and a copy from within the window is still found whole (figures at a million
    # tokens, per step: docs/design-engine.md).
    rng = np.random.default_rng(0)
    memory = TextIndex(window=4096)
    ctx = [int(t) for t in rng.integers(0, 500, 100_000)]
    d = NgramDrafter(memory)
    d.begin(ctx)
    n_states = sum(len(sam.length) for sam in (memory._sam, memory._young) if sam is not None)
    assert memory.n_tokens <= 2 * 4096 + 1 and n_states <= 2 * 3 * 4096
    p = len(ctx) - 3000
    copied = ctx[p : p + 20]
    ctx += copied  # copying 20 tokens from 3,000 back
    tokens, n = d.lookup(ctx, 4)
    assert n >= 20 and tokens == ctx[p + 20 : p + 24]


def test_a_draft_model_stops_before_a_confidence_its_target_has_been_seen_to_reject(tiny_draft: Path) -> None:
    # Nothing learned yet: every confidence is priced at the draft's acceptance overall, so the
    # draft runs as far as the controller chose. Once the target has rejected this draft's
    # tokens of one confidence bin, the draft stops before its first token of that bin, and
    # keeps the token it would have drafted (what the target says next judges it, for nothing).
    drafter = ModelDrafter(lambda cancel: LlamaRunner(str(tiny_draft), n_ctx=256, n_threads=1, cancel=cancel))
    greedy_params, rng = SamplingParams(), np.random.default_rng(0)
    try:
        prompt = drafter_prompt = [2, 17, 33, 41, 5]
        whole = drafter.propose(list(prompt), 10, greedy_params, rng, acceptance=0.9)
        assert len(whole.tokens) == 10 and whole.bins is not None and len(whole.bins) == 10
        assert whole.stopped is None
        j = 3
        doubted = whole.bins[j]
        for _ in range(40):
            drafter.confidence.learn(doubted, False)
        assert drafter.confidence.rate(doubted, 0.9) < 0.1
        ctx = list(drafter_prompt)
        cut = drafter.propose(ctx, 10, greedy_params, rng, acceptance=0.9)
        first = whole.bins.index(doubted)
        assert cut.tokens == whole.tokens[:first]
        assert cut.stopped == (whole.tokens[first], doubted)
        # The target kept the draft and then said the token the draft stopped before: that
        # confidence was right this time, learned at the next proposal.
        before = drafter.confidence.rate(doubted, 0.9)
        ctx += [*cut.tokens, whole.tokens[first]]
        drafter.propose(ctx, 1, greedy_params, rng, acceptance=0.9)
        assert drafter.confidence.rate(doubted, 0.9) > before
        # No acceptance told (a fixed draft length): the draft runs its k whatever it learned.
        assert len(drafter.propose(list(prompt), 10, greedy_params, rng).tokens) == 10
    finally:
        drafter.close()


def test_a_draft_models_confidence_learns_only_up_to_the_first_rejection() -> None:
    c = Confidence()
    assert c.rate(0, 0.8) == c.rate(3, 0.8) == 0.8  # nothing seen: the overall acceptance
    drafter = ModelDrafter(lambda: None)  # type: ignore[arg-type,return-value]
    from engine.drafters import Draft

    ctx = [1, 2, 3]
    drafter._pending = (ctx, 3, Draft([7, 8, 9], bins=[3, 2, 1], stopped=(4, 0)))
    ctx += [7, 5, 6]  # the target kept 7, said 5 where the draft said 8
    drafter.review(ctx)
    conf = drafter.confidence
    assert conf.rate(3, 0.5) > 0.5 and conf.rate(2, 0.5) < 0.5
    assert conf.rate(1, 0.5) == conf.rate(0, 0.5) == 0.5  # after the rejection: nothing known


def test_text_that_repeats_itself_is_drafted_on_past_its_end() -> None:
    # A loop of period 3: the longest earlier context is the latest occurrence, whose continuation
    # runs to the text's end (2 tokens); the repetition is drafted on as far as asked.
    ctx = [5, 6, *[1, 2, 3] * 4]
    d = NgramDrafter()
    d.begin(ctx[:1])
    assert d.lookup(ctx, 10) == ([1, 2, 3, 1, 2, 3, 1, 2, 3, 1], 9)
    # A short match whose continuation reaches the end without a whole period agreeing is no loop.
    ctx2 = [1, 2, 9, 8, 7, 1, 2]
    d2 = NgramDrafter()
    d2.begin(ctx2[:1])
    assert d2.lookup(ctx2, 10) == ([9, 8, 7, 1, 2], 2)


def test_a_decode_of_more_logit_rows_than_any_before_is_told(tiny_target: Path) -> None:
    runner = LlamaRunner(str(tiny_target), n_ctx=256, n_threads=1)
    try:
        runner.decode([1, 2, 3, 4], n_logits=0)
        assert not runner.outputs_grew
        runner.decode([5, 6, 7], n_logits=3)
        assert runner.outputs_grew
        runner.truncate(4)
        runner.decode([5, 6], n_logits=2)
        assert not runner.outputs_grew  # the buffer holds 3 rows already
        runner.decode([8, 9, 10, 11], n_logits=4)
        assert runner.outputs_grew
    finally:
        runner.close()


def test_a_copy_an_edit_broke_is_resumed_where_its_source_went_on() -> None:
    # A document copied for 40 tokens, 2 of its tokens replaced by 3 others (an edit), then copied
    # on: the match after the edit is 2-15 tokens long, yet it continues the copy's own source
    # just past the edit, so it is offered as that copy at its age (engine.policy._RESUME_SLACK),
    # not as a short match in fresh text.
    from engine.adaptive import DraftLengthController
    from engine.policy import DraftPolicy
    from engine.replay import _matched

    source = list(range(200, 300))
    prompt = [1, 2, *source, 3, 4]
    reply = [*source[:40], 90, 91, 92, *source[42:80]]
    controller = DraftLengthController(k_max=63)
    controller.seed({"step_s": {str(n): 0.01 + 0.0001 * n for n in (1, 2, 4, 8, 16, 32, 64)}})
    policy = DraftPolicy(controller, NgramDrafter())
    policy.begin_reply(speculate=True, use_memory=False)
    ctx = list(prompt)
    policy.start(ctx)
    steps = []
    pos, rng = 0, np.random.default_rng(0)
    while pos < len(reply):
        proposal = policy.propose(ctx, len(reply) - pos, SamplingParams(), rng)
        n = _matched(proposal.tokens, tuple(reply), pos)
        steps.append((pos, proposal.kind, len(proposal.tokens)))
        policy.learn(proposal, n, reply[pos], 0.01)
        ctx.extend(reply[pos : pos + n + 1])
        pos += n + 1
    # The edit ends at reply position 43; from 45 on the match holds 2 tokens or more of the source.
    after = [(p, kind) for p, kind, k in steps if 45 <= p < 43 + NgramDrafter.COPY_MATCH and k > 0]
    assert after and all(kind is DrafterKind.COPY for _, kind in after), steps


def test_a_copy_drafts_its_rename_again_where_the_renamed_tokens_recur() -> None:
    # A document naming something twice (tokens 50, 51), copied with the name changed (60): once
    # the copy has run on past the first change, the draft at the second carries the new name.
    a, b, c = list(range(100, 110)), list(range(200, 210)), list(range(300, 320))
    document = [*a, 50, 51, *b, 50, 51, *c]
    reply = [*a, 60, *b, 60, *c]
    d = NgramDrafter()
    ctx = [1, 2, 3, *document, 4, 5]
    d.begin(ctx)
    at_second = len(a) + 1 + len(b) - 3  # three tokens before the second mention
    for token in reply[:at_second]:
        d.lookup(ctx, 16)
        ctx.append(token)
    tokens, _ = d.lookup(ctx, 16)
    assert tokens == [*b[-3:], 60, *c[:11]]  # (the source's 16 tokens, two of them now one)
    assert d.edits == [((50, 51), (60,))]
    # Not where a document's tokens were copied as they are: nothing is learned, nothing changed.
    plain = NgramDrafter()
    ctx = [1, 2, 3, *document, 4, 5]
    plain.begin(ctx)
    for token in document[: len(a) + 2 + len(b) - 3]:
        plain.lookup(ctx, 16)
        ctx.append(token)
    assert plain.lookup(ctx, 16)[0] == [*b[-3:], 50, 51, *c[:11]] and not plain.edits


def test_a_copy_keeps_its_latest_edits_only() -> None:
    # Twenty words each written otherwise in a copy: the latest EDITS_MAX edits are kept (each is
    # looked for in every continuation, a cost every step).
    fillers = [list(range(1000 + 10 * i, 1006 + 10 * i)) for i in range(20)]
    document = [t for i, f in enumerate(fillers) for t in (500 + i, *f)]
    reply = [t for i, f in enumerate(fillers) for t in (700 + i, *f)]
    d = NgramDrafter()
    ctx = [1, 2, *document, 3]
    d.begin(ctx)
    for token in reply:
        d.lookup(ctx, 16)
        ctx.append(token)
    d.lookup(ctx, 16)
    assert len(d.edits) == NgramDrafter.EDITS_MAX
    assert d.edits[-1] == ((519,), (719,)) and d.edits[0] == (
        (500 + 20 - NgramDrafter.EDITS_MAX,),
        (700 + 20 - NgramDrafter.EDITS_MAX,),
    )
