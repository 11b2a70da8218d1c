"""The list of conversations: New chat at the top, search over titles and what was written,
rename and delete from the context menu (or F2 and Delete)."""

from __future__ import annotations

import html
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from enum import StrEnum
from functools import partial

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QPoint, QRectF, Qt, Signal
from PySide6.QtGui import QKeyEvent, QPainter, QTextDocument
from PySide6.QtWidgets import (
    QApplication,
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.store import Conversation
from ui.qt.widgets import button, named

TITLE_ROLE = Qt.ItemDataRole.UserRole + 1  # an item's title (its text may carry a search's snippet below)
SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 2  # (its line, the snippet, the search) where a search found it


def snippet_html(line: str, snippet: str, search: str) -> str:
    """A found conversation's two lines as drawn: its line, then the snippet with the words
    searched for in bold (each word of the search, wherever it starts a word)."""
    text = html.escape(snippet)
    for word in sorted(set(search.split()), key=len, reverse=True):
        text = re.sub(rf"(?i)\b({re.escape(html.escape(word))})", r"<b>\1</b>", text)
    return f"{html.escape(line)}<br>{text}"


class SnippetDelegate(QStyledItemDelegate):
    """A found conversation: its line and its snippet, the match in bold (a plain item cannot)."""

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        found = index.data(SNIPPET_ROLE)
        if not found:
            super().paint(painter, option, index)
            return
        line, snippet, search = found
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        rect = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
        metrics = opt.fontMetrics
        line = metrics.elidedText(line, Qt.TextElideMode.ElideRight, rect.width())
        snippet = metrics.elidedText(snippet, Qt.TextElideMode.ElideRight, rect.width())
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        colour = (opt.palette.highlightedText() if selected else opt.palette.text()).color().name()
        document = QTextDocument()
        document.setDefaultFont(opt.font)
        document.setDocumentMargin(0)
        document.setHtml(f"<span style='color:{colour}'>{snippet_html(line, snippet, search)}</span>")
        painter.save()
        painter.translate(rect.topLeft())
        document.drawContents(painter, QRectF(0, 0, rect.width(), rect.height()))
        painter.restore()


class ExportFormat(StrEnum):
    """How a conversation is exported: Markdown to read, JSON to import again."""

    MARKDOWN = "markdown"
    JSON = "json"

    @property
    def suffix(self) -> str:
        return ".md" if self is ExportFormat.MARKDOWN else ".json"

    @property
    def file_filter(self) -> str:
        return "Markdown (*.md)" if self is ExportFormat.MARKDOWN else "JSON (*.json)"


class ConversationList(QWidget):
    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int, str)
    delete_requested = Signal(int)
    search_changed = Signal(str)
    export_requested = Signal(int, object)  # conversation id, ExportFormat

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 0, 6)
        tip = "Start a new conversation (Ctrl+N)"
        self.new_button = button("New chat", "newChatButton", self.new_requested, tip)
        layout.addWidget(self.new_button)
        self.search = QLineEdit(placeholderText="Search conversations", clearButtonEnabled=True)
        self.search.setAccessibleName("Search conversations")
        self.search.textChanged.connect(self.search_changed)
        layout.addWidget(self.search)
        self.list = named(QListWidget(), "", "Conversations")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self.on_list_context_menu_requested)
        self.list.currentItemChanged.connect(self.on_list_current_item_changed)
        self.list.itemDoubleClicked.connect(lambda item: self.ask_rename(self._id(item)))
        self.list.installEventFilter(self)
        self.list.setItemDelegate(SnippetDelegate(self.list))
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
                if snippet:  # drawn with the match in bold (SnippetDelegate)
                    item.setData(SNIPPET_ROLE, (shown, snippet, self.search.text()))
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
        if watched is self.list and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent):
            key = event.key()
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
        for how, name in ((ExportFormat.MARKDOWN, "Markdown"), (ExportFormat.JSON, "JSON")):
            menu.addAction(f"Export as {name}…", partial(self.export_requested.emit, conversation_id, how))
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
