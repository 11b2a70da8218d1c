"""Attachments in the composer: chips for the documents a message will carry (the diff of a reply
against the document it edits is ui/chat/changes.py's).

A chip shows a document's name, size and how many tokens it is, a menu of quick actions (each
puts an editable request in the message box) and a remove button. The tokens are first an
estimate ("about N tokens"); the loaded model's own count replaces it when the engine answers
(AttachmentTray.count_tokens), and stays an estimate where there is no engine to ask. A file that cannot be
attached gets a chip too, with the reason in plain words beside its name: the message is not sent
while one is there, and nothing typed is touched. Reading is app.library.documents's (no engine,
no Qt there); the words are here, from the problem's kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.document import Document
from app.library.documents import (
    DocumentError,
    DocumentProblem,
    document_block,
    document_from_text,
    format_size,
    read_document,
)
from ui.presenters.words import quick_actions_for
from ui.qt import theme
from ui.qt.widgets import button, flush, label, named, tool_button

# A paste this long is offered as an attachment (it can still stay in the message).
LONG_PASTE_CHARS = 2000
# Until the engine's count comes (or where there is no engine), the chip says about how many
# tokens, at the usual 4 characters a token of English text (code and other languages differ).
CHARS_PER_TOKEN = 4

PROBLEM_WORDS = {
    DocumentProblem.MISSING: "The file is not there any more.",
    DocumentProblem.NOT_A_FILE: "This is a folder or a device, not a file.",
    DocumentProblem.UNREADABLE: "The file cannot be read (no permission, or a disk error).",
    DocumentProblem.TOO_LARGE: "The file is too large to attach.",
    DocumentProblem.BINARY: "This is not a text file. Tandem reads text, Markdown, code, PDF and Word files.",
    DocumentProblem.EMPTY: "There is no text in this file.",
    DocumentProblem.SCANNED_PDF: "This PDF has no text in it, only pictures (a scan?). Run text recognition first.",
    DocumentProblem.ENCRYPTED_PDF: "This PDF is locked with a password. Save an unlocked copy first.",
    DocumentProblem.DAMAGED: "The file is damaged and cannot be read.",
    DocumentProblem.TOO_MANY_TOKENS: "The file is larger than the model's whole context.",
}


def about_tokens(document: Document) -> int:
    return max(1, round(len(document.text) / CHARS_PER_TOKEN))


def shown_name(name: str, limit: int = 48) -> str:
    """A file's name as its chip shows it: whole up to `limit` characters, else its start and its
    end (the extension says what it is) around an ellipsis. A chip wrote a long name whole, and a
    125-character one widened the window past its size (the whole name is on hover)."""
    if len(name) <= limit:
        return name
    tail = limit // 3
    return f"{name[: limit - tail - 1]}…{name[-tail:]}"


@dataclass(frozen=True)
class Attachment:
    """A chip's content: a document read, or the name of a file that could not be attached and why."""

    name: str
    document: Document | None = None
    problem: DocumentProblem | None = None


class AttachmentChip(QFrame):
    remove_requested = Signal(object)  # the chip
    action_requested = Signal(str)  # a request for the message box

    def __init__(self, attachment: Attachment, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attachment = attachment
        self.setObjectName("attachmentChip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 2, 2, 2)
        layout.setSpacing(4)
        document = attachment.document
        self.n_tokens: int | None = None  # the model's own count, once the engine has answered
        self.label = named(QLabel(), "", f"Attachment {attachment.name}")
        self._show_tokens()
        layout.addWidget(self.label)
        problem = PROBLEM_WORDS.get(attachment.problem, "") if attachment.problem else ""
        self.error = label(problem, "attachmentError", hidden=attachment.problem is None)
        theme.set_tone(self.error, "error")
        layout.addWidget(self.error, 1)
        if document is not None:
            self.actions_button = tool_button("Ask…", accessible=f"Quick actions on {attachment.name}")
            self.actions_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
            menu = QMenu(self.actions_button)
            menu.setToolTipsVisible(True)  # a greyed action says why (set_task_refusal)
            for quick in quick_actions_for(document):
                action = menu.addAction(quick.title)
                action.triggered.connect(
                    lambda _=False, p=quick.prompt: self.action_requested.emit(p.format(name=document.name))
                )
            self.actions_button.setMenu(menu)
            layout.addWidget(self.actions_button)
        remove = f"Remove {attachment.name}"
        self.remove_button = tool_button(
            "✕", "", lambda: self.remove_requested.emit(self), remove, accessible=remove
        )
        self.remove_button.setAutoRaise(True)
        layout.addWidget(self.remove_button)

    def set_task_refusal(self, refusal: Callable[[str], str]) -> None:
        """Grey the quick actions the model in use is not offered, the reason (refusal(title),
        "" where offered) as their tooltip: the same rule as the chat's buttons."""
        if self.attachment.document is None:
            return
        for action in self.actions_button.menu().actions():
            why = refusal(action.text())
            action.setEnabled(not why)
            action.setToolTip(why or action.text())

    def set_token_count(self, n_tokens: int | None) -> None:
        """The loaded model's count of the document as it is sent; None: back to the estimate."""
        self.n_tokens = n_tokens
        self._show_tokens()

    def _show_tokens(self) -> None:
        document = self.attachment.document
        if document is None:
            self.label.setText(shown_name(self.attachment.name))
            self.label.setToolTip(self.attachment.name)
            return
        if self.n_tokens is None:
            tokens = f"about {about_tokens(document):,} tokens"
            tip = "An estimate: the model counts it exactly once it is loaded."
        else:
            tokens = f"{self.n_tokens:,} tokens"
            tip = "Counted by the model in use, as the document is sent."
        self.label.setText(f"{shown_name(document.name)} · {format_size(document.n_bytes)} · {tokens}")
        self.label.setToolTip(f"{document.name}\n{tip}")


class AttachmentTray(QWidget):
    """The chips of the message being written, and the offer to attach a long paste."""

    changed = Signal()
    action_requested = Signal(str)  # relays each chip's: chips come and go, the view connects once
    paste_attach_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._chips: list[AttachmentChip] = []
        self._n_pasted = 0
        # Asks the engine for texts' token counts; returns the id its answer will carry, or None
        # where there is nothing to ask (the window sets it: EngineController.count_tokens).
        self.count_tokens: Callable[[tuple[str, ...]], int | None] | None = None
        self._counting: dict[int, AttachmentChip] = {}  # request id -> the chip it counts
        self._task_refusal: Callable[[str], str] = lambda _title: ""  # set_task_refusal
        outer = flush(QVBoxLayout(self))
        outer.setSpacing(2)
        self.chips_layout = QVBoxLayout()
        self.chips_layout.setSpacing(2)
        outer.addLayout(self.chips_layout)
        self.paste_offer = QFrame()
        offer = flush(QHBoxLayout(self.paste_offer))
        self.paste_label = QLabel()
        offer.addWidget(self.paste_label, 1)
        self.paste_attach_button = button("Attach it as a document", clicked=self.paste_attach_requested)
        offer.addWidget(self.paste_attach_button)
        self.paste_keep_button = button("Keep it in the message", clicked=self.hide_paste_offer)
        offer.addWidget(self.paste_keep_button)
        self.paste_offer.setVisible(False)
        outer.addWidget(self.paste_offer)
        self.setVisible(False)

    # ---- what the message carries

    def chips(self) -> list[AttachmentChip]:
        return list(self._chips)

    def documents(self) -> tuple[Document, ...]:
        return tuple(c.attachment.document for c in self._chips if c.attachment.document is not None)

    @property
    def has_problems(self) -> bool:
        return any(c.attachment.problem is not None for c in self._chips)

    def add_paths(self, paths: Iterable[str | Path]) -> None:
        for path in paths:
            try:
                self._add(Attachment(Path(path).name, read_document(path)))
            except DocumentError as e:
                self._add(Attachment(Path(path).name, problem=e.problem))

    def add_documents(self, documents: Iterable[Document]) -> None:
        for document in documents:
            self._add(Attachment(document.name, document))

    def add_text(self, text: str) -> None:
        self._n_pasted += 1
        name = "pasted text" if self._n_pasted == 1 else f"pasted text {self._n_pasted}"
        try:
            self._add(Attachment(name, document_from_text(text, name)))
        except DocumentError as e:
            self._add(Attachment(name, problem=e.problem))

    def clear(self) -> None:
        for chip in self._chips:
            self.chips_layout.removeWidget(chip)
            chip.deleteLater()
        self._chips.clear()
        self._counting.clear()
        self.hide_paste_offer()
        self._update()

    def remove(self, chip: AttachmentChip) -> None:
        if chip in self._chips:
            self._chips.remove(chip)
            self._counting = {i: c for i, c in self._counting.items() if c is not chip}
            self.chips_layout.removeWidget(chip)
            chip.deleteLater()
            self._update()

    def set_task_refusal(self, refusal: Callable[[str], str]) -> None:
        """Why the model in use is not offered a quick action (its title; "" where it is): each
        chip's Ask… menu greys those, now and when attached."""
        self._task_refusal = refusal
        for chip in self._chips:
            chip.set_task_refusal(refusal)

    def _add(self, attachment: Attachment) -> None:
        if attachment in (c.attachment for c in self._chips):
            return  # the same file again (dropped twice, attached again): it goes once
        chip = AttachmentChip(attachment)
        chip.set_task_refusal(self._task_refusal)
        chip.remove_requested.connect(self.remove)
        chip.action_requested.connect(self.action_requested)
        self._chips.append(chip)
        # A chip as wide as what it says; one with a problem the row's width, its sentence on one line.
        align = Qt.AlignmentFlag.AlignLeft if attachment.problem is None else Qt.AlignmentFlag(0)
        self.chips_layout.addWidget(chip, 0, align)
        self._ask_count(chip)
        self._update()

    # ---- token counts, by the engine

    def _ask_count(self, chip: AttachmentChip) -> None:
        """Ask for the document's tokens as the model reads it: its block as with_documents
        writes it (the name, the fence, the text), counted without BOS."""
        document = chip.attachment.document
        if document is None or self.count_tokens is None:
            return
        request_id = self.count_tokens((document_block(document),))
        if request_id is not None:
            self._counting[request_id] = chip

    def recount(self) -> None:
        """A model was loaded: every chip shows its estimate again until that model's count."""
        self._counting.clear()
        for chip in self._chips:
            chip.set_token_count(None)
            self._ask_count(chip)

    def on_controller_tokens_counted(self, request_id: int, counts: tuple[int, ...]) -> None:
        chip = self._counting.pop(request_id, None)
        if chip is not None and len(counts) == 1:
            chip.set_token_count(counts[0])

    def _update(self) -> None:
        self.setVisible(bool(self._chips) or self.paste_offer.isVisible())
        self.changed.emit()

    # ---- a long paste

    def offer_paste(self, n_chars: int) -> None:
        self.paste_label.setText(f"You pasted {n_chars:,} characters.")
        self.paste_offer.setVisible(True)
        self.setVisible(True)

    def hide_paste_offer(self) -> None:
        self.paste_offer.setVisible(False)
        self.setVisible(bool(self._chips))


_last_folder: list[str] = []  # where the last files were attached from (this session)


def pick_files(parent: QWidget | None) -> list[str]:
    """Attach…'s dialog, in the folder the last files came from, else the home folder (not the
    folder Tandem was started from)."""
    paths, _ = QFileDialog.getOpenFileNames(
        parent,
        "Attach documents",
        _last_folder[0] if _last_folder else str(Path.home()),
        "Documents (*.txt *.md *.markdown *.rst *.pdf *.docx *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java "
        "*.json *.yaml *.yml *.toml *.html *.css *.sh *.sql *.csv);;All files (*)",
    )
    if paths:
        _last_folder[:] = [str(Path(paths[0]).parent)]
    return list(paths)
