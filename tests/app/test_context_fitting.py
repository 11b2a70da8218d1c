"""Fitting a long conversation to the context is linear in the conversation and can be stopped
(issue 28, item 5). The work is counted (characters tokenized, prompts rendered), never timed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.host.messages import ChatTurn, LoadRequest, ReplyEvents, ReplyRequest
from app.host.worker import WorkerProcess
from engine.chat import PromptCancelled, TokenCounts, build_chat_prompt, chat_prompt
from engine.config import PLAIN_DECODING, EngineConfig
from tests.waiting import wait_until


class CountingEngine:
    """A stand-in tokenizer (4 characters a token) that counts the work asked of it."""

    has_chat_template = False

    def __init__(self, n_ctx: int = 4096) -> None:
        self.n_ctx = n_ctx
        self.n_calls = 0
        self.n_chars = 0
        self.on_call: Any = None

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        self.n_calls += 1
        self.n_chars += len(text)
        if self.on_call is not None:
            self.on_call(self.n_calls)
        return [0] * (len(text) // 4 + (1 if add_special else 0))


def conversation(n_pairs: int, chars: int = 2000) -> tuple[ChatTurn, ...]:
    turns: list[ChatTurn] = []
    for i in range(n_pairs):
        turns.append(ChatTurn("user", f"question {i} " + "x" * chars))
        turns.append(ChatTurn("assistant", f"answer {i} " + "y" * chars))
    return (*turns, ChatTurn("user", "and now?"))


def size(turns: tuple[ChatTurn, ...]) -> int:
    return sum(len(t.content) for t in turns)


def test_a_long_conversation_is_fitted_with_linear_work() -> None:
    """The review's drill: 2,001 messages of 2,000 characters (4 MB) into 4,096 tokens. It used
    to re-render and re-tokenize the rest once per dropped pair: ~1,000 calls, ~2 G characters."""
    engine = CountingEngine()
    turns = conversation(1000)
    prompt = build_chat_prompt(engine, turns, "", 512)
    assert prompt.n_tokens + 512 <= engine.n_ctx
    assert prompt.n_tokens > engine.n_ctx // 4  # not cut more than needed
    assert engine.n_chars < 2 * size(turns), f"{engine.n_chars:,} characters tokenized for {size(turns):,}"
    assert engine.n_calls < len(turns) + 10


def test_the_next_turn_counts_only_the_new_messages() -> None:
    engine = CountingEngine()
    counts = TokenCounts()
    turns = conversation(1000)
    first = build_chat_prompt(engine, turns, "", 512, token_counts=counts)
    engine.n_chars = 0
    more = (*turns, ChatTurn("assistant", "an answer " + "z" * 2000), ChatTurn("user", "next?"))
    second = build_chat_prompt(engine, more, "", 512, first.n_dropped, token_counts=counts)
    assert second.n_dropped >= first.n_dropped
    assert engine.n_chars < 10 * engine.n_ctx * 4, "only the new messages and what is kept are read"


def _stepwise(engine: CountingEngine, turns: tuple[ChatTurn, ...], max_tokens: int) -> int:
    """The cut as the one-pair-at-a-time loop chose it (the reference, quadratic)."""
    n_ctx, reserve = engine.n_ctx, min(max_tokens, engine.n_ctx // 2)
    n_dropped = 0
    n = len(engine.tokenize(chat_prompt(engine, turns)))
    if n + reserve <= n_ctx:
        return 0
    while n > n_ctx - reserve - n_ctx // 4:
        cuts = [i for i in range(n_dropped + 1, len(turns)) if turns[i].role == "user"]
        if not cuts:
            break
        n_dropped = cuts[0]
        n = len(engine.tokenize(chat_prompt(engine, turns[n_dropped:])))
    return n_dropped


@pytest.mark.parametrize(("n_pairs", "chars"), [(3, 100), (30, 700), (200, 300), (60, 3000)])
def test_the_cut_is_where_the_stepwise_loop_put_it(n_pairs: int, chars: int) -> None:
    turns = conversation(n_pairs, chars)
    expected = _stepwise(CountingEngine(), turns, 512)
    got = build_chat_prompt(CountingEngine(), turns, "", 512).n_dropped
    assert expected <= got <= expected + 2  # at most one pair more


def test_a_stop_while_fitting_ends_it() -> None:
    engine = CountingEngine()
    stop = threading.Event()
    engine.on_call = lambda n: stop.set() if n == 300 else None  # Stop pressed mid-way
    with pytest.raises(PromptCancelled):
        build_chat_prompt(engine, conversation(1000), "", 512, cancel=stop)
    assert engine.n_calls < 300 + 64


def test_a_reply_stopped_while_its_long_conversation_is_fitted_ends_cancelled(
    tmp_path: Path, tiny_target: Path
) -> None:
    """A real worker: a 4 MB conversation, stopped at once; the next reply comes as usual."""
    seen: list[object] = []
    worker = WorkerProcess(seen.append, log_path=tmp_path / "worker.log")
    worker.start()
    try:
        worker.send(
            LoadRequest(EngineConfig(str(tiny_target), n_ctx=2048, n_threads=1, draft=PLAIN_DECODING))
        )
        worker.send(ReplyRequest(1, conversation(1000), max_tokens=16))
        worker.cancel(1)
        worker.send(ReplyRequest(2, conversation(1, 20), max_tokens=4))

        def finished(request_id: int) -> Any:
            for m in list(seen):
                if isinstance(m, ReplyEvents) and m.request_id == request_id and m.finished is not None:
                    return m.finished
            return None

        wait_until(lambda: finished(2) is not None, 120, "the second reply")
        assert finished(1).stop_reason == "cancelled" and finished(1).text == ""
        assert finished(2).stop_reason != "cancelled"
    finally:
        worker.shutdown()
