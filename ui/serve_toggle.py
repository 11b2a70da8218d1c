"""The toolbar's "Serve API" switch: the window's loaded engine on the OpenAI-compatible API.

As LM Studio's server tab does: other programs on this computer use the model the window has
loaded, through the same API as `tandem serve` (app/api/serve.py), without a second copy of it in
memory. Their replies run in the window's own engine process, one at a time with the window's.
The address is shown in the status bar while it serves; it listens on 127.0.0.1 only.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel

from app.api.serve import DEFAULT_PORT, ApiServer, BackgroundServer, SharedEngineHost, listen
from app.host.worker import EngineLoaded
from engine.errors import TandemError

HOST = "127.0.0.1"


class ServeToggle(QObject):
    engine_wanted = Signal()  # from the server's thread: the engine died, load a fresh one

    def __init__(self, window: Any, toolbar: Any) -> None:
        super().__init__(window)
        self.window = window
        self.port = DEFAULT_PORT
        self.action = QAction("Serve API", window)
        self.action.setCheckable(True)
        self.action.setToolTip(
            f"Let other programs on this computer use the loaded model through an OpenAI-compatible "
            f"API on {HOST} (as `tandem serve` does)"
        )
        self.action.toggled.connect(self.on_action_toggled)
        toolbar.addAction(self.action)
        self.label = QLabel()
        self.label.setObjectName("serveLabel")
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.hide()
        window.statusBar().addPermanentWidget(self.label)
        self.server: BackgroundServer | None = None
        self.host: SharedEngineHost | None = None
        self.engine_wanted.connect(self.on_engine_wanted, Qt.ConnectionType.QueuedConnection)

    @property
    def url(self) -> str | None:
        return self.server.url if self.server is not None else None

    @Slot(bool)
    def on_action_toggled(self, on: bool) -> None:
        if on:
            self.start()
        else:
            self.stop()

    def start(self) -> None:
        if self.server is not None:
            return
        controller = self.window.controller
        try:
            sock = listen(HOST, self.port)
        except TandemError as e:
            self._show(f"API not started: {e}", error=True)
            self.action.blockSignals(True)
            self.action.setChecked(False)
            self.action.blockSignals(False)
            return
        self.host = host = SharedEngineHost(
            send=controller.send_to_worker,
            cancel=controller.stop,
            want_engine=self.engine_wanted.emit,
            info=controller.info,
        )
        controller.set_tap(host.tap)
        self.server = BackgroundServer(ApiServer(host), sock)
        self.server.start()
        self._show(f"API: {self.server.url}")

    def stop(self) -> None:
        server, self.server = self.server, None
        self.host = None
        if server is None:
            return
        self.window.controller.set_tap(None)
        server.stop()
        self.label.hide()

    @Slot()
    def on_engine_wanted(self) -> None:
        """The API found no engine: it missed the load (it started during it), or the engine died."""
        controller, host = self.window.controller, self.host
        if host is None:
            return
        if controller.info is not None:
            host.tap(EngineLoaded(controller.info))
        elif controller.config is not None:
            controller.load(controller.config)

    def _show(self, text: str, error: bool = False) -> None:
        self.label.setText(text)
        self.label.setStyleSheet("color: #b00020;" if error else "")
        self.label.setToolTip(
            "" if error else "OpenAI-compatible: GET /models, POST /chat/completions, POST /completions"
        )
        self.label.show()
