"""What the model in use is offered in the chat: the local drafts that pair with it when "Draft
model" is chosen (ui/chat/draft_menu.py), "Draft model" greyed with why where none does, the
suggested tasks it does (the others greyed, with the download of a model that does them), and
"Open a GGUF file…" from the header's model picker."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.host.messages import EngineInfo
from app.library.catalog import CatalogPair, format_bytes
from app.library.model_spec import ModelSpec
from engine.config import DraftChoice
from ui.chat.chat_header import ChatHeader
from ui.chat.chat_view import ChatView
from ui.presenters.presenter import ChatPresenter


class ModelChoices(QObject):
    other_draft_requested = Signal()  # the draft menu's "another file…": the file dialog
    model_opened = Signal(object)  # ModelSpec: a model file opened (kept among the recent ones): load it
    small_pair_requested = Signal(object)  # CatalogPair: the chat's download of a model that does its tasks

    def __init__(self, presenter: ChatPresenter, header: ChatHeader, chat: ChatView, parent: QWidget) -> None:
        """presenter: the engine loaded, its speculation and the settings; header: the speed-up
        picker and "Draft model"; chat: the tasks offered; parent: what menus and dialogs open over."""
        super().__init__(parent)
        self.presenter, self.header, self.chat, self.parent_widget = presenter, header, chat, parent
        chat.empty_state.small_model_requested.connect(self.on_chat_small_model_requested)
        presenter.controller.engine_failed.connect(self.on_controller_engine_failed)

    def offer(self, info: EngineInfo | None) -> None:
        """A model has loaded: its drafts and its tasks."""
        self._offer_drafts(info)
        self._offer_tasks(info)

    def on_controller_engine_failed(self, _failure: object) -> None:
        """No model can answer (the notice says why): the suggested tasks greyed until one loads
        (offer); the picker names the server or the file that failed, not another model."""
        from urllib.parse import urlsplit

        from app.host.remote_client import RemoteError, api_base

        settings = self.presenter.settings
        why = "the model did not load"
        if settings.is_remote:
            try:  # host and port: the header's row has little room (the notice says the whole address)
                address = urlsplit(api_base(settings.remote_url)).netloc
            except RemoteError:
                address = settings.remote_url
            self.header.set_stand_in(f"Server unavailable: {address}")
            why = "the server is unavailable (Settings → Engine)"
        else:  # the file that did not load
            key = self.presenter.engine.model_key()
            self.header.set_stand_in(f"Did not load: {Path(key).name}", key)
        self.chat.set_model_tasks(None, "", unavailable=f"No model can answer yet: {why}.")

    def show_draft_menu(self) -> None:
        """ "Draft model" with none chosen yet: the local drafts that pair with the model in use
        (ui/chat/draft_menu.py), under the speed-up picker, shown (not waited on)."""
        from ui.chat.draft_menu import DraftMenu, draft_options

        info = self.presenter.controller.info
        opened = self.presenter.settings.recent_models
        menu = DraftMenu(
            draft_options(info.target_path, opened) if info is not None else [], self.parent_widget
        )
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        chosen: list[DraftChoice | None] = []

        def on_draft_chosen(choice: DraftChoice) -> None:
            chosen.append(choice)
            self.presenter.engine.set_speculation(choice)  # from the next reply

        def on_other_file_requested() -> None:
            chosen.append(None)
            self.other_draft_requested.emit()

        def on_menu_hidden() -> None:  # closed without a choice: the speed-up in use, shown again
            if not chosen:
                self.presenter.engine.reshow_speculation()

        menu.draft_chosen.connect(on_draft_chosen)
        menu.other_file_requested.connect(on_other_file_requested)
        # An action's triggered comes after aboutToHide: the check waits a turn of the loop.
        menu.aboutToHide.connect(lambda: QTimer.singleShot(0, on_menu_hidden))
        combo = self.header.speed_combo
        menu.popup(combo.mapToGlobal(combo.rect().bottomLeft()))

    def _offer_tasks(self, info: EngineInfo | None) -> None:
        """The suggested tasks the model in use does; the others greyed, with the one-click
        download of the smallest instruct model that does them."""
        from ui.presenters.words import model_name

        if info is None:
            return
        pair = self._small_instruct_pair()
        download = f"Download {pair.target.name} ({format_bytes(pair.download_bytes)})" if pair else ""
        name = model_name(Path(info.target_path), info.target_name)
        # The file loaded (a server's model: none here to read, so every task is offered).
        self.chat.set_model_tasks(None if info.server else info.target_path, name, download)

    def _small_instruct_pair(self) -> CatalogPair | None:
        from app.library.catalog import load_catalog
        from engine.errors import TandemError
        from ui.presenters.words import SMALL_INSTRUCT_PAIR

        try:
            return load_catalog().find_pair(SMALL_INSTRUCT_PAIR)
        except (TandemError, OSError, ValueError):
            return None

    def on_chat_small_model_requested(self) -> None:
        """The chat's "Download Qwen2.5 1.5B Instruct": through the welcome's download (it
        switches to the model when done), the welcome shown for its progress."""
        pair = self._small_instruct_pair()
        if pair is not None:
            self.small_pair_requested.emit(pair)

    def _offer_drafts(self, info: EngineInfo | None) -> None:
        """ "Draft model" greyed, with the reason, where no local model pairs with the one in use
        (and none was chosen before)."""
        from ui.chat.draft_menu import draft_options, no_draft_reason
        from ui.presenters.words import model_name

        if info is None or info.server or self.presenter.engine.has_draft_model():
            self.header.set_draft_available(True)
            return
        try:
            pairing = any(
                o.pairs for o in draft_options(info.target_path, self.presenter.settings.recent_models)
            )
        except Exception:  # an unreadable folder: the menu says what it can
            pairing = True
        name = model_name(Path(info.target_path), info.target_name)
        self.header.set_draft_available(pairing, "" if pairing else no_draft_reason(name))

    def open_file(self) -> None:
        """The header's "Open a GGUF file…": any model file on this computer, loaded as chosen
        (the dialog shown without waiting on it)."""
        dialog = QFileDialog(
            self.parent_widget, "Open a GGUF model", str(Path.home()), "GGUF models (*.gguf);;All files (*)"
        )
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.fileSelected.connect(self.on_file_opened)
        dialog.open()

    def on_file_opened(self, path: str) -> None:
        """A file chosen in "Open a GGUF file…": kept among the recent files (the pickers and the
        draft list offer it after another is opened), then loaded."""
        from app.settings import with_recent_model

        if path:
            settings = self.presenter.settings
            self.presenter.update_settings(
                replace(settings, recent_models=with_recent_model(settings.recent_models, path))
            )
            self.model_opened.emit(ModelSpec(path=path))
