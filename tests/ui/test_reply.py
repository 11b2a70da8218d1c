"""The one reply buffer (app.host.reply) and the controller that fills it from the worker's messages.

The controller is driven through its real message path (queue, wake-up, timed drains) by a
stand-in engine host that delivers messages from a thread of its own, as WorkerProcess's
reader thread does; the worker process itself is tested in test_worker.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.host.reply import Reply, ReplyProgress, ReplyText
from app.store import Store
from engine.errors import ErrorKind, Failure
from engine.events import DraftSpan, Finished, Stats, TextPiece


def _stats(n_generated: int, speculation: str = "ngram") -> Stats:
    return Stats(speculation, 5, 5, n_generated, 4, 3, n_generated, 1, 0.01, 0.5, 0.4, 4)  # type: ignore[arg-type]


def _reply(*pieces: tuple[str, bool]) -> Reply:
    reply = Reply(7)
    for text, is_draft in pieces:
        reply.add(TextPiece(text, 1, is_draft))
    return reply


def test_pieces_are_merged_once_into_text_and_drafted_ranges() -> None:
    reply = _reply(("Hel", False), ("lo", True), (" wor", True), ("ld", False), ("", True), ("!", True))
    assert reply.text == "Hello world!" and len(reply) == 12
    assert reply.raw().spans == (DraftSpan(3, 9), DraftSpan(11, 12))  # touching drafted pieces are one range
    assert reply.n_tokens == 6
    reply.add(TextPiece("?", 3, False))
    assert reply.text == "Hello world!?" and reply.n_tokens == 9  # read, appended, read again
    assert reply.stats is None and reply.finished is None


def test_stats_keep_the_newest_snapshot() -> None:
    reply = _reply(("a", False))
    reply.add(_stats(1))
    reply.add(_stats(2))
    assert reply.stats is not None and reply.stats.n_generated == 2


def test_finished_text_is_authoritative_and_spans_stay_inside_it() -> None:
    reply = _reply(("Answer", False), (" here\nUse", True), ("r:", True))
    final = _stats(3)
    reply.finish(Finished("stop", "Answer here", (1, 2, 3), final))  # a stop string was cut
    assert reply.text == "Answer here" and len(reply) == 11
    assert reply.raw().spans == (DraftSpan(6, 11),)
    assert reply.finished is not None and reply.stats is final
    same = _reply(("ok", True))
    same.finish(Finished("eos", "ok", (1,), final))
    assert same.text == "ok" and same.raw().spans == (DraftSpan(0, 2),)


def test_shown_text_drops_the_leading_whitespace_and_shifts_the_spans() -> None:
    reply = _reply(("\n\n ", True), ("Hi", True), (" there", False), ("  \n", True))
    assert reply.shown() == ReplyText("Hi there  \n", (DraftSpan(0, 2), DraftSpan(8, 11)))
    assert reply.shown(is_final=True) == ReplyText("Hi there", (DraftSpan(0, 2),))
    assert reply.raw() == ReplyText("\n\n Hi there  \n", (DraftSpan(0, 5), DraftSpan(11, 14)))
    blank = _reply((" \n", True))
    assert blank.shown() == ReplyText("", ())  # nothing to show, no empty range either


def test_progress_names_the_new_text() -> None:
    reply = _reply(("one ", False))
    progress = ReplyProgress(reply, len(reply), (_stats(2),))
    reply.add(TextPiece("two", 1, True))
    assert progress.request_id == 7 and progress.reply.text[progress.start :] == "two"


def test_the_store_saves_and_gives_back_a_reply(tandem_home) -> None:  # type: ignore[no-untyped-def]
    store = Store()
    conversation = store.create_conversation()
    message = store.add_message(conversation.id, "assistant", "", status="streaming")
    reply = _reply((" ", False), ("Drafted", True), (" and not", False))
    store.save_reply(message.id, reply.shown(is_final=True), "complete", {"n_generated": 3})
    (saved,) = store.messages(conversation.id)
    assert saved.id == message.id and saved.status == "complete" and saved.stats == {"n_generated": 3}
    assert ReplyText(saved.content, saved.spans) == ReplyText("Drafted and not", (DraftSpan(0, 7),))
    store.close()


# ---- the controller's side: one merge, on the way from the worker to the views


class StandInHost:
    """An EngineProcess whose messages come from a thread, as a worker's reader thread's do."""

    def __init__(self, on_message: Callable[[object], None]) -> None:
        self.on_message = on_message
        self.requests: list[object] = []

    pid = None
    exitcode = None

    def start(self) -> None:
        pass

    def is_alive(self) -> bool:
        return True

    def send(self, request: object) -> None:
        self.requests.append(request)

    def cancel(self, request_id: int) -> None:
        pass

    def shutdown(self, timeout_s: float = 3.0) -> None:
        pass

    def deliver(self, messages: list[object]) -> None:
        thread = threading.Thread(target=lambda: [self.on_message(m) for m in messages])
        thread.start()
        thread.join()


def _controller(qapp):  # type: ignore[no-untyped-def]
    from app.host.controller import EngineController

    hosts: list[StandInHost] = []

    def make(on_message: Callable[[object], None]) -> StandInHost:
        hosts.append(StandInHost(on_message))
        return hosts[-1]

    return EngineController(worker_factory=make), hosts


def test_controller_builds_one_buffer_and_announces_only_what_is_new(qtbot, qapp) -> None:
    from app.host.messages import ChatTurn, ReplyEvents

    controller, hosts = _controller(qapp)
    progress: list[tuple[int, str, int]] = []
    finished: list[Reply] = []
    controller.reply_progressed.connect(
        lambda p: progress.append((p.start, p.reply.text[p.start :], len(p.stats)))
    )
    controller.reply_finished.connect(finished.append)

    request_id = controller.start_reply((ChatTurn("user", "hi"),))
    reply = controller.reply(request_id)
    assert reply is not None and reply.text == "" and controller.is_busy
    host = hosts[0]
    host.deliver(
        [
            ReplyEvents(request_id, (TextPiece("Hello", 2, False),)),
            ReplyEvents(request_id, (TextPiece(" there", 2, True), _stats(4))),  # one batch
        ]
    )
    qtbot.waitUntil(lambda: len(progress) == 1, timeout=5000)
    assert progress == [(0, "Hello there", 1)]
    host.deliver([ReplyEvents(request_id, (TextPiece(", friend", 2, True),))])
    qtbot.waitUntil(lambda: len(progress) == 2, timeout=5000)
    assert progress[1] == (11, ", friend", 0)
    assert reply.raw().spans == (DraftSpan(5, 19),)

    host.deliver([ReplyEvents(request_id, (Finished("eos", "Hello there, friend", (1,), _stats(6)),))])
    qtbot.waitUntil(lambda: bool(finished), timeout=5000)
    assert finished == [reply] and reply.finished is not None  # the same buffer, finished
    assert controller.reply(request_id) is None and not controller.is_busy
    assert len(progress) == 2  # nothing new came with the Finished


def test_a_batch_that_ends_the_reply_shows_its_text_then_finishes(qtbot, qapp) -> None:
    """The worker sends a reply's last text and its Finished in one message: the text is
    announced (with its drafted span and stats) before the reply finishes."""
    from app.host.messages import ChatTurn, ReplyEvents

    controller, hosts = _controller(qapp)
    seen: list[object] = []
    controller.reply_progressed.connect(lambda p: seen.append((p.reply.text[p.start :], len(p.stats))))
    controller.reply_finished.connect(lambda r: seen.append(("finished", r.text)))
    request_id = controller.start_reply((ChatTurn("user", "hi"),))
    reply = controller.reply(request_id)
    events = (TextPiece("Hi", 1, False), TextPiece(" you", 1, True), _stats(2))
    hosts[0].deliver([ReplyEvents(request_id, (*events, Finished("eos", "Hi you", (), _stats(2))))])
    qtbot.waitUntil(lambda: len(seen) == 2, timeout=5000)
    assert seen == [("Hi you", 1), ("finished", "Hi you")]
    assert reply is not None and reply.raw().spans == (DraftSpan(2, 6),)
    assert not controller.is_busy


def test_a_backlog_is_drained_over_several_turns_in_order(qtbot, qapp) -> None:
    """Thousands of queued pieces (an engine far faster than the window) arrive in order and
    complete, and no drain takes them all at once."""
    from app.host.messages import ChatTurn, ReplyEvents

    controller, hosts = _controller(qapp)
    starts: list[int] = []
    finished: list[Reply] = []
    controller.reply_progressed.connect(lambda p: starts.append(p.start))
    controller.reply_finished.connect(finished.append)
    request_id = controller.start_reply((ChatTurn("user", "hi"),))
    words = [f"w{i} " for i in range(40_000)]
    hosts[0].deliver(
        [ReplyEvents(request_id, (TextPiece(w, 1, i % 3 == 0),)) for i, w in enumerate(words)]
        + [ReplyEvents(request_id, (Finished("length", "".join(words), (), _stats(len(words))),))]
    )
    qtbot.waitUntil(lambda: bool(finished), timeout=30_000)
    reply = finished[0]
    assert reply.text == "".join(words) and reply.n_tokens == len(words)
    assert len(starts) > 1 and starts == sorted(starts)  # several updates, each after the last
    assert len(reply.spans) == len(range(0, len(words), 3))


def test_a_reply_failing_drops_its_buffer(qtbot, qapp) -> None:
    from app.host.messages import ChatTurn, ReplyEvents, ReplyFailed

    controller, hosts = _controller(qapp)
    failed: list[tuple[int, str, bool]] = []
    # The failure crosses as data (engine.errors.Failure): its sentence and its kind.
    kinds: list[ErrorKind] = []

    def on_failed(rid: int, failure: Failure, died: bool) -> None:
        failed.append((rid, failure.sentence, died))
        kinds.append(failure.kind)

    controller.reply_failed.connect(on_failed)
    request_id = controller.start_reply((ChatTurn("user", "hi"),))
    reply = controller.reply(request_id)
    hosts[0].deliver(
        [
            ReplyEvents(request_id, (TextPiece("partial", 1, False),)),
            ReplyFailed(request_id, Failure(ErrorKind.DECODE, "no")),
        ]
    )
    qtbot.waitUntil(lambda: bool(failed), timeout=5000)
    assert failed == [(request_id, "no", False)] and kinds == [ErrorKind.DECODE]
    assert controller.reply(request_id) is None and reply is not None and reply.text == "partial"
