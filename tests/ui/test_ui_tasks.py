"""Tasks the model in use can do (issue 37): the built-in models are offered only the suggested
tasks they were seen to do (docs/first-chat-model.md); the others are greyed and said to need a
larger model, with the one-click download of one beside them; the welcome offers that ~1 GB
instruct model beside the 5.2 GB pair (and while it does, the greyed tasks' line leaves the
button to it: one offer on screen)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog

from app.library.catalog import MachineInfo, load_catalog
from app.library.model_spec import ModelSpec
from ui.chat.welcome import WelcomePanel
from ui.presenters import words


def test_the_built_in_model_is_offered_only_what_it_does_and_a_larger_one_beside(qtbot, open_window) -> None:
    window = open_window(Path("smollm2"))
    chat = window.chat
    qtbot.waitUntil(lambda: chat.empty_state.larger_row.isVisibleTo(window), timeout=10_000)
    enabled = {b.text(): b.isEnabled() for b in chat.empty_state.suggestion_buttons}
    assert enabled == {
        "Repeat a paragraph exactly": True,
        "Fix the spelling in a note": False,  # every mistake kept (docs/first-chat-model.md)
        "Rename a function in code": False,  # nothing renamed
    }
    # The greyed buttons name the tasks; the line below them says why once.
    assert (
        chat.empty_state.larger_label.text()
        == "The greyed tasks need a larger model than SmolLM2 135M Instruct."
    )
    assert chat.empty_state.larger_download.text() == "Download Qwen2.5 1.5B Instruct (1.1 GB)"
    # A first start: the welcome above offers the same 1.1 GB download; it is on screen once.
    welcome = window.welcome
    assert welcome.isVisible() and welcome.small_download_button.isVisibleTo(window)
    assert chat.empty_state.larger_download.isHidden()
    welcome.set_compact(True)  # after a first reply: the welcome keeps one line, without it
    assert chat.empty_state.larger_download.isVisibleTo(window)
    window.show_welcome()  # Help ▸ Welcome: whole again
    assert welcome.small_download_button.isVisibleTo(window) and chat.empty_state.larger_download.isHidden()
    welcome.close_button.click()
    assert welcome.isHidden() and chat.empty_state.larger_download.isVisibleTo(window)
    chat.empty_state.small_model_requested.disconnect()  # no hub here: the signal is what the window follows
    with qtbot.waitSignal(chat.empty_state.small_model_requested, timeout=5_000):
        chat.empty_state.larger_download.click()


def test_the_chats_download_of_a_larger_model_goes_through_the_welcome(
    qtbot, open_window, monkeypatch
) -> None:
    """The chat's "Download Qwen2.5 1.5B Instruct" (ui/chat/model_choices.py) is the welcome's
    download (it switches when done), the welcome shown again for its progress."""
    window = open_window(Path("smollm2"))
    asked: list[object] = []  # no hub here: the Models page's download is what the welcome asks for
    monkeypatch.setattr(window.models_page.download_view, "download_pair", asked.append)
    window.welcome.close_button.click()
    window.chat.empty_state.small_model_requested.emit()
    assert [getattr(p, "name", None) for p in asked] == [words.SMALL_INSTRUCT_PAIR]
    assert window.welcome.isVisible()
    assert window.welcome_downloads.downloading == words.SMALL_INSTRUCT_PAIR


def test_any_other_model_is_offered_every_task(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    assert all(b.isEnabled() for b in window.chat.empty_state.suggestion_buttons)
    assert window.chat.empty_state.larger_row.isHidden()
    from ui.presenters.task_ability import model_ability, task_refusal

    assert not task_refusal(model_ability(str(tiny_target)), "Fix spelling and grammar")
    assert task_refusal(model_ability("smollm2"), "Fix spelling and grammar")  # it looped on a note


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


def test_a_base_model_opened_from_a_file_is_offered_no_task_and_each_greyed_one_says_why(
    qtbot, open_window, tiny_target, tiny_base, tmp_path
) -> None:
    # Issue 47: the tasks were gated by the built-in models' names, so the base Gemma opened from a
    # file was offered (and failed) every task. Now from what the file says: no chat template.
    window = open_window(tiny_target)
    chat = window.chat
    assert all(b.isEnabled() for b in chat.empty_state.suggestion_buttons)  # an instruct model: every task
    window.header.on_model_combo_activated(window.header.model_combo.findData("open-file"))
    dialog = next(d for d in window.findChildren(QFileDialog) if d.isVisible())
    dialog.fileSelected.emit(str(tiny_base))  # Model ▸ Open a GGUF file…, the file chosen
    dialog.reject()
    qtbot.waitUntil(
        lambda: getattr(window.controller.info, "target_path", None) == str(tiny_base), timeout=60_000
    )
    qtbot.waitUntil(
        lambda: not any(b.isEnabled() for b in chat.empty_state.suggestion_buttons), timeout=10_000
    )
    why = "tiny-1-4L is a base model (its file has no chat template)"
    assert all(b.toolTip().startswith(why) for b in chat.empty_state.suggestion_buttons)
    assert chat.empty_state.larger_label.text() == f"The greyed tasks need an instruct model: {why}."
    assert chat.empty_state.larger_row.isVisibleTo(window)
    # The attached note's Ask… menu follows the same rule, the reason on each greyed action.
    note = tmp_path / "note.txt"
    note.write_text("The comittee will meet on tusday.\n", encoding="utf-8")
    chat.attachments.add_paths([note])
    actions = chat.attachments.chips()[0].actions_button.menu().actions()
    assert actions and not any(a.isEnabled() for a in actions)
    assert all(a.toolTip().startswith(why) for a in actions)
    assert not any(b.isEnabled() for b in chat.empty_state.document_buttons)
    # Back to the instruct model: offered again, with what each does on hover.
    window.on_header_model_chosen(ModelSpec(path=str(tiny_target)))
    qtbot.waitUntil(lambda: all(a.isEnabled() for a in actions), timeout=60_000)
    assert all(b.toolTip().startswith("Puts") for b in chat.empty_state.document_buttons)


def test_the_measured_model_is_known_by_its_file_not_its_name(tmp_path) -> None:
    # SmolLM2 135M Instruct copied under another name is still the model measured on the tasks.
    from app.library.default_model import smollm2_model
    from ui.presenters.task_ability import model_ability, task_refusal

    copy = tmp_path / "my-model.gguf"
    copy.symlink_to(smollm2_model())
    ability = model_ability(str(copy))
    assert ability is not None and not ability.is_base
    assert task_refusal(ability, "Repeat a paragraph exactly") == ""
    assert task_refusal(ability, "Fix spelling and grammar").startswith("Needs a larger model: SmolLM2 135M")
