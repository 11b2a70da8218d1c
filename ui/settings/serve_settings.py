"""Settings → the "Serve API" switch (ui/settings/serve_toggle.py): its port, API key and who may connect."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from app.settings import Settings
from ui.qt import theme
from ui.qt.widgets import button, label, named

OPEN_WARNING = "Without an API key, anyone who can reach this computer on the network can use the model."


class ServeFields(QObject):
    def __init__(self, settings: Settings, form: QFormLayout, parent: QWidget) -> None:
        super().__init__(parent)
        tip = (
            "Where Serve API listens (8080 by default). A port another program uses is refused "
            "when serving starts, with the reason in the status bar."
        )
        port = QSpinBox(minimum=1, maximum=65535, value=settings.serve_port)
        self.port = named(port, "servePortSpin", "API port", tip)
        form.addRow("API port:", self.port)

        row = QHBoxLayout()
        tip = (
            "Programs must send 'Authorization: Bearer KEY'; others get 401. Kept in Tandem's settings file."
        )
        key = QLineEdit(
            settings.serve_api_key, echoMode=QLineEdit.EchoMode.Password, placeholderText="none (optional)"
        )
        self.api_key = named(key, "serveKeyEdit", "API key for Serve API", tip)
        row.addWidget(self.api_key, 1)
        self.show_key = button("Show", "serveKeyShowButton", tip="Show or hide the key")
        self.show_key.setCheckable(True)
        self.show_key.toggled.connect(self.on_show_key_toggled)
        row.addWidget(self.show_key)
        form.addRow("API key:", row)

        tip = "Listen on every network interface (0.0.0.0) instead of this computer only (127.0.0.1)"
        self.public = named(QCheckBox("Allow other computers to connect"), "servePublicCheck", tip=tip)
        self.public.setChecked(settings.serve_public)
        form.addRow("", self.public)
        self.warning = label(OPEN_WARNING, "serveOpenWarning")
        theme.set_tone(self.warning, "error")
        form.addRow("", self.warning)

        self.public.toggled.connect(self.on_changed)
        self.api_key.textChanged.connect(self.on_changed)
        self.on_changed()

    def applied_to(self, settings: Settings) -> Settings:
        """`settings` with these fields': the port, the API key and who may connect."""
        return replace(
            settings,
            serve_port=self.port.value(),
            serve_api_key=self.api_key.text().strip(),
            serve_public=self.public.isChecked(),
        )

    @Slot(bool)
    def on_show_key_toggled(self, shown: bool) -> None:
        self.api_key.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        self.show_key.setText("Hide" if shown else "Show")

    @Slot()
    def on_changed(self, *_args: object) -> None:
        self.warning.setVisible(self.public.isChecked() and not self.api_key.text().strip())
