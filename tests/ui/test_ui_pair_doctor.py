# ruff: noqa: F811 - the hub fixtures are imported from test_pair_doctor and named as parameters
"""The pair doctor in the window (ui/models/pair_doctor_panel.py on the Models page), against the local
hub stand-in: search, check from headers only, drafts, download, chat; slow and absent hubs."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from hub_server import FakeHub, closed_port
from PySide6.QtCore import QTimer

from app import paths
from app.library.catalog import MachineInfo, parse_catalog
from app.store import Store
from engine.events import Speculation
from tests.app.test_pair_doctor import (  # noqa: F401 - fixtures
    BAD_DRAFT,
    DRAFT,
    TARGET,
    TARGET_REPO,
    file_of,
    hub,
    hub_files,
)
from tests.ui.test_pair_measured import hub_key
from ui.models.models_page import ModelsPage
from ui.models.pair_doctor_panel import PairDoctorPanel

TIMEOUT_MS = 30_000


@pytest.fixture(autouse=True)
def _quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A download the fake hub fails is tried again at once (by default a second later)."""
    from app.library import downloads

    monkeypatch.setattr(downloads, "BACKOFF_S", 0.01)


def _page(qtbot, tmp_path: Path) -> ModelsPage:  # type: ignore[no-untyped-def]
    machine = MachineInfo(total_ram_bytes=16 * 1024**3, has_gpu=False, gpu_label="")
    catalog = parse_catalog({"models": {}, "pairs": [], "incompatible": []})
    page = ModelsPage(catalog=catalog, models_dir=tmp_path / "models", machine=machine)
    qtbot.addWidget(page)
    page.resize(1000, 900)
    page.show()
    return page


def _idle(panel: PairDoctorPanel) -> bool:
    return not panel.busy_bar.isVisible()


def test_search_shows_files_by_quantisation_with_sizes_and_fit(qtbot, hub: FakeHub, tmp_path: Path) -> None:
    page = _page(qtbot, tmp_path)
    panel = page.doctor
    panel.search_edit.setText("tinyfam")
    panel.search_button.click()
    qtbot.waitUntil(lambda: panel.results.topLevelItemCount() == 3, timeout=TIMEOUT_MS)
    top = panel.results.topLevelItem(0)
    assert top.text(0) == f"{TARGET_REPO} · 500 downloads"
    files = [top.child(i) for i in range(top.childCount())]
    assert [f.text(0).split(" · ")[0] for f in files] == ["F32", "Q8_0"]
    assert all(f.text(2) == "fits" and f.text(1).endswith("kB") for f in files)
    assert "3 repositories" in panel.status_label.text()
    assert hub.recorded("cdn") == []


def test_picking_a_file_checks_it_and_offers_drafts_then_download_and_chat(
    qtbot, hub: FakeHub, tmp_path: Path
) -> None:
    page = _page(qtbot, tmp_path)
    panel = page.doctor
    panel.open_check(TARGET)
    qtbot.waitUntil(lambda: "Target: " + TARGET in panel.report_label.text(), timeout=TIMEOUT_MS)
    report = panel.report_label.text()
    assert "llama" in report and "has a chat template" in report and "Memory at 4,096 tokens" in report
    # Drafts: n-gram first, then the one that pairs; the one that does not is listed, disabled.
    qtbot.waitUntil(lambda: panel.drafts_list.count() == 3 and _idle(panel), timeout=TIMEOUT_MS)
    texts = [panel.drafts_list.item(i).text() for i in range(3)]
    assert texts[0].startswith("From the text (n-gram):")  # the window's name for it (ui/presenters/words.py)
    assert DRAFT in texts[1] and "pairs" in texts[1]
    assert BAD_DRAFT in texts[2] and "text of token 40" in texts[2]
    assert not panel.drafts_list.item(2).flags() & panel.drafts_list.item(2).flags().ItemIsEnabled
    # Choosing the draft checks the pair: the verdict, both KV caches, an estimate labelled so.
    panel.on_drafts_list_item_activated(panel.drafts_list.item(1))
    qtbot.waitUntil(lambda: "They pair" in panel.report_label.text(), timeout=TIMEOUT_MS)
    report = panel.report_label.text()
    assert "Draft: " + DRAFT in report and report.count("KV cache") == 2 and "Estimate:" in report
    for ref in (TARGET, DRAFT):
        f = file_of(hub, ref)
        assert hub.bytes_sent(f) < len(f.data) / 3  # nothing downloaded by checking
    assert panel.download_button.isEnabled() and not panel.chat_button.isEnabled()
    # Download through the resumable, verified downloader; then one click to chat.
    panel.download_button.click()
    qtbot.waitUntil(panel.chat_button.isEnabled, timeout=TIMEOUT_MS)
    target_path = tmp_path / "models" / "tandem-test--tinyfam-1B-GGUF" / "tinyfam-1B-F32.gguf"
    assert target_path.read_bytes() == file_of(hub, TARGET).data
    with qtbot.waitSignal(page.pair_chosen, timeout=TIMEOUT_MS) as chosen:
        panel.chat_button.click()
    assert chosen.args[0] == str(target_path) and chosen.args[1].model.endswith("tinyfam-0.1B-Q8_0.gguf")
    assert any(m.path == target_path for m in page.local_models)


def test_the_estimate_until_replies_measured_the_pair_then_the_measured_figure(
    qtbot, hub: FakeHub, tmp_path: Path
) -> None:
    panel = _page(qtbot, tmp_path).doctor
    panel.target_edit.setText(TARGET)
    panel.draft_edit.setText(DRAFT)
    panel.check_button.click()
    qtbot.waitUntil(lambda: "They pair" in panel.report_label.text(), timeout=TIMEOUT_MS)
    report = panel.report_label.text()
    assert "Estimate: " in report and "the measured figure replaces it" in report
    assert "Measured here" not in report

    # Three replies with this pair (and four with n-gram lookup) measured here, as the chat keeps them.
    store = Store(paths.database_path())
    for speedup in (1.9, 2.2, 2.6):
        store.add_pair_reply(
            hub_key(hub, TARGET), hub_key(hub, DRAFT), speedup, is_plain_estimate=False, n_generated=80
        )
    for speedup in (1.2, 1.3, 1.3, 1.5):
        store.add_pair_reply(
            hub_key(hub, TARGET), Speculation.NGRAM, speedup, is_plain_estimate=False, n_generated=80
        )
    store.close()
    panel.check_button.click()
    qtbot.waitUntil(lambda: "Measured here" in panel.report_label.text(), timeout=TIMEOUT_MS)
    report = panel.report_label.text()
    assert "Measured here: 2.2× faster over 3 replies." in report and "Estimate" not in report
    # The target alone: the drafts list gives each its own figure, n-gram lookup first.
    panel.draft_edit.clear()
    panel.check_button.click()
    qtbot.waitUntil(lambda: panel.drafts_list.count() == 3 and _idle(panel), timeout=TIMEOUT_MS)
    assert panel.drafts_list.item(0).text().endswith("measured here: 1.3× faster over 4 replies")
    assert "measured here: 2.2× faster over 3 replies" in panel.drafts_list.item(1).text()
    assert "n-gram lookup" not in panel.report_label.text() + panel.drafts_list.item(0).text()


def test_a_pair_that_does_not_pair_offers_no_download(qtbot, hub: FakeHub, tmp_path: Path) -> None:
    panel = _page(qtbot, tmp_path).doctor
    panel.target_edit.setText(TARGET)
    panel.draft_edit.setText(BAD_DRAFT)
    panel.check_button.click()
    qtbot.waitUntil(lambda: "do not pair" in panel.report_label.text(), timeout=TIMEOUT_MS)
    assert "text of token 40" in panel.report_label.text()
    assert not panel.download_button.isEnabled()


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("tandem-test/no-such-GGUF/x.gguf", "was not found on the hub"),
        ("tandem-test/odd-GGUF/notes.gguf", "is not a GGUF model file"),
        ("tandem-test/odd-GGUF/hostile.gguf", "claims"),
        (TARGET_REPO, "names no file"),
    ],
)
def test_bad_files_are_one_sentence(qtbot, hub: FakeHub, tmp_path: Path, target: str, fragment: str) -> None:
    page = _page(qtbot, tmp_path)
    panel = page.doctor
    panel.target_edit.setText(target)
    panel.check_button.click()
    qtbot.waitUntil(lambda: fragment in panel.status_label.text(), timeout=TIMEOUT_MS)
    assert "Traceback" not in panel.status_label.text() and "\n" not in panel.status_label.text()
    assert not panel.download_button.isEnabled()
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").rglob("*.gguf"))


def test_a_slow_hub_leaves_the_window_responsive_and_cancel_works(
    qtbot, hub: FakeHub, tmp_path: Path
) -> None:
    hub.delay_s = 5.0
    panel = _page(qtbot, tmp_path).doctor
    panel.search("tinyfam")
    # The event loop keeps running while the hub thinks: a timer fires, Cancel is there.
    ticks: list[int] = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(20)
    qtbot.waitUntil(lambda: len(ticks) >= 5, timeout=2_000)
    assert panel.cancel_button.isEnabled() and panel.busy_bar.isVisible()
    panel.cancel_button.click()
    assert panel.status_label.text() == "Cancelled." and not panel.busy_bar.isVisible()
    timer.stop()


def test_a_hub_that_is_down_is_one_sentence(qtbot, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    panel = _page(qtbot, tmp_path).doctor
    panel.search("qwen")
    qtbot.waitUntil(lambda: "Cannot reach the model hub" in panel.status_label.text(), timeout=TIMEOUT_MS)


def test_offline_says_so(qtbot, tmp_path: Path) -> None:
    panel = _page(qtbot, tmp_path).doctor
    panel.search("qwen")
    qtbot.waitUntil(lambda: "HF_HUB_OFFLINE" in panel.status_label.text(), timeout=TIMEOUT_MS)


def test_a_tandem_link_opens_the_check(qtbot, hub: FakeHub, tmp_path: Path) -> None:
    page = _page(qtbot, tmp_path)
    page.open_link(f"tandem://open_from_hf?model={TARGET_REPO}&file=tinyfam-1B-F32.gguf")
    qtbot.waitUntil(lambda: "Target: " + TARGET in page.doctor.report_label.text(), timeout=TIMEOUT_MS)
    page.open_link("tandem://open_from_hf?file=x.gguf")
    assert "names no repository" in page.doctor.status_label.text()


def test_the_window_takes_a_tandem_link_from_its_command_line() -> None:
    from app.gui import parse_args

    url = f"tandem://open_from_hf?model={TARGET_REPO}&file=tinyfam-1B-F32.gguf"
    assert parse_args([url]).link == url
    assert parse_args(["--model", "default", url]).link == url
    assert parse_args([]).link is None


def test_a_tandem_link_opens_the_models_page_of_the_window(
    qtbot, open_window, hub: FakeHub, tiny_target: Path
) -> None:
    window = open_window(tiny_target, wait_loaded=False)
    window.open_link(f"tandem://open_from_hf?model={TARGET_REPO}&file=tinyfam-1B-F32.gguf")
    assert window.tabs.currentWidget() is window.models_page
    doctor_panel = window.models_page.doctor
    assert doctor_panel.target_edit.text() == TARGET
    qtbot.waitUntil(lambda: "Target: " + TARGET in doctor_panel.report_label.text(), timeout=TIMEOUT_MS)


def test_a_search_shows_its_progress(qtbot, hub: FakeHub, tmp_path: Path) -> None:
    hub.delay_s = 0.2  # every answer a little late: the listings come in one by one
    panel = _page(qtbot, tmp_path).doctor
    shown: list[str] = []
    panel._signals.progressed.connect(lambda _ticket, text: shown.append(text))
    panel.search("tinyfam")
    qtbot.waitUntil(lambda: panel.results.topLevelItemCount() == 3, timeout=TIMEOUT_MS)
    assert any("files of 3 of 3 repositories" in text for text in shown)


def test_a_slow_hub_times_out_with_a_sentence(
    qtbot, hub: FakeHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.library import pair_doctor

    hub.delay_s = 3.0
    panel = _page(qtbot, tmp_path).doctor
    # The panel's hub calls wait the library's default; this one half a second.
    monkeypatch.setattr(pair_doctor, "check", functools.partial(pair_doctor.check, timeout_s=0.5))
    panel.target_edit.setText(TARGET)
    panel.check_button.click()
    qtbot.waitUntil(lambda: "0.5 s" in panel.status_label.text(), timeout=TIMEOUT_MS)
    assert not panel.busy_bar.isVisible()


def test_a_server_that_ignores_range_downloads_nothing(qtbot, hub: FakeHub, tmp_path: Path) -> None:
    hub.ignore_range = True
    panel = _page(qtbot, tmp_path).doctor
    panel.target_edit.setText(TARGET)
    panel.check_button.click()
    qtbot.waitUntil(lambda: "ignores byte ranges" in panel.status_label.text(), timeout=TIMEOUT_MS)
    assert "nothing was downloaded" in panel.status_label.text()
    assert not panel.download_button.isEnabled()
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").rglob("*.gguf"))


def _standins_left() -> list[Path]:
    from app.library.standin import standins_dir

    folder = standins_dir()
    try:
        return [p for p in folder.rglob("*") if p.is_file()]
    except FileNotFoundError:  # not there, or removed while listed (the measure's cleanup runs meanwhile)
        return []


def test_measure_on_this_computer_times_stand_ins_before_any_download(
    qtbot, hub: FakeHub, tmp_path: Path
) -> None:
    from tests.app.test_pair_doctor import nothing_downloaded

    page = _page(qtbot, tmp_path)
    panel = page.doctor
    assert not panel.measure_button.isEnabled()  # nothing checked yet
    panel.target_edit.setText(TARGET)
    panel.draft_edit.setText(DRAFT)
    panel.check_button.click()
    qtbot.waitUntil(lambda: "They pair" in panel.report_label.text() and _idle(panel), timeout=TIMEOUT_MS)
    assert panel.measure_button.isEnabled() and "On this computer" not in panel.report_label.text()
    assert "Estimate: " in panel.report_label.text()
    statuses: list[str] = []
    timer = QTimer()
    timer.timeout.connect(lambda: statuses.append(panel.status_label.text()))
    timer.start(10)
    panel.measure_button.click()
    qtbot.waitUntil(lambda: "On this computer" in panel.report_label.text(), timeout=120_000)
    timer.stop()
    # Issue 47: one plain line first ("0.29×" read as "3.4× slower"), the figures behind "why".
    first = re.search(r"<b>(On this computer: [^<]*)</b>", panel.report_label.text())
    assert first is not None and "this draft model about " in first[1]
    assert re.search(r"about \d+\.\d× (faster|slower)|about as fast", first[1])
    assert "The draft model: about " not in panel.report_label.text()
    panel.report_label.linkActivated.emit("why")
    report = panel.report_label.text()
    assert re.search(
        r"The draft model: about \d+\.\d× (faster|slower)|The draft model: about as fast", report
    )
    assert "plain replies at about " in report and " tokens/s" in report
    assert "Copy and edit work with “From the text (n-gram)”" in report and "at most " in report
    assert "The draft model: about " in report and "llama.cpp issue #5877" in report
    assert "it pays here: " in report or "it does not pay here: " in report  # and why
    assert "Estimate: " not in report  # measured here, on stand-ins: the guess goes
    assert any(s.startswith("Measuring on this computer: ") and "%" in s for s in statuses)
    assert "nothing was downloaded" in panel.status_label.text()
    assert nothing_downloaded() and not _standins_left()
    assert panel.measure_button.isEnabled()
    # Kept for this machine: a later check of the same pair shows the figures without measuring.
    panel.check_button.click()
    qtbot.waitUntil(lambda: "They pair" in panel.report_label.text() and _idle(panel), timeout=TIMEOUT_MS)
    assert "On this computer" in panel.report_label.text()


def test_measure_cancel_stops_at_once_and_leaves_nothing(qtbot, hub: FakeHub, tmp_path: Path) -> None:
    panel = _page(qtbot, tmp_path).doctor
    panel.target_edit.setText(TARGET)
    panel.check_button.click()
    qtbot.waitUntil(lambda: panel.measure_button.isEnabled(), timeout=TIMEOUT_MS)
    panel.cancel()  # the drafts search started by the check: not what is measured here
    panel.measure_button.click()
    # Cancelled while the spawned process loads or times the stand-in.
    qtbot.waitUntil(lambda: "%, loading" in panel.status_label.text(), timeout=30_000)
    # Issue 47: its own Cancel and bar beside Measure (the hub search's Cancel is not its).
    assert panel.measure_cancel_button.isVisibleTo(panel) and panel.measure_bar.isVisibleTo(panel)
    assert not panel.cancel_button.isEnabled() and not panel.progress_bar.isVisibleTo(panel)
    panel.measure_cancel_button.click()
    assert not panel.measure_cancel_button.isVisibleTo(panel) and not panel.measure_bar.isVisibleTo(panel)
    assert panel.status_label.text() == "Cancelled." and panel.measure_button.isEnabled()
    qtbot.waitUntil(lambda: not _standins_left(), timeout=2_000)
    assert "On this computer" not in panel.report_label.text()


def test_a_measured_ratio_below_one_is_said_as_slower() -> None:
    # Review ux-3 #8: "about 0.29× at 72% of its guesses accepted" meant about 3.4× slower.
    from app.library.measure import times_words

    assert times_words(0.29) == "about 3.4× slower"
    assert times_words(1.3) == "about 1.3× faster"
    assert times_words(1.01) == "about as fast"


def test_a_checked_local_pair_shows_no_stale_progress_bar(
    qtbot, tmp_path: Path, tiny_target: Path, tiny_draft: Path
) -> None:
    # Review ux-3 #8: a 100% bar sat under the panel after checking two files already here.
    panel = _page(qtbot, tmp_path).doctor
    panel.target_edit.setText(str(tiny_target))
    panel.draft_edit.setText(str(tiny_draft))
    panel.check_button.click()
    qtbot.waitUntil(lambda: "They pair" in panel.report_label.text() and _idle(panel), timeout=TIMEOUT_MS)
    assert panel.chat_button.isEnabled()  # both here: nothing to download
    assert not panel.progress_bar.isVisibleTo(panel)
