"""An empty conversation: what to ask, and where the speed-up shows.

Shown while the conversation has no message (ui/chat/chat_view.py holds it above the messages):
a line on what Tandem is good at and the demo tasks as suggestions; with a document attached, its
quick actions in their place; the tasks the model in use does not do greyed, said once, with the
one-click download of a model that does them. A suggestion's request goes to the message box
(ChatView), never sent by itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.document import Document
from ui.presenters.task_ability import ModelAbility
from ui.presenters.words import DEMO_TASKS, EMPTY_CHAT, quick_actions_for
from ui.qt.widgets import button, flush, label, named


class EmptyChat(QWidget):
    task_chosen = Signal(str)  # a demo task's request, for the message box
    action_chosen = Signal(str)  # a document's quick action's request, for the message box
    small_model_requested = Signal()  # the download of a model that does the tasks shown greyed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("emptyChat")
        box = QVBoxLayout(self)
        box.setContentsMargins(0, 24, 0, 0)
        self.empty_hint = label(EMPTY_CHAT)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        box.addWidget(self.empty_hint)
        # With a document attached, its quick actions in place of the demo tasks (offer_document).
        self.document_row = QWidget()
        self.document_row.setVisible(False)
        self._document_layout = flush(QHBoxLayout(self.document_row))
        self.document_buttons: list[QPushButton] = []
        box.addWidget(self.document_row)
        self.demo_row = QWidget()
        row = flush(QHBoxLayout(self.demo_row))
        row.addStretch(1)
        self.suggestion_buttons: list[QPushButton] = []
        tip = (
            "Puts this request in the message box and chooses the “Edit or copy text” preset; Enter sends it"
        )
        for name, task in DEMO_TASKS:
            self.suggestion_buttons.append(button(name, "", partial(self.task_chosen.emit, task), tip))
            row.addWidget(self.suggestion_buttons[-1])
        row.addStretch(1)
        box.addWidget(self.demo_row)
        # Tasks the model in use does not do: said, with the one-click download of one that does.
        self.larger_row = named(QWidget(), "needsLargerModel")
        larger = flush(QHBoxLayout(self.larger_row))
        larger.addStretch(1)
        self.larger_label = label()
        larger.addWidget(self.larger_label)
        self.larger_download = button("", "downloadSmallInstruct", self.small_model_requested)
        larger.addWidget(self.larger_download)
        larger.addStretch(1)
        self.larger_row.setVisible(False)
        box.addWidget(self.larger_row)
        self._ability: ModelAbility | None = None  # what the model's file says (set_model)
        self._model_name = ""
        self._download_text = ""
        self._unavailable = ""  # why no model can answer (set_model)
        self._download_offered_above = False  # the welcome panel offers the same download

    def set_model(
        self, model_key: str | None, model_name: str, download_text: str = "", unavailable: str = ""
    ) -> None:
        """The model in use (offered again: offer_document): the tasks it does are offered, the
        others greyed and said to need a larger model, with `download_text` on the button that
        downloads one ("" where there is nothing to offer). `unavailable`: why no model can
        answer (none loaded): every task greyed, that said below them."""
        from ui.presenters.task_ability import model_ability

        self._model_name, self._download_text, self._unavailable = model_name, download_text, unavailable
        self._ability = model_ability(model_key)  # what its file says (ui/presenters/task_ability.py)

    def refusal(self, task: str) -> str:
        """Why the model in use is not offered this task ("" where it is)."""
        from ui.presenters.task_ability import task_refusal

        return self._unavailable or task_refusal(self._ability, task)

    def _offer_tasks(self, buttons: Sequence[QPushButton]) -> None:
        """Grey the tasks the model is not offered, the reason as their tooltip; say it once below."""
        from ui.presenters.task_ability import refusals_line

        undone = []
        for task in buttons:
            why = self.refusal(task.text())
            if task.property("offerTip") is None:  # what it does, shown again once offered
                task.setProperty("offerTip", task.toolTip())
            task.setEnabled(not why)
            task.setToolTip(why or task.property("offerTip"))
            if why:
                undone.append(task.text())
        line = refusals_line(self._ability, self._model_name, undone) if undone else ""
        self.larger_label.setText(self._unavailable or line)
        self.larger_download.setText(self._download_text)
        self._show_download()
        self.larger_row.setVisible(bool(undone))

    def set_download_offered_above(self, offered: bool) -> None:
        """The welcome panel shows the same download as the greyed tasks' button (one offer on
        screen, one size said once): the line says why, the button is left to the welcome."""
        self._download_offered_above = offered
        self._show_download()

    def _show_download(self) -> None:
        self.larger_download.setVisible(bool(self._download_text) and not self._download_offered_above)

    def offer_document(self, document: Document | None) -> None:
        """An empty chat with a document attached suggests what to ask of it (its chip's quick
        actions, named in full), not the demo tasks; without one, the demo tasks again."""
        self.demo_row.setVisible(document is None)
        self.document_row.setVisible(document is not None)
        if document is None:
            self._offer_tasks(self.suggestion_buttons)
        self.empty_hint.setText(
            EMPTY_CHAT
            if document is None
            else f"Ask something about {document.name}, or start from one of these:"
        )
        row = self._document_layout
        for old in self.document_buttons:
            old.deleteLater()
        self.document_buttons = []
        while row.count():  # the last document's buttons and stretches
            row.takeAt(0)
        if document is None:
            return
        row.addStretch(1)
        for quick in quick_actions_for(document):
            request = quick.prompt.format(name=document.name)
            tip = f"Puts “{request}” in the message box; Enter sends it"
            self.document_buttons.append(
                button(quick.title, "", partial(self.action_chosen.emit, request), tip)
            )
            row.addWidget(self.document_buttons[-1])
        row.addStretch(1)
        self._offer_tasks(self.document_buttons)
