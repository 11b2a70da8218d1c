"""GUI stall benchmark: the longest the window's event loop stops while a long reply streams.

`python -m tools.bench_gui` (run by `make bench`) opens the real main window, sends one message
and streams an 8,000-token reply of real text into it: about 32,000 characters of paragraphs,
lists and fenced code, taken from this repository's README and sources. A tiny test model's
tokens are single bytes, so no model is used: a stand-in engine process (an EngineProcess that
answers on a thread of its own, as the real one's reader thread does) hands the controller the
same messages a worker sends (ReplyStarted, TextPiece with drafted runs, Stats, Finished), at
full speed or at a given rate. Everything after that is the app's own path: the controller's
queue and drains, the reply buffer, the chat view's incremental rendering, saving, and the one
full render when the reply ends.

A 5 ms QTimer records the gaps between its ticks from the send until the final render is in
the window; the longest gap is the longest stall (the method of tests/ui/test_ui_lifecycle.py).
Target: at most 50 ms. The figure depends on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.host.messages import EngineInfo

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 50.0
STATS_EVERY = 32  # tokens between Stats snapshots (the engine sends one every ~0.1 s)
TIMEOUT_S = 120.0


def real_text(n_chars: int = 32_000) -> str:
    """Paragraphs and lists of the README (its images and code left out), with fenced Python
    from the engine's sources after every third paragraph."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme = re.sub(r"```.*?```", "", readme, flags=re.DOTALL)
    paragraphs = [
        p.strip() for p in readme.split("\n\n") if p.strip() and "![" not in p and not p.startswith("<")
    ]
    code = []
    for name in ("speculative.py", "drafters.py", "adaptive.py", "sampling.py"):
        path = ROOT / "engine" / name
        if path.exists():
            code += [c.strip("\n") for c in path.read_text(encoding="utf-8").split("\n\n\n") if c.strip()]
    parts: list[str] = []
    i = 0
    while sum(len(p) + 2 for p in parts) < n_chars:
        parts.append(paragraphs[i % len(paragraphs)])
        if code and i % 3 == 2:
            parts.append("```python\n" + code[(i // 3) % len(code)] + "\n```")
        i += 1
    return "\n\n".join(parts)[:n_chars]


def token_pieces(text: str, n_tokens: int, seed: int = 1) -> list[tuple[str, bool]]:
    """`text` cut into n_tokens pieces of 1 to 7 characters, about a third of them in drafted
    runs of 2-8 tokens (what n-gram lookup accepts on real text)."""
    rng = random.Random(seed)
    mean = len(text) / n_tokens
    cuts = sorted(rng.sample(range(1, len(text)), n_tokens - 1)) if mean > 1 else list(range(1, len(text)))
    bounds = [0, *cuts, len(text)]
    pieces: list[tuple[str, bool]] = []
    drafted_left = 0
    for a, b in zip(bounds, bounds[1:]):
        if drafted_left == 0 and rng.random() < 0.08:
            drafted_left = rng.randint(2, 8)
        pieces.append((text[a:b], drafted_left > 0))
        drafted_left = max(0, drafted_left - 1)
    return pieces


class ScriptedEngine:
    """An EngineProcess that loads instantly and answers a reply with the scripted pieces, sent
    from a thread of its own (as WorkerProcess's reader thread delivers a real worker's)."""

    def __init__(
        self, on_message: Callable[[Any], None], pieces: list[tuple[str, bool]], tokens_per_s: float
    ) -> None:
        self._on_message = on_message
        self._pieces = pieces
        self._tokens_per_s = tokens_per_s
        self._cancel = threading.Event()
        self._threads: list[threading.Thread] = []
        self.done = threading.Event()

    pid = None
    exitcode = None

    def start(self) -> None:
        pass

    def is_alive(self) -> bool:
        return True

    def cancel(self, request_id: int) -> None:
        self._cancel.set()  # one reply at a time here: the one asked for

    def shutdown(self, timeout_s: float = 3.0) -> None:
        self._cancel.set()
        for thread in self._threads:
            thread.join(timeout_s)

    def send(self, request: Any) -> None:
        from app.host.messages import DraftChanged, EngineLoaded, LoadRequest, ReplyRequest, SetDraftRequest

        if isinstance(request, LoadRequest):
            self._on_message(EngineLoaded(_info(request.config.target_path or "bench.gguf")))
        elif isinstance(request, SetDraftRequest):
            self._on_message(DraftChanged(_info("bench.gguf")))
        elif isinstance(request, ReplyRequest):
            thread = threading.Thread(target=self._reply, args=(request.request_id,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _reply(self, request_id: int) -> None:
        from app.host.messages import ReplyEvents, ReplyStarted
        from engine.events import Finished, Speculation, Stats, StopReason, TextPiece

        send = self._on_message
        send(ReplyStarted(request_id, 12, 0, Speculation.NGRAM))
        started = time.perf_counter()
        n_drafted = n_runs = 0
        text: list[str] = []

        def stats(n: int) -> Stats:
            decode_s = max(1e-6, time.perf_counter() - started)
            return Stats(
                speculation=Speculation.NGRAM,
                n_prompt_tokens=12,
                n_prefilled=12,
                n_generated=n,
                n_drafted=n_drafted,
                n_accepted=n_drafted,
                n_steps=n - n_drafted + n_runs,
                n_steps_with_draft=n_runs,
                prefill_s=0.01,
                decode_s=decode_s,
                llama_s=0.9 * decode_s,
                draft_max=8,
            )

        was_draft = False
        for n, (piece, is_draft) in enumerate(self._pieces, start=1):
            if self._cancel.is_set():
                break
            if self._tokens_per_s > 0:
                delay = started + n / self._tokens_per_s - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            n_drafted += is_draft
            n_runs += is_draft and not was_draft
            was_draft = is_draft
            text.append(piece)
            send(ReplyEvents(request_id, (TextPiece(piece, 1, is_draft),)))
            if n % STATS_EVERY == 0:
                send(ReplyEvents(request_id, (stats(n),)))
        final = stats(len(text))
        reason: StopReason = "cancelled" if self._cancel.is_set() else "length"
        send(ReplyEvents(request_id, (Finished(reason, "".join(text), (), final),)))
        self.done.set()


def _info(target_path: str) -> EngineInfo:
    from app.host.messages import EngineInfo
    from engine.config import NGRAM_LOOKUP
    from engine.events import Speculation

    return EngineInfo(
        target_path=target_path,
        target_name=Path(target_path).name,
        draft=NGRAM_LOOKUP,
        draft_name="n-gram lookup",
        speculation=Speculation.NGRAM,
        n_ctx=65536,
        has_chat_template=True,
        gpu_offload_supported=False,
        pair_note="bench.gguf with n-gram lookup (a scripted stand-in engine)",
    )


def measure(n_tokens: int, n_chars: int, tokens_per_s: float) -> dict[str, float]:
    """Open the window, stream one reply, return the longest stall and what else was seen."""
    from PySide6.QtCore import QTimer

    from app.gui import freeze_startup_objects
    from app.host.controller import EngineController
    from app.settings import load_settings, save_settings
    from tools.qt_wait import wait_until as wait_for
    from ui.main_window import MainWindow

    text = real_text(n_chars)
    pieces = token_pieces(text, n_tokens)
    engines: list[ScriptedEngine] = []

    def make_engine(on_message: Callable[[Any], None]) -> ScriptedEngine:
        engines.append(ScriptedEngine(on_message, pieces, tokens_per_s))
        return engines[-1]

    # no first-start panel
    save_settings(dataclasses.replace(load_settings(), max_tokens=n_tokens, has_seen_welcome=True))
    controller = EngineController(worker_factory=make_engine)
    window = MainWindow(model=str(ROOT / "bench.gguf"), draft="ngram", controller=controller)
    window.resize(1180, 780)
    window.show()

    wait_until = functools.partial(wait_for, timeout_s=TIMEOUT_S, prog="bench_gui", poll_ms=10)

    wait_until(lambda: controller.info is not None, "the stand-in engine")
    freeze_startup_objects()  # as app.gui does once the window is up
    gaps: list[float] = []
    updates: list[float] = []
    last = time.perf_counter()

    def tick() -> None:
        nonlocal last
        now = time.perf_counter()
        gaps.append(now - last)
        last = now

    # The quiet event loop first: what this machine's scheduler alone costs.
    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    last = time.perf_counter()
    timer.start()
    idle_until = time.monotonic() + 0.5
    wait_until(lambda: time.monotonic() > idle_until, "the idle loop")
    idle_ms = max(gaps) * 1000
    gaps.clear()

    controller.reply_progressed.connect(lambda _p: updates.append(time.perf_counter()))
    started = time.perf_counter()
    window.presenter.send("Explain speculative decoding, with code.")
    last = time.perf_counter()

    def settled() -> bool:
        if window.presenter.replies.live is not None or controller.is_busy:
            return False
        widget = window.chat.message_widgets()[-1]
        return not widget.body._is_settling

    wait_until(settled, "the reply")
    wall_s = time.perf_counter() - started
    timer.stop()
    widget = window.chat.message_widgets()[-1]
    shown = widget.text()
    window.shutdown()
    window.deleteLater()
    if len(shown) < 0.9 * len(text):
        raise SystemExit(f"bench_gui: the window shows {len(shown)} of {len(text)} characters")
    return {
        "tokens": len(pieces),
        "characters": len(text),
        "tokens_per_s": tokens_per_s,
        "longest_stall_ms": round(max(gaps) * 1000, 1),
        "idle_stall_ms": round(idle_ms, 1),
        "display_updates": len(updates),
        "stream_s": round(updates[-1] - updates[0], 2) if len(updates) > 1 else 0.0,
        "wall_s": round(wall_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_gui", description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8000, help="tokens in the reply (default 8000)")
    parser.add_argument("--chars", type=int, default=32_000, help="characters in the reply (default 32000)")
    parser.add_argument(
        "--rates",
        default="0,4000",
        help="comma-separated tokens/s to stream at; 0 = as fast as the stand-in can send (default 0,4000)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args(argv)
    try:
        rates = [float(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        parser.error(f"--rates: not a list of numbers: {args.rates!r}")
    if args.tokens < 1 or args.chars < args.tokens:
        parser.error("--tokens must be at least 1 and at most --chars")

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    home = tempfile.mkdtemp(prefix="tandem-bench-gui-")  # never the user's conversations or settings
    from ui.qt.pyside_refcount_fix import immortalize_singletons

    immortalize_singletons()
    from PySide6.QtWidgets import QApplication

    from ui.qt.gc_on_gui_thread import GuiThreadCollector

    app = QApplication.instance() or QApplication(["tandem-bench-gui"])
    GuiThreadCollector(app)  # as the window's app: the scripted engine's threads free no Qt object
    worst = 0.0
    try:
        for i, rate in enumerate(rates):
            os.environ["TANDEM_HOME"] = str(Path(home) / f"run-{i}")  # a fresh window each run
            Path(os.environ["TANDEM_HOME"]).mkdir()
            result = measure(args.tokens, args.chars, rate)
            app.processEvents()
            worst = max(worst, result["longest_stall_ms"])
            if args.json:
                print(json.dumps(result))
            else:
                speed = "full speed" if rate <= 0 else f"{rate:.0f} tokens/s"
                print(
                    f"GUI stall, {result['tokens']} tokens / {result['characters']} characters at {speed}: "
                    f"longest {result['longest_stall_ms']:.1f} ms (idle loop {result['idle_stall_ms']:.1f} ms); "
                    f"{result['display_updates']} display updates in {result['stream_s']:.2f} s"
                )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if not args.json:
        verdict = "within" if worst <= TARGET_MS else "over"
        print(f"longest GUI stall {worst:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
