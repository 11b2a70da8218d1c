"""Keyboard shortcuts: the window's actions, a Conversation menu that shows their keys, and
Help > Keyboard shortcuts, a dialog that lists them.

Where Qt has a standard key for an action (New, Find, Refresh, Preferences, Quit, HelpContents),
that key is used, so it follows each platform's convention (Qt maps Ctrl to Cmd on macOS); a
second, common binding is added where the standard one is unusual for a chat (Ctrl+R besides F5
for Regenerate).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QMainWindow, QMenu, QVBoxLayout, QWidget

StandardKey = QKeySequence.StandardKey


def _keys(standard: StandardKey | None, extra: str) -> list[QKeySequence]:
    """The platform's keys for a standard action, then `extra` where not already among them."""
    keys = list(QKeySequence.keyBindings(standard)) if standard is not None else []
    if extra and QKeySequence(extra) not in keys:
        keys.append(QKeySequence(extra))
    return keys


# Each action: its object name, its text, the platform's standard key (or None), a key added to
# it ("" none), and what it does.
SHORTCUTS = (
    ("newConversationAction", "&New conversation", StandardKey.New, "", "Start a new conversation"),
    (
        "searchConversationsAction",
        "&Search conversations",
        StandardKey.Find,
        "",
        "Search the conversations: titles and what was written",
    ),
    ("focusInputAction", "&Message box", None, "Ctrl+L", "Put the cursor in the message box"),
    (
        "stopAction",
        "S&top",
        None,
        "Ctrl+.",
        "Stop the reply being written (Esc in the message box does it too)",
    ),
    ("regenerateAction", "&Regenerate", StandardKey.Refresh, "Ctrl+R", "Write the last reply again"),
    (
        "switchSpeculationAction",
        "Switch the s&peed-up",
        None,
        "Ctrl+D",
        "Next speed-up: off, from the text, the draft model (if one was chosen)",
    ),
    ("showChatAction", "C&hat", None, "Ctrl+1", "Show the chat"),
    ("showCompareAction", "&Compare", None, "Ctrl+2", "Open Compare: the usual way against the speed-up"),
    ("showModelsAction", "&Models", None, "Ctrl+3", "Show the models page"),
    ("settingsAction", "Se&ttings…", StandardKey.Preferences, "Ctrl+,", "Open the settings"),
    (
        "shortcutsAction",
        "&Keyboard shortcuts",
        StandardKey.HelpContents,
        "Ctrl+/",
        "List the keyboard shortcuts",
    ),
    ("quitAction", "&Quit", StandardKey.Quit, "Ctrl+Q", "Close Tandem"),
)


# Qt's special keyboard keys (Key_Back = 0x01000061 on: New, Refresh, Help, Exit...) are bound
# too where a platform has them, but few keyboards do: the sheet names the keys people press.
_FIRST_SPECIAL_KEY = 0x01000061


def key_text(keys: list[QKeySequence]) -> str:
    """The keys as the sheet and menus name them: "Ctrl+N", "F5, Ctrl+R" (not "Ctrl+N, New")."""
    shown = [k for k in keys if k.count() and k[0].key().value < _FIRST_SPECIAL_KEY]  # type: ignore[index]  # PySide6 stubs lack QKeySequence.__getitem__
    return ", ".join(k.toString(QKeySequence.SequenceFormat.NativeText) for k in shown or keys)


class ShortcutsDialog(QDialog):
    def __init__(self, actions: list[QAction], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts — Tandem")
        self.setAccessibleName("Keyboard shortcuts")
        layout = QVBoxLayout(self)
        rows = "".join(
            f"<tr><td><b>{escape(key_text(a.shortcuts()))}</b></td><td>&nbsp;&nbsp;</td>"
            f"<td>{escape(a.toolTip() or a.text().replace('&', ''))}</td></tr>"
            for a in actions
        )
        extra = (
            "<tr><td><b>Enter</b></td><td></td><td>Send the message</td></tr>"
            "<tr><td><b>Shift+Enter</b></td><td></td><td>A new line in the message</td></tr>"
            "<tr><td><b>Esc</b></td><td></td><td>Stop the reply, or cancel editing a message</td></tr>"
        )
        self.table = QLabel(f"<table cellpadding='3'>{rows}{extra}</table>")
        self.table.setObjectName("shortcutsTable")
        self.table.setAccessibleName("Keyboard shortcuts")
        self.table.setTextFormat(self.table.textFormat().RichText)
        layout.addWidget(self.table)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.Close).setAccessibleName("Close")
        layout.addWidget(buttons)


def install(window: QMainWindow, handlers: Mapping[str, Callable[[], None]]) -> dict[str, QAction]:
    """Create the window's shortcut actions, a Conversation and a View menu with them, and
    Help > Keyboard shortcuts. `handlers`: what each action does, by its object name (every
    name SHORTCUTS lists). Returns the actions by object name."""
    actions: dict[str, QAction] = {}
    for name, text, standard, extra, description in SHORTCUTS:
        action = QAction(text, window, toolTip=description)
        action.setObjectName(name)
        action.setShortcuts(_keys(standard, extra))
        action.triggered.connect(handlers[name])
        window.addAction(action)  # active wherever the focus is in the window
        actions[name] = action
    bar = window.menuBar()
    help_menu = next(
        menu for a in bar.actions() if a.text() == "&Help" and isinstance(menu := a.menu(), QMenu)
    )
    conversation = bar.addMenu("&Conversation")
    for name in ("newConversationAction", "searchConversationsAction", "focusInputAction"):
        conversation.addAction(actions[name])
    conversation.addSeparator()
    for name in ("stopAction", "regenerateAction", "switchSpeculationAction"):
        conversation.addAction(actions[name])
    conversation.addSeparator()
    conversation.addAction(actions["settingsAction"])
    conversation.addAction(actions["quitAction"])
    view = bar.addMenu("&View")
    for name in ("showChatAction", "showCompareAction", "showModelsAction"):
        view.addAction(actions[name])
    bar.insertMenu(help_menu.menuAction(), conversation)
    bar.insertMenu(help_menu.menuAction(), view)
    help_menu.addAction(actions["shortcutsAction"])
    return actions
