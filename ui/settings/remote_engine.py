"""Settings → Engine: this computer, or a server (its address, API key and a model it lists).

The models are fetched from the server's `/v1/models` when the user asks (the Fetch button), on
a thread: the dialog never waits on the network. What goes wrong is one line under the fields.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import replace

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QComboBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QWidget

from app.host.remote_client import RemoteClient, RemoteError, api_base
from app.settings import EngineKind, Settings
from ui.qt import theme
from ui.qt.widgets import button, named

ENGINE_CHOICES = (("This computer", EngineKind.LOCAL), ("A server", EngineKind.REMOTE))
# How this dialog names the inputs a RemoteError asks to change (app.host.remote_client.RemoteFix).
WINDOW_NAMES = ("the server address", "fill in the API key")
LOCAL_ONLY_TIP = 'Applies to "This computer" only: the server runs the model with its own settings'


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if text.startswith("http") else text[:1].upper() + text[1:]


def _label_for(field: QWidget) -> QWidget | None:
    """The label of a field in whichever form (settings tab) holds it."""
    parent = field.parentWidget()
    form = parent.layout() if parent is not None else None
    return form.labelForField(field) if isinstance(form, QFormLayout) else None


class RemoteEngineFields(QObject):
    fetched = Signal(object, str)  # from the fetching thread: (model ids or None, error sentence)

    def __init__(self, settings: Settings, form: QFormLayout, parent: QWidget) -> None:
        super().__init__(parent)
        tip = "Run models here, or chat with a model on an OpenAI-compatible server"
        self.engine = named(QComboBox(), "engineCombo", "Engine", tip)
        for label, value in ENGINE_CHOICES:
            self.engine.addItem(label, value)
        self.engine.setCurrentIndex(max(0, self.engine.findData(settings.engine)))
        form.addRow("Engine:", self.engine)

        where = "http://HOST:PORT (tandem serve, llama-server, LM Studio, vLLM…)"
        self.url = named(
            QLineEdit(settings.remote_url, placeholderText=where), "remoteUrlEdit", "Server address"
        )
        form.addRow("Server:", self.url)

        key = QLineEdit(settings.remote_api_key, echoMode=QLineEdit.EchoMode.Password, placeholderText="none")
        tip = "Sent as 'Authorization: Bearer KEY'; kept in Tandem's settings file"
        self.api_key = named(key, "remoteKeyEdit", "API key", tip)
        form.addRow("API key:", self.api_key)

        row = QHBoxLayout()
        self.model = named(
            QComboBox(editable=True, minimumContentsLength=24), "remoteModelCombo", "Server model"
        )
        edit = self.model.lineEdit()
        if edit is not None:
            edit.setPlaceholderText("the first one it serves")
        if settings.remote_model:
            self.model.addItem(settings.remote_model)
        self.model.setCurrentText(settings.remote_model)
        row.addWidget(self.model, 1)
        tip = "Ask the server for the models it serves (GET /v1/models)"
        self.fetch_button = button("Fetch models", "fetchModelsButton", self.on_fetch_button_clicked, tip)
        row.addWidget(self.fetch_button)
        form.addRow("Model:", row)

        self.error = named(QLabel(), "remoteError")  # one line: the whole sentence on hover
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.setVisible(False)
        form.addRow("", self.error)

        # Fields of the local engine (threads, context, GPU layers...), greyed out while a server
        # is chosen: widget -> (its enabled state and tooltip before, given back on "This computer").
        self._local_only: dict[QWidget, tuple[bool, str]] = {}
        self.fetched.connect(self.on_self_fetched, Qt.ConnectionType.QueuedConnection)
        self.engine.currentIndexChanged.connect(self.on_engine_current_index_changed)
        self.on_engine_current_index_changed()

    @property
    def is_remote(self) -> bool:
        return bool(self.engine.currentData() == EngineKind.REMOTE)

    def applied_to(self, settings: Settings) -> Settings:
        """`settings` with these fields': the engine, and the server's address, key and model."""
        return replace(
            settings,
            engine=EngineKind.REMOTE if self.is_remote else EngineKind.LOCAL,
            remote_url=self.url.text().strip(),
            remote_api_key=self.api_key.text().strip(),
            remote_model=self.model.currentText().strip(),
        )

    def show_error(self, text: str, is_error: bool = True) -> None:
        self.error.setText(_one_line(text))
        self.error.setToolTip(text)
        theme.set_tone(self.error, "error" if is_error else "")
        self.error.setVisible(bool(text))

    def check(self) -> bool:
        """Can the dialog close? A server needs an address that parses."""
        if not self.is_remote:
            return True
        try:
            api_base(self.url.text() or "")
        except RemoteError as e:
            self.show_error(e.sentence(*WINDOW_NAMES))
            self.url.setFocus()
            return False
        return True

    def set_local_only(self, widgets: list[QWidget]) -> None:
        """The fields that only the local engine uses: disabled, with a tooltip, while a server is chosen."""
        self._local_only = {w: (w.isEnabled(), w.toolTip()) for w in widgets}
        self._show_local_only()

    def _show_local_only(self) -> None:
        for w, (enabled, tip) in self._local_only.items():
            label = _label_for(w)
            if self.is_remote:
                if w.toolTip() != LOCAL_ONLY_TIP:  # remember what a field was, to give it back
                    self._local_only[w] = (w.isEnabled(), w.toolTip())
                w.setEnabled(False)
                w.setToolTip(LOCAL_ONLY_TIP)
            else:
                w.setEnabled(enabled)
                w.setToolTip(tip)
            if label is not None:
                label.setEnabled(not self.is_remote)
                label.setToolTip(LOCAL_ONLY_TIP if self.is_remote else "")

    @Slot()
    def on_engine_current_index_changed(self, _index: int = 0) -> None:
        for w in (self.url, self.api_key, self.model, self.fetch_button):
            w.setEnabled(self.is_remote)
        if not self.is_remote:
            self.show_error("")
        self._show_local_only()

    @Slot()
    def on_fetch_button_clicked(self) -> None:
        try:
            base = api_base(self.url.text() or "")
        except RemoteError as e:
            self.show_error(e.sentence(*WINDOW_NAMES))
            return
        key = self.api_key.text().strip() or None
        self.fetch_button.setEnabled(False)
        self.show_error(f"Asking {base} for its models…", is_error=False)

        def fetch() -> None:
            client = RemoteClient(base, key)
            try:
                models = client.list_models()
                answer = (models, "" if models else f"{base} lists no models (type the model's name)")
            except RemoteError as e:
                answer = (None, e.sentence(*WINDOW_NAMES))
            except Exception as e:  # never a traceback in a dialog
                answer = (None, f"cannot ask {base} for its models: {e}")
            finally:
                client.close()
            with contextlib.suppress(RuntimeError):  # the dialog was closed meanwhile
                self.fetched.emit(*answer)

        threading.Thread(target=fetch, name="tandem-fetch-models", daemon=True).start()

    @Slot(object, str)
    def on_self_fetched(self, models: list[str] | None, error: str) -> None:
        self.fetch_button.setEnabled(self.is_remote)
        if models:
            current = self.model.currentText().strip()
            self.model.clear()
            self.model.addItems(models)
            self.model.setCurrentText(current if current in models else models[0])
            self.show_error(
                f"{len(models)} model{'s' if len(models) != 1 else ''} on the server", is_error=False
            )
        else:
            self.show_error(error or "the server has no model list (type the model's name)")
