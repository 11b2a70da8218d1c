"""Keyboard shortcuts: the window's actions, a Conversation menu that shows their keys, and
Help > Keyboard shortcuts, a dialog that lists them.

Where Qt has a standard key for an action (New, Find, Refresh, Preferences, Quit, HelpContents),
that key is used, so it follows each platform's convention (Qt maps Ctrl to Cmd on macOS); a
second, common binding is added where the standard one is unusual for a chat (Ctrl+R besides F5
for Regenerate).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from html import escape

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QMainWindow, QMenu, QVBoxLayout, QWidget

StandardKey = QKeySequence.StandardKey


def _keys(standard: StandardKey | None, *extra: str) -> list[QKeySequence]:
    """The platform's keys for a standard action, then `extra` ones not already among them."""
    keys = list(QKeySequence.keyBindings(standard)) if standard is not None else []
    for text in extra:
        sequence = QKeySequence(text)
        if sequence not in keys:
            keys.append(sequence)
    return keys


@dataclass(frozen=True)
class Shortcut:
    name: str  # object name of its QAction
    text: str
    keys: list[QKeySequence]
    description: str


def _shortcuts() -> list[Shortcut]:
    return [
        Shortcut(
            "newConversationAction", "&New conversation", _keys(StandardKey.New), "Start a new conversation"
        ),
        Shortcut(
            "searchConversationsAction",
            "&Search conversations",
            _keys(StandardKey.Find),
            "Search the conversations: titles and what was written",
        ),
        Shortcut(
            "focusInputAction", "&Message box", _keys(None, "Ctrl+L"), "Put the cursor in the message box"
        ),
        Shortcut(
            "stopAction",
            "S&top",
            _keys(None, "Ctrl+."),
            "Stop the reply being written (Esc in the message box does it too)",
        ),
        Shortcut(
            "regenerateAction",
            "&Regenerate",
            _keys(StandardKey.Refresh, "Ctrl+R"),
            "Write the last reply again",
        ),
        Shortcut(
            "switchSpeculationAction",
            "Switch the s&peed-up",
            _keys(None, "Ctrl+D"),
            "Next speed-up: off, from the text, the draft model (if one was chosen)",
        ),
        Shortcut("showChatAction", "C&hat", _keys(None, "Ctrl+1"), "Show the chat"),
        Shortcut(
            "showCompareAction",
            "&Compare",
            _keys(None, "Ctrl+2"),
            "Open Compare: the usual way against the speed-up",
        ),
        Shortcut("showModelsAction", "&Models", _keys(None, "Ctrl+3"), "Show the models page"),
        Shortcut(
            "settingsAction", "Se&ttings…", _keys(StandardKey.Preferences, "Ctrl+,"), "Open the settings"
        ),
        Shortcut(
            "shortcutsAction",
            "&Keyboard shortcuts",
            _keys(StandardKey.HelpContents, "Ctrl+/"),
            "List the keyboard shortcuts",
        ),
        Shortcut("quitAction", "&Quit", _keys(StandardKey.Quit, "Ctrl+Q"), "Close Tandem"),
    ]


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


def install(
    window: QMainWindow, handlers: Mapping[str, Callable[[], None]], help_menu_title: str = "&Help"
) -> dict[str, QAction]:
    """Create the window's shortcut actions, a Conversation and a View menu with them, and
    Help > Keyboard shortcuts. `handlers`: what each action does, by its object name (every
    name _shortcuts() lists). Returns the actions by object name."""
    actions: dict[str, QAction] = {}
    for shortcut in _shortcuts():
        action = QAction(shortcut.text, window)
        action.setObjectName(shortcut.name)
        action.setShortcuts(shortcut.keys)
        action.setToolTip(shortcut.description)
        action.triggered.connect(handlers[shortcut.name])
        window.addAction(action)  # active wherever the focus is in the window
        actions[shortcut.name] = action
    bar = window.menuBar()
    help_menu = next(
        (menu for a in bar.actions() if a.text() == help_menu_title and isinstance(menu := a.menu(), QMenu)),
        None,
    )
    before = help_menu.menuAction() if help_menu is not None else None
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
    if help_menu is not None and before is not None:
        bar.insertMenu(before, conversation)
        bar.insertMenu(before, view)
        help_menu.addAction(actions["shortcutsAction"])
    else:
        bar.addMenu("&Help").addAction(actions["shortcutsAction"])
    return actions
