"""Settings in four tabs a person can read: Chat (look, reply length, how replies are chosen),
Speed-up (drafting), Engine (this computer or a server, threads, memory, GPUs), Serve API.

Labels are plain words; where a field has a well-known technical name (top-k, min-p) it follows
in brackets, so people who know it can find it and people who do not can read the label."""

from __future__ import annotations

import dataclasses
from operator import attrgetter

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.settings import Settings, Theme
from engine.chat import CHAT_SAMPLING
from engine.config import default_threads
from engine.rpc import RpcError, parse_servers
from ui.qt import theme
from ui.qt.widgets import button, label, named

ENGINE_TAB = 2  # Chat, Speed-up, Engine, Serve API


class SettingsDialog(QDialog):
    def __init__(
        self, settings: Settings, gpu_offload_supported: bool, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings — Tandem")
        self._settings = settings
        layout = QVBoxLayout(self)
        self.tabs = named(QTabWidget(), "settingsTabs")
        self.tabs.tabBar().setAccessibleName("Settings sections")
        layout.addWidget(self.tabs)

        chat = self._tab("Chat")
        from ui.qt.theme import THEME_CHOICES

        self.theme = named(QComboBox(), "themeCombo")
        for name, value in THEME_CHOICES:
            self.theme.addItem(name, value)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.theme)))
        _row(chat, "Theme", self.theme, "System follows the desktop's light or dark scheme")

        self.max_tokens = QSpinBox(minimum=16, maximum=32768, suffix=" tokens", value=settings.max_tokens)
        _row(
            chat,
            "Longest reply",
            self.max_tokens,
            "A token is a word or part of one; a reply stops here at the latest",
        )

        sampling_row = QHBoxLayout()
        self.greedy = named(QCheckBox("Exact: always the likeliest word"), "greedyCheck")
        self.greedy.setToolTip(
            "Temperature 0 (greedy): the same message gives the same reply. The speed-up is exact "
            "either way: it never changes what the model would write."
        )
        self.greedy.setChecked(settings.temperature <= 0.0)
        self.greedy.toggled.connect(self.on_greedy_toggled)
        sampling_row.addWidget(self.greedy)
        self.chat_defaults_button = button("Chat defaults", clicked=self.on_chat_defaults_button_clicked)
        self.chat_defaults_button.setToolTip(
            f"Variety {CHAT_SAMPLING.temperature}, the likeliest {CHAT_SAMPLING.top_k}, "
            f"{CHAT_SAMPLING.top_p:.0%} of the likelihood, at least {CHAT_SAMPLING.min_p:.0%} as likely, "
            f"repeats discouraged {CHAT_SAMPLING.repeat_penalty} over the last "
            f"{CHAT_SAMPLING.repeat_last_n} tokens"
        )
        sampling_row.addWidget(self.chat_defaults_button)
        sampling_row.addStretch(1)
        chat.addRow("Replies:", sampling_row)

        self.temperature = QDoubleSpinBox(maximum=2.0, singleStep=0.1, value=settings.temperature)
        self.temperature.valueChanged.connect(self.on_temperature_value_changed)
        tip = "0 is exact: the same message gives the same reply; higher varies more"
        _row(chat, "Variety (temperature)", self.temperature, tip)
        self._last_temperature = (
            settings.temperature if settings.temperature > 0 else CHAT_SAMPLING.temperature
        )

        self.top_k = QSpinBox(maximum=1000, suffix=" tokens", value=settings.top_k)
        self.top_k.setSpecialValueText("no limit")
        tip = "Each next word is chosen among this many of the likeliest; 0: no limit"
        _row(chat, "Choose among the likeliest (top-k)", self.top_k, tip)
        self.top_p = QDoubleSpinBox(maximum=1.0, singleStep=0.05, value=settings.top_p)
        tip = "Only the likeliest words that together make up this share are kept; 1: all"
        _row(chat, "Share of the likelihood kept (top-p)", self.top_p, tip)
        self.min_p = QDoubleSpinBox(maximum=1.0, singleStep=0.01, value=settings.min_p)
        tip = "Words less likely than this share of the likeliest word's chance are left out; 0: none"
        _row(chat, "Leave out unlikely words (min-p)", self.min_p, tip)
        self.repeat_penalty = QDoubleSpinBox(
            minimum=1.0, maximum=2.0, singleStep=0.05, value=settings.repeat_penalty
        )
        tip = "1.0 is off; above 1 makes words used recently less likely"
        _row(chat, "Discourage repeats (repetition penalty)", self.repeat_penalty, tip)
        self.repeat_last_n = QSpinBox(maximum=4096, suffix=" tokens", value=settings.repeat_last_n)
        self.repeat_last_n.setAccessibleName("Repeats counted within the last")
        chat.addRow("…counted within the last:", self.repeat_last_n)

        speed = self._tab("Speed-up")
        about = label(
            "While the model writes, Tandem guesses the next words (from the text so far, or with a "
            "small draft model) and the model checks the guesses all at once. The reply is the same "
            "as without the speed-up, only sooner. Which guesser runs is chosen in the chat's header."
        )
        speed.addRow(about)
        self.adaptive = QCheckBox("Choose how far to guess, step by step")
        self.adaptive.setChecked(settings.adaptive)
        self.adaptive.setToolTip(
            "Adaptive draft length: guess further while guesses are kept, less when they are not, "
            "priced against what checking costs on this computer"
        )
        speed.addRow("", self.adaptive)

        self.draft_max = QSpinBox(minimum=1, maximum=64, suffix=" tokens", value=settings.draft_max)
        tip = "The longest guess checked in one step (when chosen step by step, the most)"
        _row(speed, "Guess at most (draft length)", self.draft_max, tip)

        form = self._tab("Engine")
        from ui.settings.remote_engine import RemoteEngineFields

        self.remote = RemoteEngineFields(settings, form, self)  # Engine: this computer or a server

        self.threads = QSpinBox(maximum=256, value=settings.n_threads or 0)
        self.threads.setSpecialValueText(f"automatic ({default_threads()})")
        _row(form, "Processor threads", self.threads)
        self.context = QSpinBox(
            minimum=512, maximum=262144, singleStep=512, suffix=" tokens", value=settings.n_ctx
        )
        tip = "How much of the conversation and its documents the model reads at once; more takes more memory"
        _row(form, "Conversation memory (context)", self.context, tip)
        self.gpu_layers = QSpinBox(maximum=999, value=settings.n_gpu_layers)
        self.gpu_layers.setEnabled(gpu_offload_supported)
        cpu_only = (
            "" if gpu_offload_supported else "This copy of Tandem runs models on the processor only (no GPU)."
        )
        _row(form, "Layers on the GPU", self.gpu_layers, cpu_only)
        if cpu_only:
            form.addRow("", label(cpu_only))

        tip = (
            "Machines running `tandem rpc-server`: the model's GPU layers go there, the draft "
            "model stays here. The protocol has no password: use a trusted network only."
        )
        rpc = QLineEdit(settings.rpc_servers, placeholderText="none (HOST:PORT, HOST:PORT…)")
        self.rpc_servers = named(rpc, "rpcServersEdit", "Other computers' GPUs (RPC servers)", tip)
        self.rpc_servers.textChanged.connect(self.on_rpc_servers_text_changed)
        form.addRow("Other computers' GPUs (RPC):", self.rpc_servers)
        self.rpc_error = label("", "rpcServersError", hidden=True)
        theme.set_tone(self.rpc_error, "error")
        form.addRow("", self.rpc_error)
        self._gpu_offload_supported = gpu_offload_supported
        self.on_rpc_servers_text_changed(self.rpc_servers.text())

        self.on_greedy_toggled(self.greedy.isChecked())  # top-k, top-p and min-p: off while exact
        # Read by the local engine only: greyed out, with a tooltip saying so, while "A server" is chosen.
        self.remote.set_local_only([self.threads, self.context, self.gpu_layers, self.rpc_servers,
                                    self.repeat_last_n, self.adaptive, self.draft_max])  # fmt: skip

        from ui.settings.serve_settings import ServeFields

        serve = self._tab("Serve API")
        serve_about = label(
            "Other programs on this computer can use the chat's model through an OpenAI-compatible "
            "API while Serve API is on (the toolbar's switch)."
        )
        serve.addRow(serve_about)
        self.serve = ServeFields(settings, serve, self)  # Serve API: port, key, other computers
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def _tab(self, title: str) -> QFormLayout:
        page = QWidget()
        form = QFormLayout(page)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.DontWrapRows)
        self.tabs.addTab(page, title)
        return form

    def result_settings(self) -> Settings:
        chosen = dataclasses.replace(
            self._settings,
            n_threads=self.threads.value() or None,
            n_ctx=self.context.value(),
            n_gpu_layers=self.gpu_layers.value(),
            rpc_servers=", ".join(parse_servers(self.rpc_servers.text())),  # checked by accept()
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            repeat_penalty=self.repeat_penalty.value(),
            repeat_last_n=self.repeat_last_n.value(),
            max_tokens=self.max_tokens.value(),
            adaptive=self.adaptive.isChecked(),
            draft_max=self.draft_max.value(),
            theme=Theme(self.theme.currentData()),
        )
        return self.serve.applied_to(self.remote.applied_to(chosen))  # Engine's server, Serve API

    def on_rpc_servers_text_changed(self, text: str) -> None:
        # RPC servers are where the GPU layers go, in any build.
        self.gpu_layers.setEnabled(self._gpu_offload_supported or bool(text.strip()))
        self.rpc_error.setVisible(False)

    def accept(self) -> None:
        """Refuse an RPC server list that cannot work, with the reason under the field."""
        if not self.remote.check():  # a server address that cannot work: said under it
            self.tabs.setCurrentIndex(ENGINE_TAB)
            return

        try:
            servers = parse_servers(self.rpc_servers.text())
            if servers and self.gpu_layers.value() < 1:
                raise RpcError(
                    "GPU layers says how many layers go to the RPC servers: set it (999: all of them)"
                )
        except RpcError as e:
            self.tabs.setCurrentIndex(ENGINE_TAB)
            self.rpc_error.setText(str(e))
            self.rpc_error.setVisible(True)
            self.rpc_servers.setFocus()
            return
        super().accept()

    def on_greedy_toggled(self, is_checked: bool) -> None:
        if is_checked:
            if self.temperature.value() > 0:
                self._last_temperature = self.temperature.value()
            self.temperature.setValue(0.0)
        elif self.temperature.value() <= 0:
            self.temperature.setValue(self._last_temperature)
        for box in (self.top_k, self.top_p, self.min_p):
            box.setEnabled(not is_checked)

    def on_temperature_value_changed(self, value: float) -> None:
        if (value <= 0.0) != self.greedy.isChecked():
            self.greedy.setChecked(value <= 0.0)

    def on_chat_defaults_button_clicked(self) -> None:
        self.temperature.setValue(CHAT_SAMPLING.temperature)
        self.top_k.setValue(CHAT_SAMPLING.top_k)
        self.top_p.setValue(CHAT_SAMPLING.top_p)
        self.min_p.setValue(CHAT_SAMPLING.min_p)
        self.repeat_penalty.setValue(CHAT_SAMPLING.repeat_penalty)
        self.repeat_last_n.setValue(CHAT_SAMPLING.repeat_last_n)


def _row(form: QFormLayout, name: str, box: QWidget, tip: str = "") -> None:
    """A labelled row of the form; its label is the field's accessible name too."""
    box.setAccessibleName(name)
    box.setToolTip(tip)
    form.addRow(name + ":", box)


def needs_reload(before: Settings, after: Settings) -> bool:
    """Whether the engine loads again: what it is configured with changed (Settings.engine_config),
    or the server used (one used or left, its address, key or model; a server's fields edited while
    none is used change nothing). Sampling applies from the next reply."""
    if before.engine_config("") != after.engine_config(""):
        return True
    if not (before.is_remote or after.is_remote):
        return False
    server = attrgetter("is_remote", "remote_url", "remote_api_key", "remote_model")
    return bool(server(before) != server(after))
