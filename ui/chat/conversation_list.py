"""The list of conversations: New chat at the top, search over titles and what was written,
rename and delete from the context menu (or F2 and Delete)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtWidgets import (
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.store import Conversation

TITLE_ROLE = Qt.ItemDataRole.UserRole + 1  # an item's title (its text may carry a search's snippet below)


class ConversationList(QWidget):
    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)
    export_requested = Signal(int, str)  # conversation id, "markdown" | "json"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 0, 6)
        self.new_button = QPushButton("New chat")
        self.new_button.setObjectName("newChatButton")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        layout.addWidget(self.new_button)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Search conversations")
        self.search.textChanged.connect(self.search_changed)
        layout.addWidget(self.search)
        self.list = QListWidget()
        self.list.setAccessibleName("Conversations")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self.on_list_context_menu_requested)
        self.list.currentItemChanged.connect(self.on_list_current_item_changed)
        self.list.itemDoubleClicked.connect(lambda item: self.ask_rename(self._id(item)))
        self.list.installEventFilter(self)
        layout.addWidget(self.list, 1)
        self._is_updating = False

    @staticmethod
    def _id(item: QListWidgetItem | None) -> int | None:
        return int(item.data(Qt.ItemDataRole.UserRole)) if item is not None else None

    def current_id(self) -> int | None:
        return self._id(self.list.currentItem())

    def set_conversations(
        self, conversations: Sequence[Conversation], current_id: int | None, snippets: Mapping[int, str] = {}
    ) -> None:
        """Refill the list without announcing a selection change; snippets: a search's match in
        each conversation, shown under its title."""
        self._is_updating = True
        try:
            self.list.clear()
            for conversation, shown in zip(conversations, told_apart(conversations), strict=True):
                snippet = snippets.get(conversation.id, "")
                item = QListWidgetItem(f"{shown}\n{snippet}" if snippet else shown)
                item.setData(Qt.ItemDataRole.UserRole, conversation.id)
                item.setData(TITLE_ROLE, conversation.title)
                item.setToolTip(f"{conversation.title}\n{snippet}" if snippet else conversation.title)
                self.list.addItem(item)
                if conversation.id == current_id:
                    self.list.setCurrentItem(item)
        finally:
            self._is_updating = False

    def titles(self) -> list[str]:
        return [self.list.item(i).data(TITLE_ROLE) for i in range(self.list.count())]

    def ask_rename(self, conversation_id: int | None) -> None:
        item = self._item(conversation_id)
        if item is None or conversation_id is None:
            return
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=item.data(TITLE_ROLE))
        if ok and title.strip():
            self.rename_requested.emit(conversation_id, title.strip())

    def ask_delete(self, conversation_id: int | None) -> None:
        item = self._item(conversation_id)
        if item is None or conversation_id is None:
            return
        answer = QMessageBox.question(
            self, "Delete conversation", f"Delete “{item.data(TITLE_ROLE)}” and all its messages?"
        )
        if answer == QMessageBox.StandardButton.Yes:
            self.delete_requested.emit(conversation_id)

    def _item(self, conversation_id: int | None) -> QListWidgetItem | None:
        for i in range(self.list.count()):
            item = self.list.item(i)
            if self._id(item) == conversation_id:
                return item
        return None

    def on_list_current_item_changed(self, current: QListWidgetItem | None, _previous: object) -> None:
        if not self._is_updating and current is not None:
            self.conversation_selected.emit(self._id(current))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        """F2 renames and Delete deletes the selected conversation (the context menu's, by keyboard)."""
        if watched is self.list and event.type() == QEvent.Type.KeyPress:
            key = event.key()  # type: ignore[attr-defined]
            if key == Qt.Key.Key_F2:
                self.ask_rename(self.current_id())
                return True
            if key == Qt.Key.Key_Delete:
                self.ask_delete(self.current_id())
                return True
        return super().eventFilter(watched, event)

    def on_list_context_menu_requested(self, point: QPoint) -> None:
        item = self.list.itemAt(point)
        if item is None:
            return
        conversation_id = self._id(item)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.ask_rename(conversation_id))
        menu.addAction("Export as Markdown…", lambda: self.export_requested.emit(conversation_id, "markdown"))
        menu.addAction("Export as JSON…", lambda: self.export_requested.emit(conversation_id, "json"))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.ask_delete(conversation_id))
        menu.exec(self.list.mapToGlobal(point))


def told_apart(conversations: Sequence[Conversation]) -> list[str]:
    """Each conversation's line: its title; two of one title told apart by when each was last
    written to ("Notes · 06 Dec, 23:10"), then by a number where that is the same too."""
    titles = Counter(c.title for c in conversations)
    shown = [
        c.title
        if titles[c.title] == 1
        else f"{c.title} · {time.strftime('%d %b, %H:%M', time.localtime(c.updated_at))}"
        for c in conversations
    ]
    counts, seen = Counter(shown), Counter[str]()
    told = []
    for line in shown:
        seen[line] += 1
        told.append(f"{line} ({seen[line]})" if counts[line] > 1 else line)
    return told
