"""Shared fixtures: tiny generated GGUF models and an isolated TANDEM_HOME for every test."""

from __future__ import annotations

import ast
import dataclasses
import functools
import gc
import inspect
import os
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# A bug reported by the engine's side (ErrorKind.UNEXPECTED) raises in the window's presenter
# (ui/presenters/presenter.py) instead of becoming a notice: a test meeting one fails.
os.environ.setdefault("TANDEM_STRICT", "1")

from PySide6.QtCore import QCoreApplication, QEvent  # noqa: E402

from tests.tiny import write_tiny_model  # noqa: E402
from ui.qt.gc_on_gui_thread import collect_due  # noqa: E402
from ui.qt.pyside_refcount_fix import immortalize_singletons  # noqa: E402

# PySide6 6.12 on Python 3.11 drops a reference to None/True/False on every void Qt call; a
# test session makes far more than the ~5,000 calls that takes to abort the interpreter.
immortalize_singletons()

# Garbage is collected on the main (GUI) thread only, as the app does (ui/qt/gc_on_gui_thread.py):
# a collection in a test server's thread freed a Qt object there and crashed the session.
THRESHOLD = gc.get_threshold()
gc.disable()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs `-n 2`) each worker keeps to its own share of the cores,
    and so does everything it starts (the affinity is inherited). An engine with no thread count
    takes one thread per core it may use (engine.config.default_threads): two workers each running
    two spinning llama.cpp threads on two cores collapsed (the F16 Gemma test 6x slower)."""
    worker = getattr(config, "workerinput", None)
    if worker is None or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    index, n_workers = int(worker["workerid"].removeprefix("gw")), int(worker["workercount"])
    os.sched_setaffinity(0, cpus[index::n_workers] or [cpus[index % len(cpus)]])


# -- `slow`: what `make test-fast` leaves out ------------------------------------------------------
# A test is slow when it (or a fixture it uses, or a helper of its module it calls) starts a process
# (`tandem`, the lab, a worker, a server) or the real window, or reads the real Gemma model. Marked
# here from the source, so a new test is sorted without anyone remembering to; `@pytest.mark.slow`
# marks one by hand.
SLOW_WORDS = (
    "subprocess", "Popen", "tandem(", "lab(", "WorkerProcess", "ServeProcess", "EngineController",
    "MainWindow", "open_window", "multiprocessing",
)  # fmt: skip
SLOW_FIXTURES = {"gemma_dir", "gemma_q4", "gemma_f16"}


@functools.cache
def _starts_something(func: Callable[..., Any], module: ModuleType | None) -> bool:
    try:
        source = textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return False
    if any(word in source for word in SLOW_WORDS):
        return True
    if module is None:
        return False
    called = {
        n.func.id
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    helpers = (getattr(module, name, None) for name in called - {getattr(func, "__name__", "")})
    return any(
        (inspect.isfunction(h) or inspect.isclass(h))  # a helper, or a class that starts one
        and h.__module__ == module.__name__
        and _starts_something(h, module)
        for h in helpers
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if not isinstance(item, pytest.Function) or item.get_closest_marker("slow"):
            continue
        fixtures = item._fixtureinfo.name2fixturedefs  # the fixtures this test uses, by name
        funcs = [(item.function, item.module)] + [
            (d.func, inspect.getmodule(d.func)) for defs in fixtures.values() for d in defs
        ]
        if (
            item.get_closest_marker("gemma")
            or SLOW_FIXTURES & set(item.fixturenames)
            or any(_starts_something(f, m) for f, m in funcs)
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def collect_on_the_gui_thread() -> Iterator[None]:
    yield
    # The widgets qtbot closed are deleted now, not whenever an event loop next runs: a window
    # left alive is restyled with the next test's (its theme sets the application's style sheet).
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    collect_due(THRESHOLD)


@pytest.fixture(autouse=True)
def tandem_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "tandem-home"
    home.mkdir()
    monkeypatch.setenv("TANDEM_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return home


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_target(models_dir: Path) -> Path:
    return write_tiny_model(models_dir / "target.gguf", seed=1, n_layers=4)


@pytest.fixture(scope="session")
def tiny_draft(models_dir: Path) -> Path:
    """The target plus noise: a compatible draft that accepts about half its tokens."""
    return write_tiny_model(models_dir / "draft.gguf", seed=1, perturb=0.1)


@pytest.fixture(scope="session")
def tiny_incompatible(models_dir: Path) -> Path:
    """Token 40's text differs from the target's: llama.cpp's pairing rule refuses it."""
    return write_tiny_model(models_dir / "other-vocab.gguf", seed=3, n_layers=2, rename_token=40)


@pytest.fixture(scope="session")
def slow_target(models_dir: Path) -> Path:
    """Wider and deeper than tiny_target: a few hundred tokens a second on two cores, so a long
    reply lasts seconds and a test can stop it, or kill its engine, in the middle."""
    return write_tiny_model(models_dir / "slow-target.gguf", seed=1, n_layers=8, n_embd=256, n_ff=1024)


@pytest.fixture(scope="session")
def big_draft(models_dir: Path) -> Path:
    """A "draft" far larger than tiny_target (its vocabulary, 75 MB of F32 weights: each token
    reads them all, tens of plain steps of the target): drafting with it can never pay, by a
    margin no busy machine's timing noise closes (slow_target as the draft was within 2-3x)."""
    return write_tiny_model(models_dir / "big-draft.gguf", seed=1, n_layers=8, n_embd=384, n_ff=1536)


@pytest.fixture(scope="session")
def tiny_base(models_dir: Path) -> Path:
    """tiny_target without a chat template: a base model, prompted as a plain-text transcript."""
    import tests.tiny

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tests.tiny, "CHAT_TEMPLATE", "")
        return write_tiny_model(models_dir / "base.gguf", seed=1, n_layers=4)


@pytest.fixture
def open_window(qtbot):  # type: ignore[no-untyped-def]
    """Open the real main window on a model (its engine in a real worker process).

    Settings get one engine thread: llama.cpp's spinning threads collapse when the two cores
    are shared with other processes, and greedy sampling unless `temperature` is given. Windows are shut down (engine stopped) at the end.
    """
    from app.settings import load_settings, save_settings
    from ui.main_window import MainWindow

    windows = []

    def open_(
        model: Path,
        draft: str | None = "ngram",
        wait_loaded: bool = True,
        write_settings: bool = True,
        **changes,
    ):  # type: ignore[no-untyped-def]
        if write_settings:
            # Greedy unless a test asks otherwise: the window's own default samples (temperature
            # 0.7), and most window tests check text that must come out the same every run.
            changes.setdefault("temperature", 0.0)
            save_settings(dataclasses.replace(load_settings(), n_threads=1, **changes))
        window = MainWindow(model=str(model), draft=draft)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        if wait_loaded:
            qtbot.waitUntil(lambda: window.controller.info is not None, timeout=60_000)
        return window

    yield open_
    for window in windows:
        window.shutdown()


@pytest.fixture
def wait_reply(qtbot):  # type: ignore[no-untyped-def]
    """Wait until a window has no reply in flight."""

    def wait(window, timeout_ms: int = 60_000) -> None:  # type: ignore[no-untyped-def]
        qtbot.waitUntil(
            lambda: not window.controller.is_busy and window.presenter.replies.live is None,
            timeout=timeout_ms,
        )

    return wait


# Models the tests assemble from the embedded one, kept between test sessions beside the
# Makefile's wheel cache: the F16 copy takes ~15 s to make, each session.
MODEL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tandem" / "test-models"


@pytest.fixture(scope="session")
def gemma_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded Gemma 3 270M assembled once per test session.

    Reuses an already assembled copy from the user's models folder to save a minute.
    """

    from app.library.default_model import DEFAULT_MODEL_NAME

    folder = tmp_path_factory.mktemp("gemma")
    cached = Path(os.path.expanduser("~/.local/share/Tandem/models"))
    if (cached / DEFAULT_MODEL_NAME).is_file():
        os.symlink(cached / DEFAULT_MODEL_NAME, folder / DEFAULT_MODEL_NAME)
    return folder


@pytest.fixture(scope="session")
def gemma_q4(gemma_dir: Path) -> Path:
    from app.library.default_model import ensure_default_model

    return ensure_default_model(gemma_dir)


@pytest.fixture(scope="session")
def gemma_f16(gemma_dir: Path, gemma_q4: Path) -> Path:
    """The lab's F16 copy of the embedded model (the product names none), made once into
    MODEL_CACHE under a name that changes with its source model and the code that makes it."""
    import hashlib

    from app.library.default_model import DEFAULT_MODEL_SHA256
    from tools.lab.models import write_f16_copy

    maker = hashlib.sha256((DEFAULT_MODEL_SHA256 + inspect.getsource(write_f16_copy)).encode())
    kept = MODEL_CACHE / f"gemma-3-270m-f16-{maker.hexdigest()[:12]}.gguf"
    if not kept.is_file():
        MODEL_CACHE.mkdir(parents=True, exist_ok=True)
        # A name of this session's own, renamed into place: two sessions may make it at once.
        os.replace(write_f16_copy(gemma_q4, kept.with_name(f"{os.getpid()}-{kept.name}")), kept)
    link = gemma_dir / "gemma-3-270m-f16.gguf"
    link.symlink_to(kept)
    return link


@pytest.fixture
def hub(tiny_target: Path, tiny_draft: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A local stand-in for the Hugging Face hub serving the tiny pair; HF_ENDPOINT points at it."""
    from hub_server import TINY_DRAFT_REPO, TINY_REPO, FakeHub, go_online

    with FakeHub() as fake:
        fake.add_file(TINY_REPO, "tiny-target.gguf", tiny_target.read_bytes())
        fake.add_file(TINY_DRAFT_REPO, "tiny-draft.gguf", tiny_draft.read_bytes())
        go_online(monkeypatch, fake, tmp_path)
        yield fake
