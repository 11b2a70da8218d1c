"""A newcomer's first conversation: the real window, a fresh home folder, the embedded Gemma 3 270M
in a real worker process. Replies end by themselves, speak only for the assistant, do not repeat
the request back and do not loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.store import Store
from tests.app.test_chat import find_speaker_line, repeated_phrase

pytestmark = pytest.mark.gemma

REQUESTS = ("What is the capital of France?", "Write two sentences about mountains.", "Describe a cat.")


def _messages(window):  # type: ignore[no-untyped-def]
    store = Store()
    try:
        return store.messages(window.presenter.conversation_id)
    finally:
        store.close()


def test_first_conversation_on_the_embedded_model(open_window, wait_reply, gemma_q4: Path, qtbot) -> None:
    # Greedy (the chat defaults' repetition penalty kept) so the test is repeatable; the chat
    # defaults themselves are tested with fixed seeds in test_chat.py.
    window = open_window(gemma_q4, draft="ngram", temperature=0.0)
    assert window.welcome is not None and window.welcome.isVisible()  # a fresh home: first start
    for request in REQUESTS:
        window.presenter.send(request)
        wait_reply(window, timeout_ms=120_000)
    messages = _messages(window)
    assert [m.role for m in messages] == ["user", "assistant"] * len(REQUESTS)
    for request, reply in zip(REQUESTS, messages[1::2], strict=True):
        context = f"{request!r} -> {reply.content!r}"
        assert reply.status == "complete" and reply.stats is not None, context
        assert reply.stats["stop_reason"] in ("stop", "eos"), context  # ended by itself
        assert reply.content.strip() and find_speaker_line(reply.content) is None, context
        assert request.lower().rstrip(".?") not in reply.content.lower(), context
        assert repeated_phrase(reply.content) is None, context
        shown = window.chat.widget_for(reply.id).text()
        assert "User:" not in shown and "Student:" not in shown, shown
    assert "paris" in messages[1].content.lower()
