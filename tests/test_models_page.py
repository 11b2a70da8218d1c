"""The models page under pytest-qt: real widgets, real downloads from the fake hub on 127.0.0.1."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hub_server import TINY_DRAFT_REPO, TINY_REPO, FakeHub, tiny_pair_catalog

pytest.importorskip("pytestqt")

from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDropEvent  # noqa: E402

from app import paths  # noqa: E402
from app.library.catalog import MachineInfo, parse_catalog  # noqa: E402
from ui.models_page import CUSTOM_KEY, ModelsPage  # noqa: E402

REPO, DRAFT_REPO = TINY_REPO, TINY_DRAFT_REPO  # served by the `hub` fixture (conftest.py)
GiB = 1024**3
MACHINE = MachineInfo(total_ram_bytes=16 * GiB, has_gpu=False, gpu_label="")


def make_page(qtbot, hub: FakeHub | None = None) -> ModelsPage:
    catalog = None
    if hub is not None:
        data = tiny_pair_catalog(
            hub.repos[REPO].files["tiny-target.gguf"], hub.repos[DRAFT_REPO].files["tiny-draft.gguf"]
        )
        catalog = parse_catalog(data)
    page = ModelsPage(catalog=catalog, machine=MACHINE, download_options={"backoff_s": 0.01})
    qtbot.addWidget(page)
    page.resize(1100, 800)
    page.show()
    return page


def test_page_downloads_a_pair_with_live_progress_and_lists_the_files(qtbot, hub: FakeHub) -> None:
    page = make_page(qtbot, hub)
    assert page.local_table.rowCount() == 0
    assert page.catalog_table.item(0, 2).text() == "yes"
    hub.throttle_s = 0.01  # about a second per file: several progress updates reach the window
    values: list[int] = []
    page.progress_bars["tiny-pair"].valueChanged.connect(values.append)
    texts: list[str] = []

    def is_midway() -> bool:
        texts.append(page.status_labels["tiny-pair"].text())
        return 0 < page.progress_bars["tiny-pair"].value() < 1000

    with qtbot.waitSignal(page.models_changed, timeout=60_000):
        qtbot.mouseClick(page.download_buttons["tiny-pair"], Qt.MouseButton.LeftButton)
        assert not page.download_buttons["tiny-pair"].isEnabled()
        assert page.pause_buttons["tiny-pair"].isEnabled()
        qtbot.waitUntil(is_midway, timeout=30_000)

    assert any(0 < v < 500 for v in values) and any(500 <= v < 1000 for v in values)
    assert page.progress_bars["tiny-pair"].value() == 1000
    assert any(" of " in t and "/s" in t for t in texts)
    assert page.status_labels["tiny-pair"].text() == "downloaded: tiny-target.gguf, tiny-draft.gguf"
    assert page.download_buttons["tiny-pair"].isEnabled() and not page.pause_buttons["tiny-pair"].isEnabled()
    files = {page.local_table.item(r, 0).text() for r in range(page.local_table.rowCount())}
    assert files == {
        "tandem-test--tiny-target-GGUF/tiny-target.gguf",
        "tandem-test--tiny-draft-GGUF/tiny-draft.gguf",
    }
    assert page.local_table.item(0, 2).text() == "llama"
    assert page.target_combo.count() == 2


def test_pause_keeps_the_part_and_download_resumes_it(qtbot, hub: FakeHub) -> None:
    page = make_page(qtbot, hub)
    hub.throttle_s = 0.02
    qtbot.mouseClick(page.download_buttons["tiny-pair"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.progress_bars["tiny-pair"].value() > 100, timeout=30_000)
    qtbot.mouseClick(page.pause_buttons["tiny-pair"], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.download_buttons["tiny-pair"].isEnabled(), timeout=30_000)
    assert "paused" in page.status_labels["tiny-pair"].text()
    part = paths.models_dir() / "tandem-test--tiny-target-GGUF" / "tiny-target.gguf.part"
    kept = part.stat().st_size
    assert kept > 0

    hub.throttle_s = 0.0
    with qtbot.waitSignal(page.models_changed, timeout=60_000):
        qtbot.mouseClick(page.download_buttons["tiny-pair"], Qt.MouseButton.LeftButton)
    assert hub.range_headers(hub.repos[REPO].files["tiny-target.gguf"])[-1] == f"bytes={kept}-"
    assert page.local_table.rowCount() == 2


def test_a_failed_download_shows_its_sentence(qtbot, hub: FakeHub) -> None:
    page = make_page(qtbot, hub)
    page.repo_edit.setText(REPO)
    page.file_edit.setText("missing.gguf")
    qtbot.mouseClick(page.download_buttons[CUSTOM_KEY], Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.download_buttons[CUSTOM_KEY].isEnabled(), timeout=30_000)
    assert "missing.gguf was not found in the repository" in page.status_labels[CUSTOM_KEY].text()


def test_pair_picker_offers_only_compatible_drafts_and_explains_the_others(
    qtbot, tiny_target: Path, tiny_draft: Path, tiny_incompatible: Path
) -> None:
    folder = paths.models_dir()
    for f in (tiny_target, tiny_draft, tiny_incompatible):
        shutil.copy(f, folder / f.name)
    page = make_page(qtbot)
    target_index = page.target_combo.findData(str(folder / "target.gguf"))
    page.target_combo.setCurrentIndex(target_index)

    combo = page.draft_combo
    entries = {combo.itemData(i): i for i in range(combo.count())}
    assert list(entries)[:2] == ["ngram", "none"]
    draft_i, other_i = entries[str(folder / "draft.gguf")], entries[str(folder / "other-vocab.gguf")]
    assert page.is_draft_enabled(draft_i) and not page.is_draft_enabled(other_i)
    assert "text of token 40" in combo.itemData(other_i, Qt.ItemDataRole.ToolTipRole)
    assert "other-vocab.gguf" in page.pair_explanation.text()
    assert "text of token 40" in page.pair_explanation.text()

    combo.setCurrentIndex(draft_i)
    with qtbot.waitSignal(page.pair_chosen) as chosen:
        qtbot.mouseClick(page.use_pair_button, Qt.MouseButton.LeftButton)
    assert chosen.args == [str(folder / "target.gguf"), str(folder / "draft.gguf")]

    combo.setCurrentIndex(other_i)  # programmatically; a user cannot pick a disabled entry
    with qtbot.assertNotEmitted(page.pair_chosen):
        qtbot.mouseClick(page.use_pair_button, Qt.MouseButton.LeftButton)

    combo.setCurrentIndex(entries["ngram"])
    with qtbot.waitSignal(page.pair_chosen) as chosen:
        qtbot.mouseClick(page.use_pair_button, Qt.MouseButton.LeftButton)
    assert chosen.args == [str(folder / "target.gguf"), "ngram"]


def test_import_by_drop_and_refusal_of_a_bad_file(qtbot, tmp_path: Path, tiny_draft: Path) -> None:
    page = make_page(qtbot)
    bad = tmp_path / "notes.gguf"
    bad.write_text("just text\n")
    page.import_files([bad])
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
    with qtbot.waitSignal(page.models_changed, timeout=30_000):
        page.dropEvent(event)
    assert page.local_table.rowCount() == 1
    assert page.local_table.item(0, 0).text() == "imported/draft.gguf"
    assert page.message_label.text() == "imported draft.gguf"


def test_page_builds_from_the_shipped_catalog(qtbot) -> None:
    page = ModelsPage()
    qtbot.addWidget(page)
    assert page.catalog_table.rowCount() >= 6
    assert page.download_buttons["gemma-3-270m-ngram"].text() == "Set up"
    assert "Pairs that do not work" in page.findChild(type(page.message_label), "incompatibleLabel").text()
    assert page.target_combo.count() == 0 and not page.use_pair_button.isEnabled()
