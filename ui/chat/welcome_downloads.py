"""The welcome panel's making and its "Download and switch" (ui/chat/welcome.py is the panel):
the download goes through the Models page (progress, pause and cancel there too), its progress
is said on the welcome, and the window switches to the pair once its files are in."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject

from app.library.catalog import CatalogPair
from engine.config import NGRAM_LOOKUP, DraftChoice
from ui.presenters.failures import STRICT_ENV

if TYPE_CHECKING:
    from ui.chat.welcome import WelcomePanel
    from ui.models.models_page import ModelsPage

log = logging.getLogger(__name__)


def make_welcome() -> WelcomePanel | None:
    """The first-start welcome panel for this machine; None where it cannot be built (like the
    Models page, optional: the chat opens regardless)."""
    try:
        from app.library.catalog import detect_machine, load_catalog
        from ui.chat.welcome import WelcomePanel

        machine = detect_machine(with_vram=True)
        return WelcomePanel(load_catalog(), machine)
    except Exception as e:
        if os.environ.get(STRICT_ENV):  # the tests: a panel that fails to build is a bug
            raise
        log.warning("welcome panel unavailable: %s", e)
        return None


class WelcomeDownloads(QObject):
    """The welcome's download of a catalog pair, through the Models page; `switch(target, draft)`
    once its files are in."""

    def __init__(
        self,
        welcome: WelcomePanel,
        models_page: ModelsPage | None,
        switch: Callable[[str, DraftChoice], None],
    ) -> None:
        """welcome: the WelcomePanel; models_page: the Models page (None where it could not be
        built: downloads are then said to need it)."""
        super().__init__(welcome)
        self.welcome, self.page, self.switch = welcome, models_page, switch
        self.downloading: str | None = None  # the pair its button is downloading
        welcome.download_requested.connect(self.request)
        if models_page is not None:  # (its downloads' news of other keys is left alone)
            models_page.download_view.progressed.connect(self.on_download_view_progressed)
            models_page.download_view.finished.connect(self.on_download_view_finished)
            models_page.download_view.failed.connect(self.on_download_view_failed)

    def request(self, pair: CatalogPair) -> None:
        """Download the recommended pair through the Models page; switch to it when done."""
        page = self.page
        if page is None:
            self.welcome.set_status(
                "Downloads need the Models page, which is not available in this build.", True
            )
            return
        self.downloading = pair.name
        self.welcome.set_downloading(True)
        self.welcome.set_status(
            f"Downloading {pair.title}… (progress, pause and cancel also on the Models page)"
        )
        page.download_view.download_pair(pair)

    def on_download_view_progressed(self, key: str, text: str) -> None:
        if key == self.downloading:
            self.welcome.set_status(f"Downloading: {text}")

    def on_download_view_finished(self, key: str, done: list[str]) -> None:
        if key != self.downloading or not done:
            return
        self.downloading = None
        self.welcome.set_downloading(False)
        self.welcome.set_status("Downloaded; switching to the new pair…")
        self.switch(done[0], DraftChoice.of_model(done[1]) if len(done) > 1 else NGRAM_LOOKUP)

    def on_download_view_failed(self, key: str, message: str, is_paused: bool) -> None:
        if key == self.downloading:
            self.welcome.set_downloading(False)
            self.welcome.set_status(
                f"Download paused: {message}" if is_paused else f"Download stopped: {message}",
                is_error=not is_paused,
            )
