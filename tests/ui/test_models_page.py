"""The models page under pytest-qt: real widgets, real downloads from the fake hub on 127.0.0.1."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest
from hub_server import TINY_DRAFT_REPO, TINY_REPO, FakeHub, tiny_pair_catalog

pytest.importorskip("pytestqt")

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDropEvent, QPalette  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QFrame,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QToolButton,
    QWidget,
)

from app import paths  # noqa: E402
from app.library.catalog import MachineInfo, format_bytes, load_catalog, parse_catalog  # noqa: E402
from app.settings import Theme  # noqa: E402
from engine.config import NGRAM_LOOKUP, DraftChoice
from ui.models.model_downloads import CUSTOM_KEY  # noqa: E402
from ui.models.models_page import ModelsPage  # noqa: E402

REPO, DRAFT_REPO = TINY_REPO, TINY_DRAFT_REPO  # served by the `hub` fixture (conftest.py)
GiB = 1024**3
MACHINE = MachineInfo(total_ram_bytes=16 * GiB, has_gpu=False, gpu_label="")


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A download the fake hub fails is tried again at once (by default a second later)."""
    from app.library import downloads

    monkeypatch.setattr(downloads, "BACKOFF_S", 0.01)


def make_page(qtbot, hub: FakeHub | None = None) -> ModelsPage:
    catalog = None
    if hub is not None:
        data = tiny_pair_catalog(
            hub.repos[REPO].files["tiny-target.gguf"], hub.repos[DRAFT_REPO].files["tiny-draft.gguf"]
        )
        catalog = parse_catalog(data)
    page = ModelsPage(catalog=catalog, machine=MACHINE)
    qtbot.addWidget(page)
    page.resize(1100, 800)
    page.show()
    return page


def card_named(page: ModelsPage, title: str) -> QFrame:
    """A catalog card, found as a screen reader finds it: by its accessible name."""
    cards = [c for c in page.findChildren(QFrame, "pairCard") if c.accessibleName() == title]
    assert len(cards) == 1, [c.accessibleName() for c in page.findChildren(QFrame, "pairCard")]
    return cards[0]


def text_of(card: QWidget, name: str) -> str:
    label = card.findChild(QLabel, name)
    assert label is not None, name
    return label.text()


def button_named(card: QWidget, accessible_name: str) -> QPushButton:
    found = [b for b in card.findChildren(QPushButton) if b.accessibleName() == accessible_name]
    assert len(found) == 1, [b.accessibleName() for b in card.findChildren(QPushButton)]
    return found[0]


def test_page_downloads_a_pair_with_live_progress_on_its_card_and_lists_the_files(
    qtbot, hub: FakeHub
) -> None:
    page = make_page(qtbot, hub)
    assert page.local_box.table.rowCount() == 0
    card = card_named(page, "Tiny target + tiny draft")
    assert text_of(card, "pairFit").startswith("✓ Fits")
    download = button_named(card, "Download Tiny target + tiny draft")
    pause = button_named(card, "Pause the download of Tiny target + tiny draft")
    use = button_named(card, "Chat with Tiny target + tiny draft")
    bar = card.findChild(QProgressBar, "pairProgress")
    assert download.isVisibleTo(page) and not use.isVisibleTo(page)
    assert not pause.isVisibleTo(page) and not bar.isVisibleTo(page)  # no clutter before a download
    hub.throttle_s = 0.01  # about a second per file: several progress updates reach the window
    values: list[int] = []
    bar.valueChanged.connect(values.append)
    texts: list[str] = []

    def is_midway() -> bool:
        texts.append(text_of(card, "pairStatus"))
        return 0 < bar.value() < 1000

    # The files are in and the page has listed them (files_arrived: the page refreshes first).
    with qtbot.waitSignal(page.download_view.files_arrived, timeout=60_000):
        qtbot.mouseClick(download, Qt.MouseButton.LeftButton)
        assert not download.isEnabled()
        assert pause.isEnabled() and pause.isVisibleTo(page) and bar.isVisibleTo(page)
        qtbot.waitUntil(is_midway, timeout=30_000)

    assert any(0 < v < 500 for v in values) and any(500 <= v < 1000 for v in values)
    assert bar.value() == 1000
    # Size, speed and time left, on the card itself.
    assert any(
        re.search(r" of [\d.]+ [kMG]?B · [\d.]+ [kMG]?B/s · (\d+ min )?\d+ s left", t) for t in texts
    ), texts[-5:]
    assert text_of(card, "pairStatus") == "downloaded: tiny-target.gguf, tiny-draft.gguf"
    assert download.isEnabled() and not pause.isEnabled() and not pause.isVisibleTo(page)
    # The card switches from Download to chatting with the pair.
    assert use.isVisibleTo(page) and not download.isVisibleTo(page)
    with qtbot.waitSignal(page.pair_chosen) as chosen:
        qtbot.mouseClick(use, Qt.MouseButton.LeftButton)
    folder = paths.models_dir()
    assert chosen.args == [
        str(folder / "tandem-test--tiny-target-GGUF" / "tiny-target.gguf"),
        DraftChoice.of_model(str(folder / "tandem-test--tiny-draft-GGUF" / "tiny-draft.gguf")),
    ]
    files = {page.local_box.table.item(r, 0).text() for r in range(page.local_box.table.rowCount())}
    assert files == {
        "tandem-test--tiny-target-GGUF/tiny-target.gguf",
        "tandem-test--tiny-draft-GGUF/tiny-draft.gguf",
    }
    assert page.local_box.table.item(0, 2).text() == "llama"
    # Both files among the targets, beside the built-in models (the header's list: one source).
    assert len(target_files(page)) == 2


def target_files(page: ModelsPage) -> list[str]:
    """The targets that are files (the built-in models are listed by their names)."""
    keys = [page.picker.target_combo.itemData(i) for i in range(page.picker.target_combo.count())]
    return [k for k in keys if "/" in k or "\\" in k]


def test_pause_keeps_the_part_and_download_resumes_it(qtbot, hub: FakeHub) -> None:
    page = make_page(qtbot, hub)
    hub.throttle_s = 0.02
    qtbot.mouseClick(page.download_view.rows["tiny-pair"].download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.download_view.rows["tiny-pair"].progress_bar.value() > 100, timeout=30_000)
    qtbot.mouseClick(page.download_view.rows["tiny-pair"].pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.download_view.rows["tiny-pair"].download_button.isEnabled(), timeout=30_000)
    assert "paused" in page.download_view.rows["tiny-pair"].status_label.text()
    part = paths.models_dir() / "tandem-test--tiny-target-GGUF" / "tiny-target.gguf.part"
    kept = part.stat().st_size
    assert kept > 0

    hub.throttle_s = 0.0
    # The files are in and the page has listed them (files_arrived: the page refreshes first).
    with qtbot.waitSignal(page.download_view.files_arrived, timeout=60_000):
        qtbot.mouseClick(page.download_view.rows["tiny-pair"].download_button, Qt.MouseButton.LeftButton)
    assert hub.range_headers(hub.repos[REPO].files["tiny-target.gguf"])[-1] == f"bytes={kept}-"
    assert page.local_box.table.rowCount() == 2


def test_a_failed_download_shows_its_sentence(qtbot, hub: FakeHub) -> None:
    page = make_page(qtbot, hub)
    page.download_view.custom_box.repo_edit.setText(REPO)
    page.download_view.custom_box.file_edit.setText("missing.gguf")
    qtbot.mouseClick(page.download_view.rows[CUSTOM_KEY].download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.download_view.rows[CUSTOM_KEY].download_button.isEnabled(), timeout=30_000)
    assert (
        "missing.gguf was not found in the repository"
        in page.download_view.rows[CUSTOM_KEY].status_label.text()
    )


def test_the_hub_file_row_shows_no_empty_progress_bar_until_a_download(qtbot, hub: FakeHub) -> None:
    # The review (and the pictures) saw an empty white box under the repository's fields: the
    # progress bar of a download that never started.
    page = make_page(qtbot, hub)
    bar = page.download_view.rows[CUSTOM_KEY].progress_bar
    assert not bar.isVisibleTo(page)
    page.download_view.custom_box.repo_edit.setText(REPO)
    page.download_view.custom_box.file_edit.setText("tiny-target.gguf")
    qtbot.mouseClick(page.download_view.rows[CUSTOM_KEY].download_button, Qt.MouseButton.LeftButton)
    assert bar.isVisibleTo(page)
    qtbot.waitUntil(lambda: page.download_view.rows[CUSTOM_KEY].download_button.isEnabled(), timeout=30_000)
    assert bar.isVisibleTo(page) and bar.value() == bar.maximum()  # what it did, kept in view


def test_the_pair_picker_names_a_built_in_model_as_people_call_it(qtbot, tiny_target: Path) -> None:
    # SmolLM2's file header names it "Smollm2 135M 8k Lc100K Mix1 Ep2": the picker says what the
    # header's model picker says. Any other model keeps its header's name.
    from app.library.default_model import SMOLLM2_FILE

    folder = paths.models_dir()
    shutil.copy(tiny_target, folder / SMOLLM2_FILE)
    with open(folder / SMOLLM2_FILE, "r+b") as f:  # another file of the same size (the same file
        f.seek(-1, 2)  # twice is one model, listed once: tests/ui/test_ui_picker.py)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    shutil.copy(tiny_target, folder / tiny_target.name)
    page = make_page(qtbot)
    combo = page.picker.target_combo
    names = {combo.itemData(i): combo.itemText(i) for i in range(combo.count())}
    header_name = next(m.name for m in page.local_models if m.path.name == tiny_target.name)
    size = format_bytes(tiny_target.stat().st_size)  # names and sizes, as the header's picker says them
    assert names[str(folder / SMOLLM2_FILE)] == f"SmolLM2 135M Instruct · {size}"
    assert names[str(folder / tiny_target.name)] == f"{header_name} · {size}"


def test_pair_picker_offers_only_compatible_drafts_and_explains_the_others(
    qtbot, tiny_target: Path, tiny_draft: Path, tiny_incompatible: Path
) -> None:
    folder = paths.models_dir()
    for f in (tiny_target, tiny_draft, tiny_incompatible):
        shutil.copy(f, folder / f.name)
    page = make_page(qtbot)
    target_index = page.picker.target_combo.findData(str(folder / "target.gguf"))
    page.picker.target_combo.setCurrentIndex(target_index)

    combo = page.picker.draft_combo
    entries = {combo.itemData(i): i for i in range(combo.count())}
    assert list(entries)[:2] == ["ngram", "none"]
    # Named as the header names the speed-up, not in the engine's words.
    assert [combo.itemText(i) for i in range(2)] == ["From the text (n-gram)", "Off (the usual speed)"]
    draft_i, other_i = entries[str(folder / "draft.gguf")], entries[str(folder / "other-vocab.gguf")]
    assert page.picker.is_draft_enabled(draft_i) and not page.picker.is_draft_enabled(other_i)
    assert "text of token 40" in combo.itemData(other_i, Qt.ItemDataRole.ToolTipRole)
    # The rule behind a "why" (the line's tooltip), not in the page's text.
    assert page.picker.pair_explanation.text().startswith("1 of the models here cannot draft")
    assert "text of token 40" not in page.picker.pair_explanation.text()
    assert "other-vocab.gguf" in page.picker.pair_explanation.toolTip()
    assert "text of token 40" in page.picker.pair_explanation.toolTip()

    combo.setCurrentIndex(draft_i)
    with qtbot.waitSignal(page.pair_chosen) as chosen:
        qtbot.mouseClick(page.picker.use_pair_button, Qt.MouseButton.LeftButton)
    assert chosen.args == [str(folder / "target.gguf"), DraftChoice.of_model(str(folder / "draft.gguf"))]

    combo.setCurrentIndex(other_i)  # programmatically; a user cannot pick a disabled entry
    with qtbot.assertNotEmitted(page.pair_chosen):
        qtbot.mouseClick(page.picker.use_pair_button, Qt.MouseButton.LeftButton)

    combo.setCurrentIndex(entries["ngram"])
    with qtbot.waitSignal(page.pair_chosen) as chosen:
        qtbot.mouseClick(page.picker.use_pair_button, Qt.MouseButton.LeftButton)
    assert chosen.args == [str(folder / "target.gguf"), NGRAM_LOOKUP]


def test_import_by_drop_and_refusal_of_a_bad_file(qtbot, tmp_path: Path, tiny_draft: Path) -> None:
    page = make_page(qtbot)
    bad = tmp_path / "notes.gguf"
    bad.write_text("just text\n")
    page.imports.import_files([bad])
    assert "is not a GGUF model file" in page.message_label.text()

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(tiny_draft))])
    event = QDropEvent(
        QPointF(20, 20),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    with qtbot.waitSignal(page.imports.imported, timeout=30_000):  # the page lists it first
        page.dropEvent(event)
    assert page.local_box.table.rowCount() == 1
    assert page.local_box.table.item(0, 0).text() == "imported/draft.gguf"
    assert page.message_label.text() == "imported draft.gguf"


def shipped_page(qtbot, machine: MachineInfo = MACHINE, **kwargs) -> ModelsPage:  # type: ignore[no-untyped-def]
    page = ModelsPage(machine=machine, **kwargs)
    qtbot.addWidget(page)
    page.resize(1280, 800)
    page.show()
    return page


def recommended(page: ModelsPage) -> list[str]:
    return [
        c.accessibleName()
        for c in page.findChildren(QFrame, "pairCard")
        if c.findChild(QLabel, "recommendedBadge").isVisibleTo(page)
    ]


def test_the_shipped_catalog_as_cards_with_what_a_choice_needs(qtbot) -> None:
    page = shipped_page(qtbot)
    catalog = load_catalog()
    # Pairs for chat only in the chat app's list (the code-completion pair stays in the catalog).
    cards = page.catalog_section.card_grid.cards
    assert sorted(c.accessibleName() for c in cards) == sorted(
        p.title for p in catalog.pairs if p.is_for_chat
    )
    assert [p.name for p in catalog.pairs if not p.is_for_chat] == ["qwen2.5-coder-7b-0.5b"]
    # What holds for the whole machine is said once, above the cards, neutrally.
    assert "a draft model gains little on this computer" in page.catalog_section.machine_label.text()
    assert target_files(page) == []  # no file yet: the built-in models only, as the header lists

    builtin = card_named(page, "Gemma 3 270M with n-gram drafting (built in)")
    assert "offline" in text_of(builtin, "pairGoodFor")
    assert text_of(builtin, "pairSize") == "No download (253.1 MB)"
    assert button_named(builtin, "Set up Gemma 3 270M with n-gram drafting (built in)").text() == "Set up"
    assert "<b>2.4×</b>, by Tandem, measured" in text_of(
        builtin, "pairSpeedup"
    )  # the 2026-12-05 bench report
    assert (
        "FINDINGS" not in text_of(builtin, "pairSpeedup") and "shared/" not in builtin.accessibleDescription()
    )

    qwen = card_named(page, "Qwen2.5 7B Instruct + Qwen2.5 0.5B Instruct")
    assert "all-rounder" in text_of(qwen, "pairGoodFor")
    chips = [c.text() for c in qwen.chips]
    assert chips == ["5.2 GB download", "needs 8.6 GB memory", "Q4_K_M / Q8_0", "Apache-2.0"]
    assert "Q4_K_M, 4.7 GB" in qwen.findChild(QLabel, "pairSize").toolTip()  # each file, on demand
    assert text_of(qwen, "pairFit") == "✓ Fits in this computer's memory."
    speedup = text_of(qwen, "pairSpeedup")
    assert (
        "no published figure" in speedup
        and 'href="https://github.com/ggml-org/llama.cpp/issues/10664"' in speedup
    )
    llama = card_named(page, "Llama 3.1 8B Instruct + Llama 3.2 1B Instruct")
    speedup = text_of(llama, "pairSpeedup")
    assert "<b>1.7×</b>" in speedup and "oxfighterjet" in speedup
    assert 'href="https://github.com/ggml-org/llama.cpp/issues/5877"' in speedup
    assert "RTX 3060" in llama.findChild(QLabel, "pairSpeedup").toolTip()  # the setup behind it

    # On a CPU the smallest chat pair is recommended, with the reason on its card.
    assert recommended(page) == ["Qwen2.5 7B Instruct + Qwen2.5 0.5B Instruct"]
    assert "smallest chat pair" in text_of(qwen, "pairRecommendation")
    assert "Recommended for this machine" in qwen.accessibleDescription()
    # Cards lay out in columns, not a table.
    assert page.catalog_section.card_grid.columns == 3


def test_fit_and_recommendation_follow_memory_and_the_gpu(qtbot) -> None:
    small = shipped_page(qtbot, MachineInfo(total_ram_bytes=8 * GiB, has_gpu=False, gpu_label=""))
    gemma = card_named(small, "Gemma 3 12B IT + Gemma 3 1B IT")
    assert text_of(gemma, "pairFit") == "✗ Does not fit: needs 12.9 GB of memory; this machine has 8.6 GB."
    assert text_of(card_named(small, "Qwen2.5 7B Instruct + Qwen2.5 0.5B Instruct"), "pairFit").startswith(
        "✓ Fits"
    )
    assert recommended(small) == ["Qwen2.5 7B Instruct + Qwen2.5 0.5B Instruct"]

    tiny = shipped_page(qtbot, MachineInfo(total_ram_bytes=4 * GiB, has_gpu=False, gpu_label=""))
    assert recommended(tiny) == []  # nothing real fits: no badge anywhere

    gpu = MachineInfo(total_ram_bytes=64 * GiB, has_gpu=True, gpu_label="NVIDIA GPU", vram_bytes=7 * GiB)
    page = shipped_page(qtbot, gpu)
    # Before the engine says llama.cpp has a GPU backend, the GPU is not counted on.
    assert "runs on the CPU only" in text_of(card_named(page, "Qwen3 8B + Qwen3 0.6B"), "pairFit")
    assert "runs on the CPU" in page.catalog_section.machine_label.text()
    page.catalog_section.set_gpu_backend(True)
    assert recommended(page) == ["Qwen3 8B + Qwen3 0.6B"]  # the most capable pair in 7 GiB of VRAM
    assert text_of(card_named(page, "Qwen3 8B + Qwen3 0.6B"), "pairFit") == (
        "✓ Fits in memory and in NVIDIA GPU's 7.5 GB."
    )
    assert text_of(card_named(page, "Gemma 3 12B IT + Gemma 3 1B IT"), "pairFit") == (
        "✓ Fits in memory, but not in NVIDIA GPU's 7.5 GB (needs ≈ 9.7 GB): part of it runs on the CPU."
    )
    assert "NVIDIA GPU with 7.5 GB, used by llama.cpp" in page.catalog_section.machine_label.text()


def test_pairs_that_do_not_work_are_folded_away_until_asked_for(qtbot) -> None:
    page = shipped_page(qtbot)
    n_bad = len(load_catalog().incompatible)
    toggle = page.findChild(QToolButton, "incompatibleToggle")
    label = page.findChild(QLabel, "incompatibleLabel")
    assert toggle.text() == toggle.accessibleName() == f"Pairs that do not work ({n_bad})"
    assert not toggle.isChecked() and not label.isVisibleTo(page)  # closed by default
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    assert toggle.isChecked() and label.isVisibleTo(page)
    for bad in load_catalog().incompatible:
        assert html.escape(bad.reason) in label.text()
    assert label.text().count("<li>") == n_bad
    qtbot.mouseClick(toggle, Qt.MouseButton.LeftButton)
    assert not label.isVisibleTo(page)


def test_the_new_controls_have_accessible_names(qtbot) -> None:
    page = shipped_page(qtbot)
    for card in page.findChildren(QFrame, "pairCard"):
        title = card.accessibleName()
        assert title and "Fits in" in card.accessibleDescription()
        for button in card.findChildren(QPushButton):
            assert title in button.accessibleName(), button.text()
        assert (
            card.findChild(QProgressBar, "pairProgress").accessibleName() == f"Download progress of {title}"
        )
        assert card.findChild(QLabel, "pairSpeedup").accessibleName().startswith(("Reported", "No published"))
    assert page.findChild(QToolButton, "incompatibleToggle").accessibleName()
    assert page.picker.target_combo.accessibleName() == "Target model"
    assert page.local_box.table.accessibleName() == "Models on this computer"


def test_cards_follow_the_theme(qtbot) -> None:
    from ui.qt.theme import ThemeManager, own_palette

    page = shipped_page(qtbot)
    card = card_named(page, "Qwen2.5 7B Instruct + Qwen2.5 0.5B Instruct")
    manager = ThemeManager(Theme.LIGHT)
    try:
        light_base = own_palette(is_dark=False).color(QPalette.ColorRole.Base).name()
        dark_base = own_palette(is_dark=True).color(QPalette.ColorRole.Base).name()
        assert f"background: {light_base}" in card.styleSheet()
        fit_light = card.findChild(QLabel, "pairFit").styleSheet()
        manager.set_choice(Theme.DARK)  # the palette change reaches widgets as posted events
        qtbot.waitUntil(lambda: f"background: {dark_base}" in card.styleSheet(), timeout=5000)
        assert card.findChild(QLabel, "pairFit").styleSheet() != fit_light
        badge = card.findChild(QLabel, "recommendedBadge").styleSheet()
        assert own_palette(is_dark=True).color(QPalette.ColorRole.Highlight).name() in badge
        # Links too (a dark theme's link colour, not the light one's dark blue on a dark card).
        speedup = card.findChild(QLabel, "pairSpeedup")
        assert "<a href" in speedup.text()
        link = own_palette(is_dark=True).color(QPalette.ColorRole.Link).name()
        assert f'style="color: {link}"' in speedup.text()
    finally:
        manager.set_choice(Theme.SYSTEM)


def test_the_built_in_pair_in_use_says_so_and_offers_to_chat(
    qtbot, tmp_path: Path, tiny_target: Path
) -> None:
    page = shipped_page(qtbot)
    card = card_named(page, "Gemma 3 270M with n-gram drafting (built in)")
    set_up = button_named(card, "Set up Gemma 3 270M with n-gram drafting (built in)")
    use = button_named(card, "Chat with Gemma 3 270M with n-gram drafting (built in)")
    badge = card.findChild(QLabel, "inUseBadge")
    assert set_up.isVisibleTo(page) and not use.isVisibleTo(page) and not badge.isVisibleTo(page)
    # The engine runs a file of the built-in model's name, outside the models folder.
    built_in = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    shutil.copy(tiny_target, built_in)
    page.set_model_in_use(str(built_in))
    assert badge.isVisibleTo(page) and use.isVisibleTo(page) and not set_up.isVisibleTo(page)
    assert card.accessibleDescription().startswith("In use.")
    with qtbot.waitSignal(page.pair_chosen) as chosen:
        qtbot.mouseClick(use, Qt.MouseButton.LeftButton)
    assert chosen.args == [str(built_in.resolve()), NGRAM_LOOKUP]


def test_tab_order_follows_the_cards_layout(qtbot, hub: FakeHub) -> None:
    page = make_page(qtbot, hub)
    page.catalog_section.cards["tiny-pair"].set_running(True)  # Pause and Cancel shown, left of Download
    chain, widget = [], page.picker.target_combo
    for _ in range(500):
        if widget.isVisible() and widget.isEnabled() and widget.focusPolicy() & Qt.FocusPolicy.TabFocus:
            chain.append(widget)
        widget = widget.nextInFocusChain()
        if widget is page.picker.target_combo:
            break
    card = page.catalog_section.cards["tiny-pair"]
    in_card = [w for w in chain if card.isAncestorOf(w)]
    positions = [w.mapTo(card, w.rect().topLeft()) for w in in_card]
    assert [(p.y(), p.x()) for p in positions] == sorted((p.y(), p.x()) for p in positions)
    names = [w.accessibleName() for w in in_card]
    assert names == [
        "No published speedup figure. a test pair, see https://example.invalid",  # its link
        "Pause the download of Tiny target + tiny draft",
        "Cancel the download of Tiny target + tiny draft",
    ]  # (Download is disabled while it runs)
    # The page reads top to bottom: Chat with, the card, the folded pairs, local models, any file.
    order = [
        page.picker.target_combo,
        card.cancel_button,
        page.local_box.import_button,
        page.download_view.custom_box.repo_edit,
    ]
    assert [chain.index(w) for w in order] == sorted(chain.index(w) for w in order)


def cards_cut_off(page: ModelsPage) -> list[str]:
    """The cards not wholly inside the scroll area's viewport, left to right."""
    viewport = page.findChild(QScrollArea, "modelsScroll").viewport()
    cut = []
    for card in page.catalog_section.card_grid.cards:
        left = card.mapTo(viewport, QPoint(0, 0)).x()
        if left < 0 or left + card.width() > viewport.width():
            cut.append(f"{card.accessibleName()}: x {left} to {left + card.width()} of {viewport.width()}")
    return cut


def assert_within_its_width(page: ModelsPage) -> None:
    """Nothing wider than the window: no card cut off, no horizontal scrolling."""
    scroll = page.findChild(QScrollArea, "modelsScroll")
    assert scroll.viewport().width() > 0 and cards_cut_off(page) == []
    assert scroll.widget().width() <= scroll.viewport().width()
    assert scroll.horizontalScrollBar().maximum() == 0


@pytest.mark.parametrize(("width", "n_columns"), [(1000, 2), (1280, 3), (1600, 3)])
def test_the_cards_reflow_to_the_width_and_none_is_cut_off(qtbot, width: int, n_columns: int) -> None:
    # Bug: a card's chips in one row (two long licence names) made it 850 px at least, and the
    # grid kept 3 such columns: the page was 2000 px wide and the third card was cut off.
    page = shipped_page(qtbot)
    page.resize(width, 800)
    qtbot.waitUntil(lambda: assert_within_its_width(page), timeout=5_000)  # once laid out
    assert page.catalog_section.card_grid.columns == n_columns


def test_a_long_models_folder_path_does_not_widen_the_page(qtbot, tmp_path: Path) -> None:
    # Bug: the folder's path was written out on one line beside Import and Refresh; under a long
    # temporary folder the page grew 8 px wider than a 1000 px window (a horizontal scroll bar).
    models_dir = tmp_path.joinpath(*["a-rather-long-folder-name-" + str(i) for i in range(8)])
    models_dir.mkdir(parents=True)
    page = shipped_page(qtbot, models_dir=models_dir)
    page.resize(1000, 800)
    qtbot.waitUntil(lambda: assert_within_its_width(page), timeout=5_000)  # once laid out
    hint = page.local_box.findChild(QLabel, "modelsFolderHint")
    assert "Open the models folder" in hint.text() and hint.toolTip() == str(models_dir)
    shown = re.sub(r"<[^>]+>", "", hint.text())
    assert str(models_dir) not in shown  # a link to the folder, its path on hover
    assert QUrl(re.search(r'href="([^"]+)"', hint.text()).group(1)).toLocalFile() == str(models_dir)


def test_the_models_tab_of_a_1280_pixel_window_shows_every_card_whole(
    qtbot, open_window, tiny_target: Path
) -> None:
    window = open_window(tiny_target, wait_loaded=False)
    window.resize(1280, 800)
    window.tabs.setCurrentWidget(window.models_page)
    page = window.models_page
    qtbot.waitUntil(lambda: page.isVisible(), timeout=5_000)
    qtbot.waitUntil(lambda: assert_within_its_width(page), timeout=5_000)  # once laid out
    card = card_named(page, "Llama 3.1 8B Instruct + Llama 3.2 1B Instruct")  # the widest chips
    assert card.findChild(QPushButton, "pairDownload").isVisibleTo(page)
    assert [c.text() for c in card.chips if c.objectName() == "pairLicence"] == [
        "Llama 3.1 Community License",
        "Llama 3.2 Community License",
    ]  # one chip a licence: joined, they were one chip wider than a card


def test_a_card_says_what_this_computer_will_do_once_measured(qtbot) -> None:
    from app.library import measure
    from engine.config import default_threads

    machine = measure.machine_identity(default_threads())

    def keep(model: str, t_ms: dict[int, float], copy: float | None = None) -> None:
        measure.save_costs(
            measure.MeasuredCosts(model, t_ms, 1, machine, "2026-12-06 05:31 UTC", default_threads(), copy)
        )

    # The Qwen2.5 7B and 0.5B stand-ins' costs on this EPYC (issue 39's table), as the doctor keeps them.
    keep(
        "bartowski/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf",
        {1: 129, 2: 230, 4: 299, 8: 576, 16: 893, 32: 1788, 64: 3360},
        2.3,
    )
    keep("bartowski/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q8_0.gguf", {1: 11.7, 2: 19.1})
    page = shipped_page(qtbot)
    card = card_named(page, "Qwen2.5 7B Instruct + Qwen2.5 0.5B Instruct")
    assert text_of(card, "pairHere") == (
        "On this computer: plain about 7.8 tokens/s; copy work about 2.3×; a draft model does not pay here"
    )
    assert card.findChild(QLabel, "pairHere").isVisibleTo(page)
    assert text_of(card, "pairSpeedup").startswith("Reported speedup: no published figure")  # kept beside it
    # Not measured here: nothing said.
    other = card_named(page, "Llama 3.1 8B Instruct + Llama 3.2 1B Instruct")
    assert not other.findChild(QLabel, "pairHere").isVisibleTo(page)
    assert "<b>1.7×</b>" in text_of(other, "pairSpeedup")
