"""Chat sampling defaults in the window's settings, greedy one click away, the CLI still greedy."""

from __future__ import annotations

import json

import pytest

from app import paths
from app.cli.cli import build_parser
from app.settings import Settings, load_settings, save_settings
from engine.chat import CHAT_SAMPLING
from engine.config import DRAFT_MAX, NGRAM_LOOKUP, PLAIN_DECODING, DraftChoice, EngineConfig

pytest.importorskip("pytestqt")

from ui.settings.settings_dialog import SettingsDialog  # noqa: E402


def test_window_defaults_are_the_chat_sampling_and_the_cli_stays_greedy() -> None:
    settings = Settings()
    assert settings.sampling() == CHAT_SAMPLING
    assert 0.5 <= CHAT_SAMPLING.temperature <= 0.8 and CHAT_SAMPLING.top_p == 0.95
    assert CHAT_SAMPLING.min_p == 0.05 and CHAT_SAMPLING.repeat_penalty == 1.1
    assert CHAT_SAMPLING.repeat_last_n == 64
    args = build_parser().parse_args(["generate", "--model", "m.gguf", "--prompt", "hi"])
    assert args.temperature == 0.0 and args.repeat_penalty == 1.0


def test_a_settings_file_from_before_the_chat_defaults_takes_them() -> None:
    # Every file written before said temperature 0, chosen or not, and had no repetition penalty.
    paths.settings_path().write_text(json.dumps({"temperature": 0.0, "top_k": 40, "n_ctx": 2048}))
    settings = load_settings()
    assert settings.temperature == CHAT_SAMPLING.temperature and settings.n_ctx == 2048
    # A greedy choice made since is kept.
    paths.settings_path().write_text(json.dumps({"temperature": 0.0, "repeat_penalty": 1.1}))
    assert load_settings().temperature == 0.0


def test_the_longest_draft_is_the_engines_and_an_old_files_16_takes_it() -> None:
    # The window once capped drafts at 16 and every settings file said so: copying then drafted
    # 16 tokens a step in the window where `tandem bench` measured 40-63.
    assert Settings().draft_max == DRAFT_MAX == EngineConfig("m.gguf").draft_max > 16
    args = build_parser().parse_args(["generate", "--model", "m.gguf", "--prompt", "hi"])
    assert args.draft_max == DRAFT_MAX
    paths.settings_path().write_text(json.dumps({"draft_max": 16, "n_ctx": 2048}))
    assert load_settings().draft_max == DRAFT_MAX and load_settings().n_ctx == 2048
    # A 16 chosen since (a file of the new format) is kept, as is any other length.
    save_settings(Settings(draft_max=16))
    assert load_settings().draft_max == 16
    paths.settings_path().write_text(json.dumps({"draft_max": 8}))
    assert load_settings().draft_max == 8
    # A hand-edited format that is not a number is an old file, not a broken one.
    paths.settings_path().write_text(json.dumps({"format": "two", "draft_max": 16, "n_ctx": 2048}))
    assert load_settings().draft_max == DRAFT_MAX and load_settings().n_ctx == 2048


def test_the_draft_choice_is_read_once_from_the_file_and_the_command_line_and_written_as_text() -> None:
    # Files written before the draft choice was typed held its text: they load as they read.
    for text, draft in [
        ("none", PLAIN_DECODING),
        ("ngram", NGRAM_LOOKUP),
        ("/models/d.gguf", DraftChoice.of_model("/models/d.gguf")),
        ("default", DraftChoice.of_model("default")),
    ]:
        paths.settings_path().write_text(json.dumps({"draft": text, "n_ctx": 2048}))
        assert load_settings().draft == draft and load_settings().n_ctx == 2048
        save_settings(load_settings())
        assert json.loads(paths.settings_path().read_text())["draft"] == text
    paths.settings_path().write_text(json.dumps({"draft": 3, "n_ctx": 2048}))  # hand-edited: the default
    assert load_settings().draft == Settings().draft == NGRAM_LOOKUP and load_settings().n_ctx == 2048
    # The command line reads --draft once, into the same value.
    args = build_parser().parse_args(["generate", "--model", "m.gguf", "--prompt", "hi", "--draft", "ngram"])
    assert args.draft == NGRAM_LOOKUP
    assert (
        build_parser().parse_args(["generate", "--model", "m.gguf", "--prompt", "hi"]).draft == PLAIN_DECODING
    )
    assert build_parser().parse_args(["bench", "--draft", "d.gguf"]).draft == DraftChoice.of_model("d.gguf")


def test_greedy_is_one_click_and_chat_defaults_another(qtbot) -> None:
    dialog = SettingsDialog(Settings(), gpu_offload_supported=False)
    qtbot.addWidget(dialog)
    assert not dialog.greedy.isChecked() and dialog.temperature.value() == pytest.approx(0.7)
    assert dialog.repeat_penalty.value() == pytest.approx(1.1) and dialog.repeat_last_n.value() == 64

    dialog.greedy.click()
    assert dialog.temperature.value() == 0.0 and not dialog.top_p.isEnabled()
    greedy = dialog.result_settings()
    assert greedy.sampling().is_greedy
    assert greedy.repeat_penalty == pytest.approx(1.1)  # greedy keeps the loop guard

    dialog.greedy.click()  # back: the temperature it had
    assert dialog.temperature.value() == pytest.approx(0.7) and dialog.top_p.isEnabled()

    dialog.temperature.setValue(1.3)
    dialog.repeat_penalty.setValue(1.0)
    dialog.chat_defaults_button.click()
    restored = dialog.result_settings()
    assert restored.sampling() == CHAT_SAMPLING

    dialog.temperature.setValue(0.0)  # typing 0 is greedy too
    assert dialog.greedy.isChecked()


def test_a_greedy_settings_file_opens_with_the_box_ticked(qtbot) -> None:
    dialog = SettingsDialog(Settings(temperature=0.0), gpu_offload_supported=False)
    qtbot.addWidget(dialog)
    assert dialog.greedy.isChecked() and not dialog.min_p.isEnabled()


def test_settings_speak_plain_words_with_the_technical_name_in_brackets(qtbot) -> None:
    """Every field's label is a plain phrase; a well-known technical name (top-k, min-p...) only
    follows it in brackets, for people who look for it, never on its own."""
    import re

    from PySide6.QtWidgets import QFormLayout, QLabel

    dialog = SettingsDialog(Settings(), gpu_offload_supported=False)
    qtbot.addWidget(dialog)
    assert [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())] == [
        "Chat", "Speed-up", "Engine", "Serve API"
    ]  # fmt: skip
    labels = []
    for form in dialog.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
            if item is not None and isinstance(item.widget(), QLabel):
                labels.append(item.widget().text())
    assert len(labels) >= 15
    jargon = ("top-k", "top-p", "min-p", "temperature", "draft length", "repetition penalty", "rpc")
    for text in labels:
        outside_brackets = re.sub(r"\([^)]*\)", "", text).lower()
        assert not any(word in outside_brackets for word in jargon), text
    assert "Choose among the likeliest (top-k):" in labels and "Variety (temperature):" in labels
