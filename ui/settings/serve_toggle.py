"""The toolbar's "Serve API" switch: the window's loaded engine on the OpenAI-compatible API.

As LM Studio's server tab does: other programs use the model the window has loaded, through the
same API as `tandem serve` (app/api/serve.py), without a second copy of it in memory. Their
replies run in the window's own engine process, one at a time with the window's.

Where it listens comes from Settings (app/settings.py): the port (8080), an optional API key, and
"allow other computers" (every network interface instead of 127.0.0.1). The full address is
shown in the status bar while it serves, with a warning when other computers may connect and no
key is set (as `tandem serve` warns). Changing the address while serving restarts the server
there; a new key applies to the next request.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QLabel, QStatusBar

from app.api.engine_bridge import ApiEngine
from app.api.serve import ApiServer, BackgroundServer, listen
from app.host.controller import EngineController
from app.settings import Settings
from engine.errors import TandemError
from ui.qt import theme
from ui.qt.widgets import named

OPEN_WARNING = "no API key: anyone who can reach this computer on the network can use the model"


def lan_address() -> str | None:
    """This computer's address on its network, as another computer would reach it (None if unknown).

    A UDP socket "connected" to an outside address sends nothing; it only picks the interface a
    packet would leave by.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never answered, never sent to
            address = str(s.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def allowed_origins(settings: Settings) -> tuple[str, ...]:
    return tuple(
        o.strip().rstrip("/").lower() for o in settings.serve_allowed_origins.split(",") if o.strip()
    )


class ServeToggle(QObject):
    engine_wanted = Signal()  # from the server's thread: the engine died, load a fresh one

    def __init__(
        self,
        controller: EngineController,
        settings: Callable[[], Settings],
        place: Callable[[QAction], object],
        status_bar: QStatusBar,
        parent: QObject,
    ) -> None:
        """controller: the window's engine (its supervisor); settings: the settings now (where it
        listens, its key); `place` puts the switch where it stays in sight (the window's header),
        the address it serves at goes on `status_bar`."""
        super().__init__(parent)
        self.controller = controller
        self._settings = settings
        self.action = QAction("API: off", parent, checkable=True)  # a switch that says its state
        self.action.toggled.connect(lambda on: self.action.setText("API: on" if on else "API: off"))
        self.action.toggled.connect(self.on_action_toggled)
        place(self.action)
        self.label = named(QLabel(), "serveLabel")
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.hide()
        status_bar.addPermanentWidget(self.label)
        self.server: BackgroundServer | None = None
        self.api: ApiServer | None = None
        self.host: ApiEngine | None = None
        self.engine_wanted.connect(self.on_engine_wanted, Qt.ConnectionType.QueuedConnection)
        self._update_tooltip(settings())

    @property
    def url(self) -> str | None:
        """Where a program on this computer reaches the API (None when it does not serve)."""
        if self.server is None:
            return None
        port = self.server.sock.getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    @property
    def address(self) -> str | None:
        """The full address shown: where other computers reach it, when they may."""
        if self.server is None:
            return None
        host, port = self.server.sock.getsockname()[:2]
        if host == "0.0.0.0":
            host = lan_address() or socket.gethostname() or host
        return f"http://{host}:{port}/v1"

    @Slot(bool)
    def on_action_toggled(self, on: bool) -> None:
        if on:
            self.start()
        else:
            self.stop()

    def start(self) -> None:
        if self.server is not None:
            return
        settings = self._settings()
        controller = self.controller
        try:
            sock = listen(settings.serve_host, settings.serve_port)
        except TandemError as e:
            self._show(f"API not started: {e}", error=True)
            self.action.blockSignals(True)
            self.action.setChecked(False)
            self.action.blockSignals(False)
            return
        # The window's engine, under the window's supervisor: the API's replies queue with the window's.
        self.host = host = ApiEngine(controller.supervisor, want_engine=self.engine_wanted.emit)
        self.api = ApiServer(host, settings.serve_api_key or None, allowed_origins(settings))
        self.api.needs_key = self._relay_refusal
        self.server = BackgroundServer(self.api, sock)
        self.server.start()
        self._show_address()

    def stop(self) -> None:
        server, self.server = self.server, None
        self.host = self.api = None
        if server is None:
            return
        server.stop()
        self.label.hide()

    def apply_settings(self, settings: Settings) -> None:
        """Settings saved: serve on the new address (a restart), or with the new key."""
        self._update_tooltip(settings)
        if self.server is None or self.api is None:
            return
        host, port = self.server.sock.getsockname()[:2]
        if (host, port) != (settings.serve_host, settings.serve_port):
            self.stop()
            self.start()  # a port now in use: the reason shows and the switch turns off
            return
        self.api.api_key = settings.serve_api_key or None
        self.api.allowed_origins = allowed_origins(settings)
        self._show_address()

    def _relay_refusal(self) -> str | None:
        """(the server's thread) With an engine on another server, the window's API would relay
        anyone to it with the user's key for that server: only callers with this API's key."""
        if self.controller.remote is None:
            return None
        return (
            "this window uses an engine on another server: set an API key for the window's API in "
            "Settings to let other programs use it"
        )

    @Slot()
    def on_engine_wanted(self) -> None:
        """The API found no engine: it missed the load (it started during it), or the engine died."""
        controller = self.controller
        if self.host is None:
            return
        supervisor = controller.supervisor
        if supervisor.info is None and not supervisor.is_loading and supervisor.config is not None:
            controller.load(supervisor.config)  # (a load under way is waited for, not restarted)

    def _update_tooltip(self, settings: Settings) -> None:
        who = "other computers on the network" if settings.serve_public else "other programs on this computer"
        self.action.setToolTip(
            f"Let {who} use the loaded model through an OpenAI-compatible API on port "
            f"{settings.serve_port} (as `tandem serve` does; the port, a key and who may connect "
            "are in Settings)"
        )

    def _show_address(self) -> None:
        settings = self._settings()
        text = f"API: {self.address}"
        warning = settings.serve_public and not settings.serve_api_key
        relay_refused = self.controller.remote is not None and not settings.serve_api_key
        if relay_refused:
            text += " · refuses other programs until an API key is set in Settings (the engine is on another server)"
            warning = True
        elif warning:
            text += f" · warning: {OPEN_WARNING}"
        elif settings.serve_api_key:
            text += " · key required"
        self._show(text, error=warning)
        tip = "OpenAI-compatible: GET /models, POST /chat/completions, POST /completions"
        if settings.serve_public:
            tip += f"\nOn this computer: {self.url}"
        self.label.setToolTip(tip)

    def _show(self, text: str, error: bool = False) -> None:
        self.label.setText(text)
        theme.set_tone(self.label, "error" if error else "")
        self.label.setToolTip("")
        self.label.show()
