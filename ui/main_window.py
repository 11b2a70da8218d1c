"""Tandem's main window: conversations, the chat, Compare, models; the chat's header.

The window builds and wires widgets; what it shows and decides lives in its presenter
(ui/presenters/presenter.py, ChatPresenter: no widgets), whose signals the pages follow.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QMainWindow,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.host.controller import EngineController
from app.host.messages import EngineInfo
from app.library.model_spec import ModelSpec
from app.settings import Settings, SpeedUp, load_settings
from app.store import Store
from engine.config import DraftChoice
from ui.about import AboutDialog, app_icon
from ui.chat.chat_view import ChatView
from ui.chat.conversation_list import ConversationList
from ui.compare.compare_view import CompareView
from ui.load_line import LoadLine
from ui.presenters.engine_presenter import PairView, SpeculationView
from ui.presenters.failures import STRICT_ENV
from ui.presenters.presenter import ChatPresenter
from ui.qt import theme
from ui.qt.widgets import flush, named
from ui.settings.settings_dialog import SettingsDialog, needs_reload

if TYPE_CHECKING:
    from ui.chat.welcome import WelcomePanel
    from ui.chat.welcome_downloads import WelcomeDownloads
    from ui.models.models_page import ModelsPage

log = logging.getLogger(__name__)


FIRST_SIZE = QSize(1180, 780)
TITLE_BAR_PX = 40  # room left for the window manager's title bar and frame


def fitted_size(wanted: QSize, available: QSize) -> QSize:
    """`wanted` within the screen's free area, its frame included (400 x 300 at least)."""
    return wanted.boundedTo(available - QSize(0, TITLE_BAR_PX)).expandedTo(QSize(400, 300))


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
        store = Store()
        store.mark_unfinished_interrupted()
        self.controller = controller or EngineController(self)
        # What the window shows and decides (ui/presenters/presenter.py: no widgets, tested alone).
        self.presenter = ChatPresenter(self.controller, store, load_settings(), model, draft, self)
        self._is_closed = False
        self._has_shown = False
        self._answer_when_loaded = False  # a larger context chosen for a message that did not fit
        from ui.qt.theme import ThemeManager

        self.theme = ThemeManager(self.presenter.settings.theme, self)  # before any text is rendered
        self._fit_to_screen()

        self._build_tabs()
        self.presenter.view_extras = self.chat.kept_extras  # a finished reply's sparkline, kept
        self._build_toolbar()
        # A theme switch: each page draws again in its colours.
        for restyle in (self.header.restyle, self.chat.restyle, self.compare.restyle):
            self.theme.changed.connect(restyle)
        if self.welcome is not None:
            self.theme.changed.connect(self.welcome.restyle)
        self._build_status_bar()
        self._build_menu()
        from ui import shortcuts

        self.shortcut_actions = shortcuts.install(self, self._shortcut_handlers())
        from ui.theme_menu import install_theme_menu

        # View ▸ Theme (Settings ▸ Chat has it too)
        install_theme_menu(
            self.menuBar(),
            self.theme,
            lambda choice: self.apply_settings(replace(self.presenter.settings, theme=choice)),
        )
        self._build_file_actions()
        self._connect_controller()
        self._connect_presenter()

        self._refresh_conversations()
        self.presenter.open_last_conversation()
        # Unreadable (kept aside, a fresh one opened), or locked or read-only (this session's history
        # kept in memory only): app/store.py says so in a sentence.
        if store.notice:
            self.chat.set_notice(store.notice, True)
        self.presenter.engine.start_engine()  # Settings → Engine: a server or this computer

    # ---- building

    def _build_toolbar(self) -> None:
        """The chat's header (ui/chat/chat_header.py: model, speed-up, state, the highlight's legend,
        the API switch), then Settings."""
        from ui.chat.chat_header import ChatHeader

        bar = named(QToolBar("Chat header", movable=False), "speculationToolbar")
        self.addToolBar(bar)
        self.header = ChatHeader(self.presenter.settings.show_draft_tint)
        bar.addWidget(self.header)
        self.chat.sources_shown.connect(self.header.set_sources)  # the legend names what the chat tints
        self.header.model_chosen.connect(self.on_header_model_chosen)
        from ui.chat.model_choices import ModelChoices

        # What the model in use is offered: drafts that pair, tasks it does (ui/chat/model_choices.py).
        self.model_choices = choices = ModelChoices(self.presenter, self.header, self.chat, self)
        choices.other_draft_requested.connect(self.on_choose_draft_action_triggered)
        choices.model_opened.connect(self.on_header_model_chosen)
        if self.welcome_downloads is not None:  # the chat's download: the welcome's, shown for its progress
            choices.small_pair_requested.connect(self.show_welcome)
            choices.small_pair_requested.connect(self.welcome_downloads.request)
        self.header.open_file_requested.connect(self.model_choices.open_file)
        self.header.speed_up_chosen.connect(self.on_header_speed_up_chosen)
        self.header.tint_toggled.connect(self.on_tint_check_toggled)
        from ui.chat.presets import PresetChoices

        # The header's presets: Tandem's and the user's for the model in use (ui/chat/presets.py).
        self.preset_choices = presets = PresetChoices(self.presenter, self.header, self.chat, self)
        self.header.preset_chosen.connect(presets.choose)
        self.header.preset_chosen.connect(self.task_switch.on_user_chose)
        self.header.speed_up_chosen.connect(self.task_switch.on_user_chose)
        self.header.save_preset_requested.connect(presets.ask_and_save)
        presets.refresh()
        self.header.refresh_models()
        self._draft_tip = (
            "Pick a small GGUF model with the same vocabulary as the model, to guess ahead for it"
        )
        self.choose_draft_action = QAction("Choose a draft model…", self, toolTip=self._draft_tip)
        self.choose_draft_action.triggered.connect(self.on_choose_draft_action_triggered)
        self.settings_action = QAction("Settings…", self)
        self.settings_action.triggered.connect(self.on_settings_action_triggered)  # the Model menu's
        from ui.settings.serve_toggle import ServeToggle

        # The loaded engine on the OpenAI-compatible API.
        self.serve_toggle = ServeToggle(
            self.controller, lambda: self.presenter.settings, self.header.add_switch, self.statusBar(), self
        )

    def _build_tabs(self) -> None:
        self.tabs = QTabWidget()
        self.setCentralWidget(self.tabs)
        splitter = QSplitter()
        self.conversations = ConversationList()
        self.chat = ChatView()
        self.chat.set_tint(self.presenter.settings.show_draft_tint)
        splitter.addWidget(self.conversations)
        splitter.addWidget(self.chat)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([250, 930])
        chat_tab = QWidget()
        chat_layout = flush(QVBoxLayout(chat_tab))
        # The welcome's "Download and switch", once the page is built.
        self.welcome_downloads: WelcomeDownloads | None = None
        self.welcome = self._make_welcome()
        if self.welcome is not None:
            chat_layout.addWidget(self.welcome)
        chat_layout.addWidget(splitter, 1)
        self.tabs.addTab(chat_tab, "Chat")
        self.compare = CompareView(self.presenter.comparison)
        self.compare.set_tint(self.presenter.settings.show_draft_tint)
        self.tabs.addTab(self.compare, "Compare")
        self.models_page = self._make_models_page()
        self.tabs.addTab(self.models_page, "Models")
        if self.welcome is not None:
            from ui.chat.welcome_downloads import WelcomeDownloads

            # "Download and switch": through the Models page, then the pair (ui/chat/welcome_downloads.py).
            page = None if isinstance(self.models_page, QLabel) else self.models_page
            self.welcome_downloads = WelcomeDownloads(self.welcome, page, self.on_models_page_pair_chosen)
            # The welcome's demo: Compare, on a paragraph to repeat, the usual way and then sped up.
            self.welcome.demo_requested.connect(lambda: self.tabs.setCurrentWidget(self.compare))
            self.welcome.demo_requested.connect(self.compare.show_demo)
            self.welcome.demo_requested.connect(self.welcome.shrink)

        self.conversations.conversation_selected.connect(self.on_conversations_conversation_selected)
        self.conversations.new_requested.connect(self.on_conversations_new_requested)
        self.conversations.rename_requested.connect(self.presenter.rename_conversation)
        self.conversations.delete_requested.connect(self.presenter.delete_conversation)
        self.conversations.search_changed.connect(self._refresh_conversations)
        self.chat.send_requested.connect(self.on_chat_send_requested)
        self.chat.stop_requested.connect(self.controller.stop)
        self.chat.regenerate_requested.connect(self.presenter.regenerate)
        self.chat.continue_requested.connect(self.on_chat_continue_requested)
        self.chat.edit_requested.connect(self.on_chat_edit_requested)
        self.chat.version_requested.connect(self.presenter.choose_version)
        self.chat.edit_cancelled.connect(self.presenter.cancel_edit)
        self.chat.system_prompt_changed.connect(self.presenter.set_system_prompt)
        from ui.chat.task_switch import TaskSwitch

        # A suggested task's preset and speed-up: said, with Undo; the user's back after its reply.
        self.task_switch = TaskSwitch(self.presenter, self.chat, lambda p: self.preset_choices.apply(p), self)
        self.chat.task_suggested.connect(self.task_switch.on_task_suggested)
        self.compare.compare_requested.connect(self.presenter.comparison.run)
        self.compare.stop_requested.connect(self.presenter.comparison.stop)
        self.tabs.currentChanged.connect(self.on_tabs_current_changed)

    def _make_models_page(self) -> ModelsPage | QLabel:
        # The models page is built separately and may be missing or broken in a given build;
        # the chat must open regardless.
        try:
            from ui.models.models_page import ModelsPage

            page = ModelsPage()
            page.pair_chosen.connect(self.on_models_page_pair_chosen)
            return page
        except Exception as e:  # ImportError, or a page that fails to build
            if os.environ.get(STRICT_ENV):  # the tests: a page that fails to build is a bug
                raise
            log.warning("models page unavailable: %s", e)
            label = QLabel(
                "The models page is not available in this build.\nStart with: tandem --model PATH --draft PATH|ngram|none"
            )
            label.setAlignment(Qt.AlignmentFlag.AlignCenter)
            return label

    def _make_welcome(self) -> WelcomePanel | None:
        """The first-start welcome panel (ui/chat/welcome.py) and its downloads through the Models
        page (ui/chat/welcome_downloads.py); like the models page, optional."""
        from ui.chat.welcome_downloads import make_welcome

        panel = make_welcome()
        if panel is None:
            return None

        def seen() -> None:
            self.presenter.update_settings(replace(self.presenter.settings, has_seen_welcome=True))

        panel.dismissed.connect(seen)
        panel.small_offer_shown.connect(self.chat.empty_state.set_download_offered_above)
        if self.presenter.settings.has_seen_welcome:
            panel.hide()
        else:
            seen()  # shown by itself once
        return panel

    def _build_menu(self) -> None:
        model_menu = self.menuBar().addMenu("&Model")
        model_menu.addAction(self.choose_draft_action)
        model_menu.addAction(self.settings_action)
        help_menu = self.menuBar().addMenu("&Help")
        tip = "What Tandem does, a demo where the speed shows, and a model for this machine"
        self.welcome_action = QAction("Welcome", self, toolTip=tip, enabled=self.welcome is not None)
        self.welcome_action.triggered.connect(self.show_welcome)
        help_menu.addAction(self.welcome_action)
        self.about_action = QAction("About Tandem", self, menuRole=QAction.MenuRole.AboutRole)
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.about_action)

    def _build_file_actions(self) -> None:
        """Conversation ▸ Import and Export, and a reply against its document
        (ui/chat/conversation_actions.py)."""
        from ui.chat.conversation_actions import ConversationActions

        self.conversation_actions = actions = ConversationActions(
            self.presenter, self.chat, self.shortcut_actions["settingsAction"], self
        )
        self.chat.changes_requested.connect(actions.show_reply_diff)
        self.conversations.export_requested.connect(actions.export_conversation)

    def show_about(self) -> None:
        from ui.presenters.words import runs_on_words

        info = self.controller.info
        dialog = AboutDialog(
            self,
            runs_on_words(
                info.gpu_offload_supported if info is not None else None,
                self.presenter.settings.n_gpu_layers,
                info.server if info is not None else "",
            ),
        )
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()

    def show_welcome(self) -> None:
        """Help ▸ Welcome: over the chat, whole (the panel is its own: ui/chat/welcome.py)."""
        if self.welcome is not None:
            self.tabs.setCurrentIndex(0)
            self.welcome.show_whole()

    def _build_status_bar(self) -> None:
        status = self.statusBar()
        self.loading = LoadLine(status)
        self.stats_label = named(QLabel(""), "statsIndicator", "State")
        status.addPermanentWidget(self.stats_label)

    def _connect_controller(self) -> None:
        c = self.controller
        c.load_progressed.connect(self.loading.on_controller_load_progressed)
        c.engine_loaded.connect(self.on_controller_engine_loaded)
        c.engine_failed.connect(self.on_controller_engine_failed)
        c.busy_changed.connect(self.chat.set_busy)
        c.busy_changed.connect(self.compare.set_busy)
        # A chip's tokens: the loaded model's own count, asked for as it is added.
        self.chat.attachments.count_tokens = c.count_tokens
        c.tokens_counted.connect(self.chat.attachments.on_controller_tokens_counted)

    def _connect_presenter(self) -> None:
        p = self.presenter
        p.conversation_shown.connect(self.chat.on_presenter_conversation_shown)  # the chat shows its rows
        p.earlier_shown.connect(self.chat.on_presenter_earlier_shown)
        self.chat.earlier_requested.connect(p.show_earlier)
        p.conversations_changed.connect(self._refresh_conversations)
        p.message_added.connect(self.chat.add_row)
        p.messages_removed.connect(self.chat.remove_messages)
        p.editing_changed.connect(self.chat.set_editing)
        p.notice_changed.connect(self.chat.set_notice)
        r = p.replies  # the reply being generated: its signals come straight to the window
        r.message_added.connect(self.chat.add_row)
        r.messages_removed.connect(self.chat.remove_messages)
        r.notice_changed.connect(self.chat.set_notice)
        r.speed_line_changed.connect(self.stats_label.setText)
        r.reply_progressed.connect(self.chat.on_replies_reply_progressed)  # the token path's last hops
        r.reading_shown.connect(self.chat.on_replies_reading_shown)
        r.reply_ended.connect(self.chat.on_replies_reply_ended)
        r.reply_ended.connect(self.task_switch.on_reply_ended)
        if self.welcome is not None:
            r.reply_ended.connect(self.welcome.shrink)
        r.context_offered.connect(self.on_presenter_context_offered)
        e = p.engine
        e.speculation_changed.connect(self.on_presenter_speculation_changed)
        e.pair_changed.connect(self.on_presenter_pair_changed)
        e.loading_finished.connect(lambda: self.loading.set_stage(None))
        e.notice_changed.connect(self.chat.set_notice)
        c = p.comparison
        c.started.connect(self.compare.start)  # Compare follows its runs itself
        c.progressed.connect(self.compare.on_progress)
        c.finished.connect(self.compare.on_finished)
        c.failed.connect(self.compare.on_failed)
        c.state_changed.connect(self.stats_label.setText)
        self.on_presenter_speculation_changed(e.speculation)

    def on_presenter_context_offered(self, n_ctx: int) -> None:
        """A message that did not fit: one click takes the larger context this computer allows
        (in Settings too) and answers the message once the model has loaded again."""
        self.chat.set_notice_action(
            f"Use {n_ctx:,} tokens and answer", lambda: self.use_context_and_answer(n_ctx)
        )

    def use_context_and_answer(self, n_ctx: int) -> None:
        after = replace(self.presenter.settings, n_ctx=n_ctx)
        if needs_reload(self.presenter.settings, after):
            self._answer_when_loaded = True
            self.apply_settings(after)
        else:  # that context already (chosen in Settings meanwhile): answer now
            self.presenter.regenerate()

    # ---- engine

    def on_presenter_pair_changed(self, pair: PairView) -> None:
        self.header.set_state(pair.text, pair.restates)
        if pair.tooltip is not None:
            self.header.state_label.setToolTip(pair.text + "\n" + pair.tooltip)
        theme.set_tone(self.header.state_label, "error" if pair.is_problem else "")
        if pair.title is not None:
            self.setWindowTitle(pair.title)
            self.model_choices.offer(self.controller.info)

    def on_presenter_speculation_changed(self, speculation: SpeculationView) -> None:
        from ui.settings.remote_engine import LOCAL_ONLY_TIP  # a server decides its own speculation

        local = speculation.can_switch
        self.header.set_speed_up(speculation.choice, local, LOCAL_ONLY_TIP)
        self.choose_draft_action.setEnabled(local)
        self.choose_draft_action.setToolTip(self._draft_tip if local else LOCAL_ONLY_TIP)
        self.compare.set_speculation(speculation.in_effect)

    # ---- conversations

    def _refresh_conversations(self) -> None:
        search = self.conversations.search.text().strip()
        store = self.presenter.store
        found = store.conversations(search)
        snippets = store.search_snippets(search, [c.id for c in found]) if search else {}
        self.conversations.set_conversations(found, self.presenter.conversation_id, snippets)

    # ---- controller signals

    def on_controller_engine_failed(self, _failure: object) -> None:
        self._answer_when_loaded = False  # the load's notice says why; nothing is sent

    def on_controller_engine_loaded(self, info: EngineInfo) -> None:
        # The pair, the speculation shown and the loading line follow the presenter.
        if self._answer_when_loaded:  # the message that did not fit, in the larger context
            self._answer_when_loaded = False
            QTimer.singleShot(0, self.presenter.regenerate)
        self.chat.attachments.recount()  # this model's count of the chips in the tray
        page = self.models_page
        self.header.set_model_in_use(self.presenter.engine.model_key(), info.target_name, info.server)
        if not isinstance(page, QLabel):  # (a QLabel where the page is unavailable)
            page.set_model_in_use(info.target_path)
            page.catalog_section.set_gpu_backend(info.gpu_offload_supported)
        if self.welcome is not None:
            self.welcome.set_gpu_backend(info.gpu_offload_supported)

    # ---- view signals

    def on_chat_send_requested(self, text: str) -> None:
        # The message carries the documents of its chips (saved with it: the copy that stands).
        if self.presenter.send(text, self.chat.attachments.documents()):
            self.chat.attachments.clear()
        elif not self.chat.input.toPlainText():  # not saved (a full disk): nothing typed is lost
            self.chat.input.setPlainText(text)

    def on_chat_continue_requested(self) -> None:
        """A reply stopped at the reply-length cap: ask the model to write on."""
        from ui.presenters.verdict import CONTINUE_REQUEST

        self.presenter.send(CONTINUE_REQUEST)

    def on_chat_edit_requested(self, message_id: int) -> None:
        widget = self.chat.widget_for(message_id)
        if widget is not None:
            self.presenter.edit(message_id, widget.text())
            # The edited message keeps its documents unless their chips are removed.
            self.chat.attachments.clear()
            self.chat.attachments.add_documents(self.presenter.attachments_of(message_id))

    def on_conversations_conversation_selected(self, conversation_id: int) -> None:
        search = self.conversations.search.text().strip()
        self.presenter.select_conversation(conversation_id, found=search)
        if search:  # found by a search: its match shown, once the messages are laid out
            QTimer.singleShot(0, lambda: self._show_match(search))

    def _show_match(self, search: str, pages: int = 4) -> None:
        """A search's match in the conversation shown; where it is not among the messages shown,
        earlier pages are added until it is (at most `pages` of them: further back, scrolling up
        finds it, and the window stays as quick as a page)."""
        for _ in range(pages + 1):
            if self.chat.show_match(search) or self.chat.show_match(search.split()[0]):
                return
            if self.chat.earlier_button.isHidden():
                return
            self.presenter.show_earlier()

    def on_conversations_new_requested(self) -> None:
        self.conversations.search.clear()  # a search left on would hide the new conversation
        self.presenter.new_conversation()
        self.chat.input.setFocus()

    def on_tabs_current_changed(self, index: int) -> None:
        self.header.set_legend_shown(index == 0)  # the chat's highlight legend, with the chat only
        if self.tabs.widget(index) is self.compare and not self.compare.prompt.toPlainText().strip():
            last_user = next((w for w in reversed(self.chat.message_widgets()) if w.role == "user"), None)
            self.compare.prompt.setPlainText(
                self.chat.input.toPlainText().strip() or (last_user.text() if last_user else "")
            )

    def on_header_speed_up_chosen(self, key: SpeedUp) -> None:
        if not self.presenter.engine.choose_speculation(key):
            self.model_choices.show_draft_menu()

    def on_header_model_chosen(self, model: ModelSpec) -> None:
        self.presenter.engine.choose_model(model)
        self.preset_choices.refresh()

    def on_choose_draft_action_triggered(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Choose a draft model", str(Path.home()), "GGUF models (*.gguf)"
        )
        if path:
            self.presenter.engine.set_speculation(DraftChoice.of_model(path))  # from the next reply
        else:
            self.presenter.engine.reshow_speculation()

    def on_tint_check_toggled(self, is_checked: bool) -> None:
        self.presenter.update_settings(replace(self.presenter.settings, show_draft_tint=is_checked))
        self.chat.set_tint(is_checked)
        self.compare.set_tint(is_checked)

    def on_settings_action_triggered(self) -> None:
        info = self.controller.info
        dialog = SettingsDialog(self.presenter.settings, bool(info and info.gpu_offload_supported), self)
        if dialog.exec():
            self.apply_settings(dialog.result_settings())

    def apply_settings(self, after: Settings) -> None:
        """Save new settings; reload the engine if an engine setting changed (sampling applies next reply)."""
        before = self.presenter.settings
        self.presenter.update_settings(after)
        if after.theme != self.theme.choice:
            self.theme.set_choice(after.theme)
        if needs_reload(before, after):
            self.presenter.engine.start_engine()
        self.serve_toggle.apply_settings(self.presenter.settings)  # its port, key, who may connect

    def on_models_page_pair_chosen(self, target_path: str, draft: DraftChoice) -> None:
        self.presenter.engine.choose_pair(target_path, draft)
        self.tabs.setCurrentIndex(0)

    def open_link(self, url: str) -> None:
        """A tandem://open_from_hf?model=OWNER/REPO&file=FILE link (the desktop entry's URL
        handler): the Models page checks that file before anything is downloaded."""
        if not isinstance(self.models_page, QLabel):
            self.tabs.setCurrentWidget(self.models_page)
            self.models_page.open_link(url)

    # ---- keyboard (ui/shortcuts.py)

    def _shortcut_handlers(self) -> dict[str, Callable[[], None]]:
        """What each shortcut action does (ui/shortcuts.py names them and gives them their keys)."""
        return {
            "newConversationAction": self.on_conversations_new_requested,
            "searchConversationsAction": self.focus_search,
            "focusInputAction": self.focus_input,
            "stopAction": self.presenter.comparison.stop,
            "regenerateAction": self.presenter.regenerate,
            "switchSpeculationAction": self.cycle_speculation,
            "showChatAction": lambda: self.tabs.setCurrentIndex(0),
            "showCompareAction": self.open_compare,
            "showModelsAction": lambda: self.tabs.setCurrentWidget(self.models_page),
            "settingsAction": self.on_settings_action_triggered,
            "shortcutsAction": self.show_shortcuts,
            "quitAction": lambda: None if self.close() else None,
        }

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
        if not self.presenter.engine.choose_speculation(self.presenter.engine.next_speculation()):
            self.on_choose_draft_action_triggered()

    def show_shortcuts(self) -> None:
        from ui.shortcuts import ShortcutsDialog

        dialog = named(ShortcutsDialog(list(self.shortcut_actions.values()), self), "shortcutsDialog")
        dialog.open()

    # ---- window

    def _fit_to_screen(self) -> None:
        """The size the user left the window at, or the usual first size, within the screen's free
        area less the title bar (the status bar, where loading shows, stays on a 768-px screen)."""
        wanted = QSize(
            self.presenter.settings.window_width or FIRST_SIZE.width(),
            self.presenter.settings.window_height or FIRST_SIZE.height(),
        )
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is not None:
            wanted = fitted_size(wanted, screen.availableGeometry().size())
        self.resize(wanted)

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
        self.presenter.replies.stop()
        size = self.normalGeometry().size() if self.isMaximized() else self.size()
        self.presenter.update_settings(
            replace(self.presenter.settings, window_width=size.width(), window_height=size.height())
        )
        self.serve_toggle.stop()
        self.controller.shutdown()
        # Downloads pause; their .part files stay and resume next time.
        if not isinstance(self.models_page, QLabel):
            self.models_page.downloads.shutdown()
        self.presenter.close()
