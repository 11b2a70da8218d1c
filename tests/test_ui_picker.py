"""One model picker (issue 37): the header lists the built-in and downloaded models by the names
people call them, each with its size, and "Open a GGUF file…"; the window title says the same
name; "Draft model" lists the local drafts that pair with the model in use (the pair doctor's
rules), the others greyed with the rule behind a "why", and is greyed itself where none pairs."""

from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import Qt

from app import paths
from ui.chat.chat_header import OPEN_FILE_ITEM


def _items(combo) -> list[str]:  # type: ignore[no-untyped-def]
    return [combo.itemText(i) for i in range(combo.count())]


def test_the_window_title_and_the_picker_name_the_built_in_model_as_people_do(qtbot, open_window) -> None:
    window = open_window(Path("smollm2"))
    assert window.windowTitle() == "Tandem — SmolLM2 135M Instruct"  # not "Smollm2 135M 8k Lc100K Mix1 Ep2"
    window.header.refresh_models()
    items = _items(window.header.model_combo)
    smol = next(text for text in items if text.startswith("SmolLM2 135M Instruct"))
    assert smol.endswith(" MB")  # with its size
    assert items[-1] == OPEN_FILE_ITEM


def test_downloaded_models_by_name_and_size_and_open_a_file(
    qtbot, open_window, tiny_target, tiny_draft
) -> None:
    shutil.copy(tiny_draft, paths.models_dir() / "draft.gguf")
    window = open_window(tiny_target)
    window.header.refresh_models()
    items = _items(window.header.model_combo)
    assert "tiny-1-4L · 802.5 kB" in items  # the downloaded draft: its header's name and its size
    assert not any("/" in text for text in items)  # names, not paths
    with qtbot.waitSignal(window.header.open_file_requested, timeout=5_000):
        window.header.on_model_combo_activated(window.header.model_combo.findData("open-file"))
    dialog = window.model_choices.open_model_dialog
    assert dialog.isVisible() and "GGUF" in dialog.windowTitle()
    dialog.reject()


def test_draft_model_lists_the_drafts_that_pair_first_and_why_others_do_not(
    qtbot, open_window, tiny_target, tiny_draft, tiny_incompatible
) -> None:
    shutil.copy(tiny_draft, paths.models_dir() / "draft.gguf")
    shutil.copy(tiny_incompatible, paths.models_dir() / "other-vocab.gguf")
    window = open_window(tiny_target, draft="none")
    window.on_header_speed_up_chosen("draft")  # no draft model chosen before
    menu = window.model_choices.draft_menu
    actions = [a for a in menu.actions() if not a.isSeparator() and a.text()]
    pairing = [a for a in actions if a.isEnabled() and a.text() != "Another GGUF file…"]
    refused = [a for a in actions if not a.isEnabled()]
    assert len(pairing) == 1 and actions.index(pairing[0]) == 0  # the one that pairs, first
    assert any(a.text().endswith("· why?") and a.toolTip().startswith("Why: the ") for a in refused)
    assert "differs" in next(a.toolTip() for a in refused if a.text().endswith("· why?"))
    pairing[0].trigger()
    qtbot.waitUntil(lambda: window.header.speed_combo.currentData() == "draft", timeout=60_000)
    assert window.settings.draft_model_path == str(paths.models_dir() / "draft.gguf")
    menu.close()


def test_draft_model_is_greyed_with_the_reason_where_none_pairs(
    qtbot, open_window, tiny_target, tiny_incompatible
) -> None:
    shutil.copy(tiny_incompatible, paths.models_dir() / "other-vocab.gguf")
    window = open_window(tiny_target, draft="none")
    combo = window.header.speed_combo
    index = combo.findData("draft")
    qtbot.waitUntil(lambda: not combo.model().item(index).isEnabled(), timeout=10_000)
    why = combo.itemData(index, Qt.ItemDataRole.ToolTipRole)
    assert why.startswith("No model on this computer pairs with ")
