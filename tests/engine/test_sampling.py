"""Speculative sampling emits exactly the target's distribution (chi-square tests with power checks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chisquare

from engine.backend import LlamaRunner
from engine.chat import CHAT_SAMPLING
from engine.config import DraftChoice, EngineConfig, SamplingParams
from engine.events import Finished
from engine.sampling import Dist, accept_draft, distribution, penalize, top_k_ids
from engine.session import Engine

ALPHA = 1e-3  # significance level of every goodness-of-fit test here


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    big = expected >= 5  # pool the rare cells, as the test requires
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(chisquare(obs, exp).pvalue)


P = Dist(np.arange(6), np.array([0.35, 0.25, 0.15, 0.12, 0.08, 0.05]))
Q = Dist(np.arange(6), np.array([0.10, 0.40, 0.05, 0.25, 0.15, 0.05]))
N = 40_000


def speculative_samples(rule, n: int = N, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(6)
    for _ in range(n):
        token = Q.sample(rng)  # the draft samples from q
        ok, correction = rule(P, token, Q, rng)
        counts[token if ok else correction] += 1
    return counts


def test_accept_rule_reproduces_target_distribution() -> None:
    assert chi2_pvalue(speculative_samples(accept_draft), P.probs) > ALPHA


def test_the_test_catches_a_five_percent_bias() -> None:
    biased = 0.95 * P.probs + 0.05 * Q.probs
    counts = np.bincount(np.random.default_rng(1).choice(6, size=N, p=biased), minlength=6)
    assert chi2_pvalue(counts.astype(float), P.probs) < ALPHA


def test_the_test_catches_a_wrong_residual() -> None:
    def wrong_rule(p: Dist, token: int, q: Dist, rng: np.random.Generator):
        if rng.random() < min(1.0, p.prob(token) / q.prob(token)):
            return True, None
        return False, p.sample(rng)  # should sample max(0, p - q), not p

    assert chi2_pvalue(speculative_samples(wrong_rule), P.probs) < ALPHA


def test_keyed_sampling_follows_the_distribution() -> None:
    counts = np.zeros(6)
    for seed in range(N):
        counts[P.sample_keyed(seed, 17)] += 1
    assert chi2_pvalue(counts, P.probs) > ALPHA
    assert P.sample_keyed(5, 3) == P.sample_keyed(5, 3)


def test_filters_apply_in_order() -> None:
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    d = distribution(logits, [], SamplingParams(temperature=1.0, top_k=4, top_p=0.8, min_p=0.0))
    assert list(d.ids) == [0, 1, 2]  # top-k 4, then the smallest prefix reaching 0.8
    np.testing.assert_allclose(d.probs, np.array([0.5, 0.2, 0.15]) / 0.85, rtol=1e-5)
    d = distribution(logits, [], SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.35))
    assert list(d.ids) == [0, 1]  # min-p keeps tokens at least 0.35 x the top probability
    d = distribution(
        logits, [0], SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=10.0)
    )
    assert d.ids[0] == 1  # token 0 was penalised below token 1


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=1.5, top_k=6, top_p=1.0, min_p=0.0), CHAT_SAMPLING],
    ids=["hot-top-6", "chat-defaults"],
)
# slow: thousands of sampled replies (a few seconds a case on one thread), no process.
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sampled-draft", "ngram"])
def test_speculative_generation_matches_plain_distribution(
    tiny_target: Path, tiny_draft: Path, mode: str, params: SamplingParams
) -> None:
    """Second-token marginal of real speculative generations against the exact target marginal
    (with the window's chat defaults too: top-p, min-p and the repetition penalty)."""
    prompt = "the cat sat on the mat. the cat"
    draft = str(tiny_draft) if mode == "sampled-draft" else "ngram"
    engine = Engine(
        EngineConfig(
            str(tiny_target),
            draft=DraftChoice.parse(draft),
            n_ctx=256,
            n_threads=1,  # two spinning threads on two shared cores: 10-20 ms a step, not 0.4
            draft_max=3,
            adaptive=False,
        )
    )
    tokens = engine.tokenize(prompt)
    if mode == "ngram":
        # A prompt whose n-gram continuation the model finds plausible: its own greedy text,
        # then the start of the prompt again, so the lookup proposes what followed before.
        greedy = list(engine.generate(tokens, max_tokens=30))[-1]
        assert isinstance(greedy, Finished)
        tokens = tokens + list(greedy.token_ids) + tokens[1:] + list(greedy.token_ids[:3])

    # The exact marginal of the second generated token: sum over t1 of p(t1) p(t2 | t1).
    runner = LlamaRunner(str(tiny_target), n_ctx=256, n_threads=1)
    exact: dict[int, float] = {}
    first = distribution(runner.decode(tokens, 1)[0].copy(), tokens, params)
    for t1, p1 in zip(first.ids, first.probs):
        second = distribution(runner.decode([int(t1)], 1)[0].copy(), tokens + [int(t1)], params)
        runner.truncate(len(tokens))
        for t2, p2 in zip(second.ids, second.probs):
            exact[int(t2)] = exact.get(int(t2), 0.0) + p1 * p2
    runner.close()

    ids = sorted(exact)
    counts = np.zeros(len(ids) + 1)  # last cell: tokens outside the exact support (must stay 0)
    n_drafted = n_accepted = 0
    try:
        for seed in range(3000):
            result = None
            for event in engine.generate(
                tokens, SamplingParams(**{**params.__dict__, "seed": seed}), max_tokens=2
            ):
                if isinstance(event, Finished):
                    result = event
            assert result is not None and len(result.token_ids) == 2
            t2 = result.token_ids[1]
            counts[ids.index(t2) if t2 in exact else -1] += 1
            n_drafted += result.stats.n_drafted
            n_accepted += result.stats.n_accepted
    finally:
        engine.close()
    assert counts[-1] == 0
    assert n_drafted > 0 and 0 < n_accepted < n_drafted  # both rules' branches ran
    assert chi2_pvalue(counts[:-1], np.array([exact[i] for i in ids])) > ALPHA


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(repeat_penalty=1.1, repeat_last_n=64),  # greedy with the repetition penalty
        SamplingParams(**{**CHAT_SAMPLING.__dict__, "seed": 11}),  # the window's defaults, seeded
    ],
    ids=["greedy-penalty", "chat-defaults"],
)
@pytest.mark.parametrize("mode", ["ngram", "greedy-draft"])
def test_deterministic_drafts_write_the_plain_text_under_chat_settings(
    tiny_target: Path, tiny_draft: Path, mode: str, params: SamplingParams
) -> None:
    """n-gram drafts and a greedy draft model are checked with the target's own (keyed) choice,
    repetition penalty included: the text is token for token what plain decoding writes."""
    draft = "ngram" if mode == "ngram" else str(tiny_draft)
    engine = Engine(
        EngineConfig(
            str(tiny_target),
            draft=DraftChoice.parse(draft),
            n_ctx=512,
            n_threads=1,
            draft_max=6,
            adaptive=False,
            draft_sampling=False,
        )
    )
    prompt = "the cat sat on the mat. the cat sat on the mat. the cat"
    try:
        plain = [e for e in engine.generate(prompt, params, max_tokens=80, speculate=False)][-1]
        fast = [e for e in engine.generate(prompt, params, max_tokens=80)][-1]
        unpenalized = [
            e
            for e in engine.generate(
                prompt,
                SamplingParams(**{**params.__dict__, "repeat_penalty": 1.0}),
                max_tokens=80,
                speculate=False,
            )
        ][-1]
    finally:
        engine.close()
    assert isinstance(plain, Finished) and isinstance(fast, Finished) and isinstance(unpenalized, Finished)
    assert fast.stats.n_drafted > 0 and fast.stats.n_accepted > 0
    assert fast.token_ids == plain.token_ids
    assert unpenalized.token_ids != plain.token_ids  # the penalty was applied, and changed the text


def test_the_repetition_penalty_spares_exempt_tokens() -> None:
    logits = np.array([2.0, 2.0, -1.0, 3.0], dtype=np.float32)
    params = SamplingParams(repeat_penalty=2.0)
    assert penalize(logits, [0, 1, 2], params).tolist() == [1.0, 1.0, -2.0, 3.0]
    spared = SamplingParams(repeat_penalty=2.0, penalty_exempt=frozenset({1, 2}))
    assert penalize(logits, [0, 1, 2], spared).tolist() == [1.0, 2.0, -1.0, 3.0]


def test_the_engine_spares_line_breaks_and_speaker_names(tiny_target: Path) -> None:
    from engine.session import Engine

    engine = Engine(EngineConfig(str(tiny_target), n_ctx=256, n_threads=1))
    try:
        exempt = engine.penalty_exempt_tokens
        assert set(engine.tokenize("\nUser:", add_special=False)) <= exempt
        assert set(engine.tokenize("\n", add_special=False)) <= exempt
        assert not set(engine.tokenize("mountain", add_special=False)) <= exempt
    finally:
        engine.close()


@pytest.mark.parametrize("spread", [0.5, 2.0, 8.0, 30.0])
def test_top_k_ids_are_exactly_the_k_largest(spread: float) -> None:
    # Whether few or many logits lie near the maximum (the fast path partitions only those).
    rng = np.random.default_rng(int(spread * 10))
    for _ in range(20):
        logits = (rng.standard_normal(20_000) * spread).astype(np.float32)
        for k in (1, 7, 40, 500):
            expected = np.sort(logits[np.argpartition(logits, -k)[-k:]])
            ids = top_k_ids(logits, k)
            assert len(ids) == len(set(ids.tolist())) == k
            assert (np.sort(logits[ids]) == expected).all()


@pytest.mark.parametrize("repeat_penalty", [1.1, 1.5, 0.8])
def test_the_penalised_distribution_is_the_one_of_the_penalised_row(repeat_penalty: float) -> None:
    # Recent tokens at the top that the penalty pushes out of the top-k or keeps in it, positive
    # and negative logits, a penalty that raises them: the top-k of the penalised row, its softmax.
    rng = np.random.default_rng(11)
    for trial in range(40):
        logits = (rng.standard_normal(4096) * 3.0).astype(np.float32)
        top = np.argsort(-logits)
        history = [int(t) for t in rng.choice(top[:60], size=30)] + [
            int(t) for t in rng.integers(0, 4096, 30)
        ]
        if trial % 4 == 0:
            logits -= 20.0  # every logit negative: the penalty multiplies
        params = SamplingParams(
            temperature=0.7, top_k=40, top_p=1.0, min_p=0.0, repeat_penalty=repeat_penalty
        )
        got = distribution(logits, history, params)
        penalised = penalize(logits, history, params).astype(np.float64)
        want_ids = np.argsort(-penalised, kind="stable")[:40]
        assert sorted(got.ids.tolist()) == sorted(want_ids.tolist())
        want = np.exp((penalised[got.ids] - penalised[got.ids].max()) / 0.7)
        assert got.probs == pytest.approx(want / want.sum(), rel=1e-9)
