"""The welcome panel: the pair it recommends for a machine, first start only, close and reopen,
and its one button that downloads the pair (from the fake hub on 127.0.0.1) and switches to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hub_server import TINY_DRAFT_REPO, TINY_REPO, FakeHub, tiny_pair_catalog

pytest.importorskip("pytestqt")

from app.library import catalog as catalog_module  # noqa: E402
from app.library.catalog import MachineInfo, load_catalog  # noqa: E402
from app.settings import load_settings  # noqa: E402
from ui.chat.welcome import WelcomePanel, recommend_pair  # noqa: E402

GiB = 1024**3
GB = 1000**3
CPU = {"has_gpu": False, "gpu_label": ""}


@pytest.mark.parametrize(
    "ram_gib, expected",
    [
        (4, None),  # only the built-in model fits
        (8, "qwen2.5-7b-0.5b"),
        (16, "qwen2.5-7b-0.5b"),  # on the CPU the smallest chat pair is the fastest
        (64, "qwen2.5-7b-0.5b"),
    ],
)
def test_on_a_cpu_the_smallest_chat_pair_that_fits_in_ram(ram_gib: int, expected: str | None) -> None:
    rec = recommend_pair(load_catalog(), MachineInfo(ram_gib * GiB, **CPU))
    assert (rec.pair.name if rec.pair else None) == expected
    if expected is None:
        assert "need at least 8.6 GB of memory" in rec.reason and "has 4.3 GB" in rec.reason
    else:
        assert "CPU" in rec.reason


@pytest.mark.parametrize(
    "ram_gib, vram_gb, expected",
    [
        (32, 24, "gemma-3-12b-1b"),  # 8.1 GB of files fit a 24 GB GPU with room to spare
        (32, 8, "qwen3-8b-0.6b"),  # 5.7 GB of files x 1.2 fit in 8 GB; Gemma 3 12B's 8.1 GB do not
        (32, 6.5, "qwen2.5-7b-0.5b"),  # 5.2 GB x 1.2 fit; Llama 3.1 8B + 3.2 1B's 6.2 GB do not
        (32, 4, "qwen2.5-7b-0.5b"),  # nothing fits the GPU: the CPU choice
        (10, 24, "qwen3-8b-0.6b"),  # RAM still limits: Gemma 3 12B + 1B needs 12 GiB
    ],
)
def test_with_a_gpu_backend_the_most_capable_pair_that_fits_its_memory(
    ram_gib: int, vram_gb: float, expected: str
) -> None:
    machine = MachineInfo(ram_gib * GiB, has_gpu=True, gpu_label="NVIDIA GPU")
    rec = recommend_pair(load_catalog(), machine, gpu_backend=True, vram_bytes=int(vram_gb * GB))
    assert rec.pair is not None and rec.pair.name == expected


def test_a_gpu_without_a_gpu_build_is_said_and_the_cpu_choice_made() -> None:
    machine = MachineInfo(32 * GiB, has_gpu=True, gpu_label="NVIDIA GPU")
    rec = recommend_pair(load_catalog(), machine, gpu_backend=False, vram_bytes=24 * GB)
    assert rec.pair is not None and rec.pair.name == "qwen2.5-7b-0.5b"
    assert "runs on the CPU only" in rec.reason


def test_panel_updates_its_recommendation_when_the_gpu_backend_is_known(qtbot) -> None:
    machine = MachineInfo(32 * GiB, has_gpu=True, gpu_label="NVIDIA GPU", vram_bytes=24 * GB)
    panel = WelcomePanel(load_catalog(), machine)
    qtbot.addWidget(panel)
    assert "Qwen2.5 7B" in panel.recommendation_label.text()
    panel.set_gpu_backend(True)
    assert "Gemma 3 12B" in panel.recommendation_label.text()
    assert panel.download_button.text().startswith("Download and switch (")
    with qtbot.waitSignal(panel.download_requested) as signal:
        panel.download_button.click()
    assert signal.args[0].name == "gemma-3-12b-1b"


def test_panel_without_a_fitting_pair_offers_no_download(qtbot) -> None:
    panel = WelcomePanel(load_catalog(), MachineInfo(4 * GiB, **CPU))
    qtbot.addWidget(panel)
    assert panel.download_button.isHidden()
    assert "stay with the built-in model" in panel.recommendation_label.text()


def test_first_start_shows_it_once_close_and_reopen_from_help(open_window, tiny_target: Path, qtbot) -> None:
    window = open_window(tiny_target, wait_loaded=False, temperature=0.7)  # the chat's default
    panel = window.welcome
    assert panel is not None and panel.isVisible()
    # Two lines: what it does and how the highlight reads; then the caveats that matter here, once.
    about = panel.about_label.text()
    assert about.count("<br>") == 1 and "Highlighted</span> text is what was guessed and confirmed" in about
    assert "tiny" in about and "GPU" in about and "README" not in about
    # One click to a demo where the speed shows: Compare, a paragraph to repeat, run at once.
    qtbot.waitUntil(lambda: window.controller.info is not None, timeout=60_000)
    qtbot.mouseClick(panel.demo_button, qtbot_left())
    assert window.tabs.currentWidget() is window.compare
    assert window.compare.prompt.toPlainText().startswith("Here is a short text. Repeat it exactly")
    qtbot.waitUntil(lambda: len(window.compare.final_stats) == 2, timeout=120_000)
    qtbot.waitUntil(lambda: not window.controller.is_busy, timeout=60_000)
    assert " instead of " in window.compare.summary.text()
    # The chat samples (temperature 0.7); the demo is edit work, run exactly.
    assert window.compare.check.text() == (
        "✓ The same text, word for word. "
        "Run as the “Edit or copy text” preset runs it: exact, with no repetition penalty."
    )
    assert load_settings().has_seen_welcome  # first start only
    window.chat.input.setPlainText("still usable while it is shown")
    qtbot.mouseClick(panel.close_button, qtbot_left())
    assert not panel.isVisible()
    help_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Help")
    welcome = next(a for a in help_menu.actions() if a.text() == "Welcome")
    welcome.trigger()
    assert panel.isVisible()
    window.shutdown()

    again = open_window(tiny_target, wait_loaded=False, write_settings=False)
    assert again.welcome is not None and not again.welcome.isVisible()


def qtbot_left():  # type: ignore[no-untyped-def]
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton


def test_download_and_switch(
    open_window, tiny_target: Path, hub: FakeHub, qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recommended pair (here: the hub's tiny pair under a chat pair's name) is downloaded by
    the Models page's machinery and becomes the window's pair when done."""
    data = tiny_pair_catalog(
        hub.repos[TINY_REPO].files["tiny-target.gguf"], hub.repos[TINY_DRAFT_REPO].files["tiny-draft.gguf"]
    )
    data["pairs"][0]["name"] = "qwen2.5-7b-0.5b"
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(catalog_module, "catalog_path", lambda: path)

    window = open_window(tiny_target)
    panel = window.welcome
    assert panel is not None and panel.isVisible()
    assert panel.recommendation.pair is not None and panel.recommendation.pair.name == "qwen2.5-7b-0.5b"
    # Connected after the window's own handler: sees the button as that handler left it.
    enabled_after_click: list[bool] = []
    panel.download_requested.connect(
        lambda _pair: enabled_after_click.append(panel.download_button.isEnabled())
    )
    qtbot.mouseClick(panel.download_button, qtbot_left())
    assert enabled_after_click == [False]  # no second download while one runs
    # The download is the welcome's (ui/chat/welcome_downloads.py), the window only wires it.
    assert window.welcome_downloads.downloading == "qwen2.5-7b-0.5b"
    qtbot.waitUntil(
        lambda: (
            window.controller.info is not None
            and window.controller.info.target_path.endswith("tiny-target.gguf")
            and window.controller.info.draft.model.endswith("tiny-draft.gguf")
        ),
        timeout=60_000,
    )
    assert load_settings().model_path is not None and load_settings().model_path.endswith("tiny-target.gguf")
    assert panel.download_button.isEnabled()


def test_without_the_models_page_the_welcome_says_its_download_needs_it(qtbot) -> None:
    """Where the Models page could not be built (the window shows a QLabel in its place), the
    welcome's download says in one line that it needs it, and nothing is downloading."""
    from ui.chat.welcome_downloads import WelcomeDownloads

    panel = WelcomePanel(load_catalog(), MachineInfo(8 * GiB, **CPU))
    qtbot.addWidget(panel)
    switched: list[tuple[str, str]] = []
    downloads = WelcomeDownloads(panel, None, lambda target, draft: switched.append((target, draft)))
    downloads.request(load_catalog().pairs[0])
    assert (
        panel.status_label.text() == "Downloads need the Models page, which is not available in this build."
    )
    assert downloads.downloading is None and switched == []


def test_a_failed_download_is_said_on_the_welcome_and_its_button_comes_back(
    open_window, tiny_target: Path, hub: FakeHub, qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tiny_pair_catalog(
        hub.repos[TINY_REPO].files["tiny-target.gguf"], hub.repos[TINY_DRAFT_REPO].files["tiny-draft.gguf"]
    )
    data["pairs"][0]["name"] = "qwen2.5-7b-0.5b"
    data["models"]["tiny-target"]["filename"] = "missing.gguf"  # not in the hub's repository
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(catalog_module, "catalog_path", lambda: path)

    window = open_window(tiny_target)
    panel = window.welcome
    qtbot.mouseClick(panel.download_button, qtbot_left())
    qtbot.waitUntil(lambda: "Download stopped:" in panel.status_label.text(), timeout=30_000)
    assert "missing.gguf was not found" in panel.status_label.text()
    assert panel.download_button.isEnabled()
    # Still the welcome's: resumed on the Models page, it switches to the pair when done.
    assert window.welcome_downloads.downloading == "qwen2.5-7b-0.5b"
    assert window.controller.info is not None and window.controller.info.target_path == str(tiny_target)


def _keep_measured(model: str, t_ms: dict[int, float]) -> None:
    from app.library import measure
    from engine.config import default_threads

    machine = measure.machine_identity(default_threads())
    measure.save_costs(measure.MeasuredCosts(model, t_ms, 1, machine, "now", default_threads()))


def test_on_a_cpu_the_recommendation_follows_what_was_measured_here() -> None:
    machine = MachineInfo(32 * GiB, **CPU)
    # Qwen2.5 7B + 0.5B measured on stand-ins here as on this EPYC (issue 39): the draft does not pay.
    _keep_measured(
        "bartowski/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf",
        {1: 129, 2: 230, 4: 299, 8: 576, 16: 893},
    )
    _keep_measured("bartowski/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q8_0.gguf", {1: 11.7})
    rec = recommend_pair(load_catalog(), machine)
    assert rec.pair is not None and rec.pair.name == "qwen2.5-7b-0.5b"
    assert rec.reason.endswith(
        "Measured on this computer: a draft model does not pay here; drafting from the text does."
    )
    # Llama 3.1 8B + 3.2 1B measured on a machine whose batches are nearly free (a GPU's shape): it pays.
    _keep_measured(
        "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        {1: 20.0, 2: 20.5, 4: 21.0, 8: 22.0, 16: 24.0},
    )
    _keep_measured("bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q8_0.gguf", {1: 3.0})
    rec = recommend_pair(load_catalog(), machine)
    assert rec.pair is not None and rec.pair.name == "llama-3.1-8b-3.2-1b"
    assert rec.reason.startswith("Measured on this computer: its draft model makes replies about 1.7× faster")
