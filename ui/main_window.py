"""Tandem's main window: conversations, the chat, Compare, models; the speculation toolbar.

The window owns the store (conversations on disk), the settings and the engine controller. It
knows the engine only through the controller's signals: replies arrive as coalesced
ReplyProgress updates of one reply buffer (app.host.reply), are shown (only the new text is laid out),
and are written to the store at most every SAVE_INTERVAL_S
and at their end, so a crash of anything loses at most that much of a reply.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QLabel,
    QMainWindow,
    QProgressBar,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.host.controller import EngineController
from app.host.reply import Reply, ReplyProgress
from app.host.worker import ChatTurn, EngineInfo, ReplyStarted
from app.library.model_spec import parse_draft
from app.settings import Settings, load_settings, save_settings
from app.store import Message, Store
from engine.events import Stats
from ui.about import AboutDialog, app_icon
from ui.chat_view import ChatView
from ui.compare_view import CompareView
from ui.conversation_list import ConversationList
from ui.presenter import SpeedPresenter
from ui.settings_dialog import SettingsDialog, needs_reload
from ui.stats_format import DASH, live_line

log = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the database at least this often
TITLE_LENGTH = 48
SPECULATION_CHOICES = (("Off", "none"), ("N-gram lookup", "ngram"), ("Draft model", "draft"))


@dataclass
class LiveReply:
    """The reply being generated for the chat: the controller's buffer, and where it is shown and stored."""

    conversation_id: int
    message_id: int
    reply: Reply
    last_saved_s: float = 0.0

    @property
    def request_id(self) -> int:
        return self.reply.request_id

    @property
    def text(self) -> str:
        return self.reply.text

    @property
    def stats(self) -> Stats | None:
        return self.reply.stats


def _title_from(text: str) -> str:
    first_line = text.strip().splitlines()[0] if text.strip() else "New conversation"
    return first_line if len(first_line) <= TITLE_LENGTH else first_line[: TITLE_LENGTH - 1] + "…"


def _turns(messages: list[Message]) -> tuple[ChatTurn, ...]:
    """The conversation as the model sees it: user/assistant turns, neighbours of one role merged.

    Merging matters after a failed reply (two user messages in a row): many chat templates
    refuse roles that do not alternate.
    """
    turns: list[ChatTurn] = []
    for m in messages:
        if m.role not in ("user", "assistant") or not m.content.strip():
            continue
        if turns and turns[-1].role == m.role:
            turns[-1] = ChatTurn(m.role, turns[-1].content + "\n\n" + m.content)
        else:
            turns.append(ChatTurn(m.role, m.content))
    return tuple(turns)


class MainWindow(QMainWindow):
    def __init__(
        self,
        model: str | None = None,
        draft: str | None = None,
        controller: EngineController | None = None,
    ) -> None:
        """model/draft override the saved choice for this session (the command line's --model/--draft)."""
        super().__init__()
        self.setWindowTitle("Tandem")
        icon = app_icon()  # scalable (SVG): sharp at any scale factor
        QApplication.setWindowIcon(icon)
        self.setWindowIcon(icon)
        self.resize(1180, 780)
        self.settings: Settings = load_settings()
        self.store = Store()
        self.store.mark_unfinished_interrupted()
        self.controller = controller or EngineController(self)
        # The speed baseline and the stats records (ui/presenter.py: no widgets, tested alone).
        self.speed_stats = SpeedPresenter(
            lambda: self.settings,
            self._update_settings,
            lambda: self.controller.info.target_path if self.controller.info else None,
            self,
        )
        self._model_override = model
        self._draft_override = draft
        self.live: LiveReply | None = None
        self.conversation_id: int | None = None
        self._editing_message_id: int | None = None
        self._pending_system_prompt = ""
        self._is_closed = False
        self._has_shown = False
        from ui.theme import ThemeManager

        self.theme = ThemeManager(self.settings.theme, self)  # before any text is rendered
        self.theme.changed.connect(self.on_theme_changed)

        self._build_tabs()
        self._build_toolbar()
        self._build_status_bar()
        self._build_menu()
        from ui import shortcuts

        self.shortcut_actions = shortcuts.install(self)
        self._connect_controller()

        self._refresh_conversations()
        last = self.settings.last_conversation_id
        if last is not None and self.store.conversation(last) is not None:
            self.show_conversation(last)
        else:
            conversations = self.store.conversations()
            if conversations:
                self.show_conversation(conversations[0].id)
        self.start_engine()

    # ---- building

    def _build_toolbar(self) -> None:
        bar = QToolBar("Speculation")
        bar.setObjectName("speculationToolbar")
        bar.setMovable(False)
        self.addToolBar(bar)
        bar.addWidget(QLabel(" Speculation: "))
        self.speculation_combo = QComboBox()
        for label, kind in SPECULATION_CHOICES:
            self.speculation_combo.addItem(label, kind)
        self.speculation_combo.setToolTip("Takes effect from the next reply")
        self.speculation_combo.setAccessibleName("Speculation")
        self.speculation_combo.activated.connect(self.on_speculation_combo_activated)
        bar.addWidget(self.speculation_combo)
        self.choose_draft_action = QAction("Choose draft…", self)
        self.choose_draft_action.setToolTip(
            "Pick a small GGUF model with the target's vocabulary to draft for it"
        )
        self.choose_draft_action.triggered.connect(self.on_choose_draft_action_triggered)
        bar.addAction(self.choose_draft_action)
        bar.addSeparator()
        self.pair_label = QLabel("Loading…")
        self.pair_label.setObjectName("pairLabel")
        self.pair_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        bar.addWidget(self.pair_label)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        bar.addWidget(spacer)
        self.tint_check = QCheckBox("Tint drafted tokens")
        self.tint_check.setToolTip("Shade the text the draft proposed and the target accepted")
        self.tint_check.setChecked(self.settings.show_draft_tint)
        self.tint_check.toggled.connect(self.on_tint_check_toggled)
        bar.addWidget(self.tint_check)
        self.settings_action = QAction("Settings…", self)
        self.settings_action.triggered.connect(self.on_settings_action_triggered)
        bar.addAction(self.settings_action)
        from ui.serve_toggle import ServeToggle

        self.serve_toggle = ServeToggle(self, bar)  # the loaded engine on the OpenAI-compatible API
        self._show_speculation_choice(self._current_draft())

    def _build_tabs(self) -> None:
        self.tabs = QTabWidget()
        self.setCentralWidget(self.tabs)
        splitter = QSplitter()
        self.conversations = ConversationList()
        self.chat = ChatView()
        splitter.addWidget(self.conversations)
        splitter.addWidget(self.chat)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([250, 930])
        chat_tab = QWidget()
        chat_layout = QVBoxLayout(chat_tab)
        chat_layout.setContentsMargins(0, 0, 0, 0)
        self.welcome = self._make_welcome()
        if self.welcome is not None:
            chat_layout.addWidget(self.welcome)
        chat_layout.addWidget(splitter, 1)
        self.tabs.addTab(chat_tab, "Chat")
        self.compare = CompareView()
        self.tabs.addTab(self.compare, "Compare")
        self.models_page = self._make_models_page()
        self.tabs.addTab(self.models_page, "Models")

        self.conversations.conversation_selected.connect(self.on_conversations_conversation_selected)
        self.conversations.new_requested.connect(self.on_conversations_new_requested)
        self.conversations.rename_requested.connect(self.on_conversations_rename_requested)
        self.conversations.delete_requested.connect(self.on_conversations_delete_requested)
        self.conversations.search_changed.connect(self.on_conversations_search_changed)
        self.chat.send_requested.connect(self.on_chat_send_requested)
        self.chat.stop_requested.connect(self.controller.stop)
        self.chat.regenerate_requested.connect(self.on_chat_regenerate_requested)
        self.chat.edit_requested.connect(self.on_chat_edit_requested)
        self.chat.edit_cancelled.connect(self.on_chat_edit_cancelled)
        self.chat.system_prompt_changed.connect(self.on_chat_system_prompt_changed)
        self.compare.compare_requested.connect(self.on_compare_compare_requested)
        self.compare.stop_requested.connect(self.controller.stop)
        self.tabs.currentChanged.connect(self.on_tabs_current_changed)

    def _make_models_page(self) -> QWidget:
        # The models page is built separately and may be missing or broken in a given build;
        # the chat must open regardless.
        try:
            from ui.models_page import ModelsPage

            page = ModelsPage()
            page.pair_chosen.connect(self.on_models_page_pair_chosen)
            return page
        except Exception as e:  # ImportError, or a page that fails to build
            log.warning("models page unavailable: %s", e)
            label = QLabel(
                "The models page is not available in this build.\nStart with: tandem --model PATH --draft PATH|ngram|none"
            )
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            return label

    def _make_welcome(self) -> Any:
        """The first-start welcome panel (ui/welcome.py); like the models page, optional."""
        self._welcome_download: str | None = None  # the pair its button is downloading
        self._is_welcome_connected = False
        try:
            from app.library.catalog import detect_machine, gpu_memory_bytes, load_catalog
            from ui.welcome import WelcomePanel

            machine = detect_machine()
            vram = gpu_memory_bytes(machine.gpu_label, machine.total_ram_bytes) if machine.has_gpu else 0
            panel = WelcomePanel(load_catalog(), machine, vram)
        except Exception as e:
            log.warning("welcome panel unavailable: %s", e)
            return None
        panel.download_requested.connect(self.on_welcome_download_requested)
        panel.dismissed.connect(self.on_welcome_dismissed)
        if self.settings.has_seen_welcome:
            panel.hide()
        else:
            self._update_settings(has_seen_welcome=True)  # first start only
        return panel

    def _build_menu(self) -> None:
        help_menu = self.menuBar().addMenu("&Help")
        self.welcome_action = QAction("Welcome", self)
        self.welcome_action.setToolTip("The built-in model, speculation, and a model for this machine")
        self.welcome_action.triggered.connect(self.show_welcome)
        self.welcome_action.setEnabled(self.welcome is not None)
        help_menu.addAction(self.welcome_action)
        self.about_action = QAction("About Tandem", self)
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.about_action)

    def show_about(self) -> None:
        dialog = AboutDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()

    def show_welcome(self) -> None:
        if self.welcome is not None:
            self.tabs.setCurrentIndex(0)
            self.welcome.show()

    def on_welcome_dismissed(self) -> None:
        self._update_settings(has_seen_welcome=True)

    def on_welcome_download_requested(self, pair: Any) -> None:
        """Download the recommended pair through the Models page; switch to it when done."""
        page: Any = self.models_page  # a QLabel where the page could not be built
        if self.welcome is None:
            return
        if not hasattr(page, "download_finished"):
            self.welcome.set_status(
                "Downloads need the Models page, which is not available in this build.", True
            )
            return
        if not self._is_welcome_connected:
            self._is_welcome_connected = True
            page.download_progressed.connect(self.on_models_page_download_progressed)
            page.download_finished.connect(self.on_models_page_download_finished)
            page.download_failed.connect(self.on_models_page_download_failed)
        self._welcome_download = pair.name
        self.welcome.set_downloading(True)
        self.welcome.set_status(
            f"Downloading {pair.title}… (progress, pause and cancel also on the Models page)"
        )
        page.on_download_clicked(pair)

    def on_models_page_download_progressed(self, key: str, text: str) -> None:
        if self.welcome is not None and key == self._welcome_download:
            self.welcome.set_status(f"Downloading: {text}")

    def on_models_page_download_finished(self, key: str, done: list[str]) -> None:
        if self.welcome is None or key != self._welcome_download or not done:
            return
        self._welcome_download = None
        self.welcome.set_downloading(False)
        self.welcome.set_status("Downloaded; switching to the new pair…")
        target = done[0]
        draft = done[1] if len(done) > 1 else "ngram"
        self.on_models_page_pair_chosen(target, draft)

    def on_models_page_download_failed(self, key: str, message: str, is_paused: bool) -> None:
        if self.welcome is not None and key == self._welcome_download:
            self.welcome.set_downloading(False)
            self.welcome.set_status(
                f"Download paused: {message}" if is_paused else f"Download stopped: {message}",
                is_error=not is_paused,
            )

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.load_label = QLabel()
        self.load_progress = QProgressBar()
        self.load_progress.setRange(0, 0)  # busy until llama.cpp reports a fraction
        self.load_progress.setMaximumWidth(160)
        self.load_progress.setMaximumHeight(14)
        status.addWidget(self.load_label)
        status.addWidget(self.load_progress)
        self.stats_label = QLabel(f"Speed: {DASH}")
        self.stats_label.setObjectName("statsIndicator")
        self.stats_label.setAccessibleName("Speed")
        self.stats_label.setToolTip(
            "tokens/s of the reply, share of drafted tokens accepted, tokens accepted per "
            "draft, and speed against plain decoding of this model"
        )
        status.addPermanentWidget(self.stats_label)
        self._set_loading(None)

    def _connect_controller(self) -> None:
        c = self.controller
        c.load_progressed.connect(self.on_controller_load_progressed)
        c.engine_loaded.connect(self.on_controller_engine_loaded)
        c.engine_failed.connect(self.on_controller_engine_failed)
        c.engine_died.connect(self.on_controller_engine_died)
        c.draft_changed.connect(self.on_controller_draft_changed)
        c.draft_failed.connect(self.on_controller_draft_failed)
        c.reply_started.connect(self.on_controller_reply_started)
        c.reply_progressed.connect(self.on_controller_reply_progressed)
        c.reply_finished.connect(self.on_controller_reply_finished)
        c.reply_failed.connect(self.on_controller_reply_failed)
        c.busy_changed.connect(self.on_controller_busy_changed)

    # ---- engine

    def _current_draft(self) -> str:
        return self._draft_override or self.settings.draft

    def start_engine(self) -> None:
        # Settings → Engine: a server (app/host/remote_worker.py) or this computer.
        from app.host.remote_worker import RemoteTarget

        s = self.settings
        remote = RemoteTarget(s.remote_url, s.remote_api_key, s.remote_model) if s.is_remote else None
        self.controller.use_remote(remote)
        self.speculation_combo.setEnabled(remote is None)
        self.choose_draft_action.setEnabled(remote is None)
        target = self._model_override or self.settings.model_path or ""
        config = self.settings.engine_config(target)
        if self._draft_override is not None:
            config = self.settings.replace(draft=self._draft_override).engine_config(target)
        self.controller.load(config)

    def _set_loading(self, stage: str | None) -> None:
        self.load_label.setText(stage or "")
        self.load_label.setVisible(stage is not None)
        self.load_progress.setVisible(stage is not None)

    def _plain_tokens_per_s(self) -> float | None:
        return self.speed_stats.plain_tokens_per_s()

    def _update_settings(self, **changes: Any) -> None:
        self.settings = self.settings.replace(**changes)
        try:
            save_settings(self.settings)
        except OSError as e:
            log.warning("cannot save settings: %s", e)

    def _show_pair(self, info: EngineInfo | None, problem: str = "") -> None:
        if info is None:
            self.pair_label.setText(problem or "No model loaded")
            self.pair_label.setStyleSheet("color: #c0392b;" if problem else "")
            return
        text = info.pair_note
        if problem:
            text += f" — {problem}"
        self.pair_label.setText(text)
        self.pair_label.setToolTip(
            f"Target: {info.target_path}" + (f"\nDraft: {info.draft}" if info.draft else "")
        )
        self.pair_label.setStyleSheet("color: #c0392b;" if problem or info.draft_refusal is not None else "")
        self.setWindowTitle(f"Tandem — {info.target_name}")

    def _show_speculation_choice(self, draft: str | None) -> None:
        kind = str(parse_draft(draft).kind)
        self.speculation_combo.setCurrentIndex(self.speculation_combo.findData(kind))
        self.compare.set_speculation(kind)

    def set_speculation(self, draft: str) -> None:
        """Switch to "none", "ngram" or a draft GGUF path; applies from the next reply."""
        changes: dict[str, Any] = {"draft": draft}
        if parse_draft(draft).model is not None:
            changes["draft_model_path"] = draft
        self._draft_override = None
        self._update_settings(**changes)
        self._show_speculation_choice(draft)
        self.pair_label.setText("Switching speculation… (applies from the next reply)")
        self.pair_label.setStyleSheet("")
        self.controller.set_draft(parse_draft(draft).engine_value())

    # ---- conversations

    def _refresh_conversations(self) -> None:
        self.conversations.set_conversations(
            self.store.conversations(self.conversations.search.text().strip()), self.conversation_id
        )

    def show_conversation(self, conversation_id: int | None) -> None:
        self.conversation_id = conversation_id
        self._editing_message_id = None
        self.chat.set_editing(None)
        self.chat.clear()
        self.chat.set_notice("")
        tint = self.settings.show_draft_tint
        if conversation_id is None:
            self.chat.set_system_prompt(self._pending_system_prompt)
            self._refresh_conversations()
            return
        conversation = self.store.conversation(conversation_id)
        self.chat.set_system_prompt(conversation.system_prompt if conversation else "")
        for m in self.store.messages(conversation_id):
            if self.live is not None and self.live.message_id == m.id:
                shown = self.live.reply.shown()
                self.chat.add_message(m.id, m.role, shown.text, shown.draft_spans, "streaming", None, tint)
            else:
                self.chat.add_message(m.id, m.role, m.content, m.draft_spans, m.status, m.stats, tint)
        self.chat.scroll_to_end()
        self._refresh_conversations()
        if self.settings.last_conversation_id != conversation_id:
            self.settings = self.settings.replace(last_conversation_id=conversation_id)

    def _ensure_conversation(self, first_text: str) -> int:
        if self.conversation_id is None:
            conversation = self.store.create_conversation(
                _title_from(first_text), self._pending_system_prompt
            )
            self._pending_system_prompt = ""
            self.conversation_id = conversation.id
            self.settings = self.settings.replace(last_conversation_id=conversation.id)
        else:
            conversation_ = self.store.conversation(self.conversation_id)
            if (
                conversation_ is not None
                and conversation_.title == "New conversation"
                and not self.store.messages(self.conversation_id)
            ):
                self.store.rename_conversation(self.conversation_id, _title_from(first_text))
        return self.conversation_id

    # ---- replies

    def _supersede_from(self, message_id: int) -> None:
        """Hide message_id and everything after it in the current conversation (kept in the database)."""
        assert self.conversation_id is not None
        ids = [m.id for m in self.store.messages(self.conversation_id) if m.id >= message_id]
        self.store.set_status(ids, "superseded")
        self.chat.remove_messages(ids)

    def _start_reply(self, conversation_id: int) -> None:
        messages = self.store.messages(conversation_id)
        turns = _turns(messages)
        if not turns or turns[-1].role != "user":
            return
        conversation = self.store.conversation(conversation_id)
        # The reply's row exists before the first token, so a crash at any point leaves it marked.
        reply = self.store.add_message(conversation_id, "assistant", "", status="streaming")
        self.chat.add_message(reply.id, "assistant", "", (), "streaming", None, self.settings.show_draft_tint)
        request_id = self.controller.start_reply(
            turns,
            system_prompt=conversation.system_prompt if conversation else "",
            params=self.settings.sampling(),
            max_tokens=self.settings.max_tokens,
            history_key=f"conversation-{conversation_id}",
        )
        buffer = self.controller.reply(request_id)
        assert buffer is not None
        self.live = LiveReply(conversation_id, reply.id, buffer, last_saved_s=time.monotonic())
        self.stats_label.setText(f"Speed: {DASH} (prefilling)")

    def send(self, text: str) -> None:
        """Send a user message in the current conversation (a new one if none is open)."""
        if self.controller.is_busy or not text.strip():
            return
        if self._editing_message_id is not None:
            self._supersede_from(self._editing_message_id)
            self._editing_message_id = None
            self.chat.set_editing(None)
        conversation_id = self._ensure_conversation(text)
        message = self.store.add_message(conversation_id, "user", text)
        self.chat.add_message(message.id, "user", text, tint=self.settings.show_draft_tint)
        self.chat.set_notice("")
        self._start_reply(conversation_id)
        self._refresh_conversations()

    def regenerate(self) -> None:
        if self.controller.is_busy or self.conversation_id is None:
            return
        messages = self.store.messages(self.conversation_id)
        last_user = next((m for m in reversed(messages) if m.role == "user"), None)
        if last_user is None:
            return
        later = [m for m in messages if m.id > last_user.id]
        if later:
            self._supersede_from(later[0].id)
        self._start_reply(self.conversation_id)

    def _save_live(self, status: str, stats: dict[str, Any] | None = None) -> None:
        live = self.live
        if live is None:
            return
        shown = live.reply.shown(is_final=status != "streaming")
        self.store.save_reply(live.message_id, shown, status, stats)
        live.last_saved_s = time.monotonic()

    def _live_widget(self) -> Any:
        if self.live is None or self.live.conversation_id != self.conversation_id:
            return None
        return self.chat.widget_for(self.live.message_id)

    def _end_live(self, status: str, stats: dict[str, Any] | None, note: str = "") -> None:
        live = self.live
        if live is None:
            return
        self._save_live(status, stats)
        widget = self._live_widget()
        if widget is not None:
            widget.finish(live.reply.shown(is_final=True), self.settings.show_draft_tint)
            widget.set_status(status, stats, note)
        self.live = None

    # ---- controller signals

    def on_controller_load_progressed(self, stage: str, fraction: float) -> None:
        self._set_loading(stage)
        if fraction < 0:
            self.load_progress.setRange(0, 0)
        else:
            self.load_progress.setRange(0, 100)
            self.load_progress.setValue(round(fraction * 100))

    def on_controller_engine_loaded(self, info: EngineInfo) -> None:
        self._set_loading(None)
        set_model_in_use = getattr(self.models_page, "set_model_in_use", None)  # (a QLabel if unavailable)
        if set_model_in_use is not None:
            set_model_in_use(info.target_path)
            self.models_page.set_gpu_backend(info.gpu_offload_supported)
        if self.welcome is not None:
            self.welcome.set_gpu_backend(info.gpu_offload_supported)
        self._show_pair(info)
        self._show_speculation_choice(info.draft or "none")
        self.compare.set_speculation(info.speculation)

    def on_controller_engine_failed(self, sentence: str) -> None:
        self._set_loading(None)
        self._show_pair(None, f"Model not loaded: {sentence}")
        self.chat.set_notice(f"The model could not be loaded: {sentence}", is_warning=True)

    def on_controller_engine_died(self, sentence: str) -> None:
        self._set_loading(None)
        self._show_pair(None, "Engine stopped; the next message starts a fresh one")
        self.chat.set_notice(sentence, is_warning=True)

    def on_controller_draft_changed(self, info: EngineInfo) -> None:
        self._show_pair(info)
        self._show_speculation_choice(info.draft or "none")
        self.compare.set_speculation(info.speculation)

    def on_controller_draft_failed(self, sentence: str) -> None:
        info = self.controller.info
        self._show_pair(info, f"Speculation unchanged: {sentence}")
        if info is not None:
            self._update_settings(draft=info.draft or "none")
            self._show_speculation_choice(info.draft or "none")

    def on_controller_reply_started(self, started: ReplyStarted) -> None:
        if self.live is None or started.request_id != self.live.request_id:
            return
        if started.n_dropped_turns and self.live.conversation_id == self.conversation_id:
            info = self.controller.info
            n_ctx = f" ({info.n_ctx} tokens)" if info else ""
            self.chat.set_notice(
                f"This conversation is longer than the model's context{n_ctx}: its oldest "
                f"{started.n_dropped_turns} messages are left out of the prompt. The system prompt is kept."
            )

    def on_controller_reply_progressed(self, progress: ReplyProgress) -> None:
        tint = self.settings.show_draft_tint
        if progress.request_id in self.compare.request_ids:
            self.compare.on_progress(progress, tint)
            if progress.stats:
                self._show_live_stats(progress.stats[-1])
            return
        live = self.live
        if live is None or progress.request_id != live.request_id:
            return
        if progress.stats:
            self._show_live_stats(progress.stats[-1])
        widget = self._live_widget()
        if widget is not None and len(live.reply) != progress.start:
            widget.stream(live.reply.shown(), tint)
        if widget is not None and progress.stats:
            widget.add_stats(progress.stats, self._plain_tokens_per_s())
        if time.monotonic() - live.last_saved_s >= SAVE_INTERVAL_S:
            self._save_live("streaming")

    def _show_live_stats(self, stats: Stats, prefix: str = "Speed") -> None:
        self.stats_label.setText(f"{prefix}: {live_line(stats.as_dict(), self._plain_tokens_per_s())}")

    def on_controller_reply_finished(self, reply: Reply) -> None:
        finished = reply.finished
        assert finished is not None
        tint = self.settings.show_draft_tint
        if reply.request_id in self.compare.request_ids:
            name = self.compare.request_ids[reply.request_id]
            if name == "plain":
                self.speed_stats.record_plain_speed(finished)
            self.compare.on_finished(reply, tint)
            self._show_live_stats(finished.stats, prefix="Last run")
            return
        live = self.live
        if live is None or reply.request_id != live.request_id:
            return
        self.speed_stats.record_plain_speed(finished)
        record = self.speed_stats.record(finished)
        widget = self._live_widget()
        if widget is not None and widget.speed.points:  # the reply keeps its small sparkline
            from ui.speed_panel import POINTS_KEY

            record[POINTS_KEY] = widget.speed.kept_points()
        status = "cancelled" if finished.stop_reason == "cancelled" else "complete"
        note = "stopped at the context limit" if finished.stop_reason == "context" else ""
        self._end_live(status, record, note)
        self._show_live_stats(finished.stats, prefix="Last reply")
        self._refresh_conversations()

    def on_controller_reply_failed(self, request_id: int, sentence: str, has_engine_died: bool) -> None:
        if request_id in self.compare.request_ids:
            self.compare.on_failed(request_id, sentence)
            return
        live = self.live
        if live is None or request_id != live.request_id:
            return
        if has_engine_died or live.text:
            stats = self.speed_stats.partial_record(live.stats)
            self._end_live("interrupted", stats)
        else:
            # Nothing was written (the prompt did not fit, no model): the empty reply row is hidden.
            self.store.set_status([live.message_id], "superseded")
            self.chat.remove_messages([live.message_id])
            self.live = None
        if not has_engine_died:
            # A reply cut short (a server lost mid-reply) is kept: the sentence says what happened.
            self.chat.set_notice(sentence if live.text else f"No reply: {sentence}", is_warning=True)

    def on_controller_busy_changed(self, is_busy: bool) -> None:
        self.chat.set_busy(is_busy)
        self.compare.set_busy(is_busy)

    # ---- view signals

    def on_chat_send_requested(self, text: str) -> None:
        self.send(text)

    def on_chat_regenerate_requested(self) -> None:
        self.regenerate()

    def on_chat_edit_requested(self, message_id: int) -> None:
        if self.controller.is_busy:
            return
        widget = self.chat.widget_for(message_id)
        if widget is None:
            return
        self._editing_message_id = message_id
        self.chat.set_editing(widget.text())

    def edit_last_user_message(self) -> None:
        users = [w for w in self.chat.message_widgets() if w.role == "user"]
        if users:
            self.on_chat_edit_requested(users[-1].message_id)

    def on_chat_edit_cancelled(self) -> None:
        self._editing_message_id = None

    def on_chat_system_prompt_changed(self, text: str) -> None:
        if self.conversation_id is None:
            self._pending_system_prompt = text
        else:
            self.store.set_system_prompt(self.conversation_id, text)

    def on_conversations_conversation_selected(self, conversation_id: int) -> None:
        if conversation_id != self.conversation_id:
            self.show_conversation(conversation_id)

    def on_conversations_new_requested(self) -> None:
        if self.conversation_id is not None and not self.store.messages(self.conversation_id):
            self.chat.input.setFocus()
            return
        conversation = self.store.create_conversation()
        self.show_conversation(conversation.id)
        self.chat.input.setFocus()

    def on_conversations_rename_requested(self, conversation_id: int, title: str) -> None:
        self.store.rename_conversation(conversation_id, title)
        self._refresh_conversations()

    def on_conversations_delete_requested(self, conversation_id: int) -> None:
        if self.live is not None and self.live.conversation_id == conversation_id:
            self.controller.stop()
            self.live = None
        self.store.delete_conversation(conversation_id)
        if conversation_id == self.conversation_id:
            remaining = self.store.conversations()
            self.show_conversation(remaining[0].id if remaining else None)
        else:
            self._refresh_conversations()

    def on_conversations_search_changed(self, _text: str) -> None:
        self._refresh_conversations()

    def on_compare_compare_requested(self, prompt: str) -> None:
        if self.controller.is_busy:
            return
        turns = (ChatTurn("user", prompt),)
        params, max_tokens = self.settings.sampling(), self.settings.max_tokens
        if not params.is_greedy and params.seed is None:
            # One seed for both runs: with n-gram drafts sampled speculation then writes the very
            # text plain decoding writes (engine/sampling.py, keyed sampling), so only speed differs.
            params = replace(params, seed=random.randrange(1 << 31))
        plain_id = self.controller.start_reply(turns, params=params, max_tokens=max_tokens, speculate=False)
        speculative_id = self.controller.start_reply(
            turns, params=params, max_tokens=max_tokens, speculate=None
        )
        self.compare.start(plain_id, speculative_id)

    def on_tabs_current_changed(self, index: int) -> None:
        if self.tabs.widget(index) is self.compare and not self.compare.prompt.toPlainText().strip():
            last_user = next((w for w in reversed(self.chat.message_widgets()) if w.role == "user"), None)
            self.compare.prompt.setPlainText(
                self.chat.input.toPlainText().strip() or (last_user.text() if last_user else "")
            )

    def on_speculation_combo_activated(self, index: int) -> None:
        kind = self.speculation_combo.itemData(index)
        if kind in ("none", "ngram"):
            self.set_speculation(kind)
        elif self.settings.draft_model_path and Path(self.settings.draft_model_path).exists():
            self.set_speculation(self.settings.draft_model_path)
        else:
            self.on_choose_draft_action_triggered()

    def on_choose_draft_action_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a draft model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if path:
            self.set_speculation(path)
        else:
            self._show_speculation_choice(self._current_draft())

    def on_tint_check_toggled(self, is_checked: bool) -> None:
        self._update_settings(show_draft_tint=is_checked)
        self.chat.set_tint(is_checked)

    def on_settings_action_triggered(self) -> None:
        info = self.controller.info
        dialog = SettingsDialog(self.settings, bool(info and info.gpu_offload_supported), self)
        if dialog.exec():
            self.apply_settings(dialog.result_settings())

    def apply_settings(self, after: Settings) -> None:
        """Save new settings; reload the engine if an engine setting changed (sampling applies next reply)."""
        before = self.settings
        self._update_settings(**{k: getattr(after, k) for k in after.__dataclass_fields__})
        if after.theme != self.theme.choice:
            self.theme.set_choice(after.theme)
        if needs_reload(before, after):
            self.start_engine()
        self.serve_toggle.apply_settings(self.settings)  # its port, key, who may connect

    def on_models_page_pair_chosen(self, target_path: str, draft: str) -> None:
        changes: dict[str, Any] = {"model_path": target_path, "draft": parse_draft(draft).text}
        if parse_draft(draft).model is not None:
            changes["draft_model_path"] = draft
        self._model_override = self._draft_override = None
        self._update_settings(**changes)
        self._show_speculation_choice(draft)
        self.start_engine()
        self.tabs.setCurrentIndex(0)

    # ---- keyboard (ui/shortcuts.py)

    def focus_input(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.chat.input.setFocus()

    def focus_search(self) -> None:
        self.tabs.setCurrentIndex(0)
        self.conversations.search.setFocus()
        self.conversations.search.selectAll()

    def open_compare(self) -> None:
        self.tabs.setCurrentWidget(self.compare)
        self.compare.prompt.setFocus()

    def cycle_speculation(self) -> None:
        """Off -> n-gram -> the draft model (when one was chosen and exists) -> off."""
        kinds = ["none", "ngram"]
        if self.settings.draft_model_path and Path(self.settings.draft_model_path).exists():
            kinds.append("draft")
        current = self.speculation_combo.currentData()
        kind = kinds[(kinds.index(current) + 1) % len(kinds)] if current in kinds else "none"
        self.speculation_combo.setCurrentIndex(self.speculation_combo.findData(kind))
        self.on_speculation_combo_activated(self.speculation_combo.currentIndex())

    def show_shortcuts(self) -> None:
        from ui.shortcuts import ShortcutsDialog

        dialog = ShortcutsDialog(list(self.shortcut_actions.values()), self)
        dialog.setObjectName("shortcutsDialog")
        dialog.open()

    def on_theme_changed(self, _is_dark: bool) -> None:
        self.chat.restyle()
        self.compare.restyle()

    # ---- window

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        if not self._has_shown:
            self._has_shown = True
            self.activateWindow()
            QTimer.singleShot(0, self.chat.input.setFocus)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop the engine, keep a reply cut short as interrupted, save settings, close the database."""
        if self._is_closed:
            return
        self._is_closed = True
        if self.live is not None:
            self.controller.stop()
            self._end_live("interrupted", self.speed_stats.partial_record(self.live.stats))
        self.serve_toggle.stop()
        self.controller.shutdown()
        # Downloads pause; their .part files stay and resume next time.
        shutdown_downloads = getattr(self.models_page, "shutdown", None)
        if shutdown_downloads is not None:
            shutdown_downloads()
        self._update_settings()
        self.store.close()
