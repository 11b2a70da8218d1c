"""Tasks the model in use can do (issue 37): the built-in models are offered only the suggested
tasks they were seen to do (docs/first-chat-model.md); the others are greyed and said to need a
larger model, with the one-click download of one beside them; the welcome offers that ~1 GB
instruct model beside the 5.2 GB pair (and while it does, the greyed tasks' line leaves the
button to it: one offer on screen)."""

from __future__ import annotations

from pathlib import Path

from app.library.catalog import MachineInfo, load_catalog
from ui.chat.welcome import WelcomePanel
from ui.presenters import words


def test_the_built_in_model_is_offered_only_what_it_does_and_a_larger_one_beside(qtbot, open_window) -> None:
    window = open_window(Path("smollm2"))
    chat = window.chat
    qtbot.waitUntil(lambda: chat.larger_row.isVisibleTo(window), timeout=10_000)
    enabled = {b.text(): b.isEnabled() for b in chat.suggestion_buttons}
    assert enabled == {
        "Repeat a paragraph exactly": True,
        "Fix the spelling in a note": False,  # every mistake kept (docs/first-chat-model.md)
        "Rename a function in code": False,  # nothing renamed
    }
    # The greyed buttons name the tasks; the line below them says why once.
    assert chat.larger_label.text() == "The greyed tasks need a larger model than SmolLM2 135M Instruct."
    assert chat.larger_download.text() == "Download Qwen2.5 1.5B Instruct (1.1 GB)"
    # A first start: the welcome above offers the same 1.1 GB download; it is on screen once.
    welcome = window.welcome
    assert welcome.isVisible() and welcome.small_download_button.isVisibleTo(window)
    assert chat.larger_download.isHidden()
    welcome.set_compact(True)  # after a first reply: the welcome keeps one line, without it
    assert chat.larger_download.isVisibleTo(window)
    window.show_welcome()  # Help ▸ Welcome: whole again
    assert welcome.small_download_button.isVisibleTo(window) and chat.larger_download.isHidden()
    welcome.close_button.click()
    assert welcome.isHidden() and chat.larger_download.isVisibleTo(window)
    chat.small_model_requested.disconnect()  # no hub here: the signal is what the window follows
    with qtbot.waitSignal(chat.small_model_requested, timeout=5_000):
        chat.larger_download.click()


def test_any_other_model_is_offered_every_task(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    assert all(b.isEnabled() for b in window.chat.suggestion_buttons)
    assert window.chat.larger_row.isHidden()
    assert words.model_does(str(tiny_target), "Fix spelling and grammar")
    assert not words.model_does("smollm2", "Fix spelling and grammar")  # it looped on a note


def test_the_welcome_offers_a_small_instruct_model_beside_the_pair(qtbot) -> None:
    panel = WelcomePanel(load_catalog(), MachineInfo(8 * 1024**3, has_gpu=False, gpu_label=""))
    qtbot.addWidget(panel)
    assert "Qwen2.5 7B Instruct" in panel.recommendation_label.text()  # the 5.2 GB pair, as before
    assert "Qwen2.5 1.5B Instruct" in panel.small_label.text()
    assert panel.small_download_button.text() == "Download and switch (1.1 GB)"
    with qtbot.waitSignal(panel.download_requested) as signal:
        panel.small_download_button.click()
    pair = signal.args[0]
    assert pair.name == "qwen2.5-1.5b-ngram" and pair.draft is None  # n-gram drafting
    assert (pair.target.repo_id, pair.target.filename) == (
        "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
        "qwen2.5-1.5b-instruct-q4_k_m.gguf",
    )
