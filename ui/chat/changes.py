"""Changes: a reply against the document it was asked to change, word by word (taken out struck
through, put in underlined), with Copy and Save as. The part of the reply that is the edited copy
is ui/chat/edit_finder.py's to find."""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Callable
from pathlib import Path

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.document import Document, DocumentKind
from ui.chat.edit_finder import edited_copy, reply_body
from ui.qt import theme
from ui.qt.widgets import button, named

# Words, runs of white space, and single marks: what the diff compares (a changed word shows as
# that word, not as its whole line; a paragraph is often one line).
_DIFF_TOKENS = re.compile(r"\s+|\w+|[^\w\s]")
# A sentence (up to its end mark and the spaces after it), or the rest of a line.
_DIFF_SENTENCES = re.compile(r"[^.!?\n]+(?:[.!?]+[ \t]*|\n|$)|[.!?]+[ \t]*|\n")
# A changed stretch is compared word by word up to this many pairs of words (about a second).
_DIFF_MAX_PAIRS = 4_000_000
# Unchanged text running over more lines than this shows its first and last few only.
_DIFF_KEEP_LINES = 3


def word_diff(original: str, edited: str) -> list[tuple[str, str]]:
    """The edited text against the original as (kind, text) pieces in reading order: "same",
    "removed" (in the original only) and "added" (in the edited text only).

    Lines first, then sentences within the lines that changed, then words within the sentences
    that changed (as `git diff --word-diff` narrows down): word by word over a whole document took
    15 s on 90 KB with five words changed, the window frozen; a 60,000-character paragraph 9 s.
    A changed stretch still too long to compare word by word (a rewrite) is one removal and one
    addition."""
    pieces = _narrowing_diff(
        original.splitlines(keepends=True), edited.splitlines(keepends=True), _sentences_diff
    )
    merged: list[tuple[str, str]] = []
    for kind, text in pieces:  # neighbours of a kind as one piece
        if merged and merged[-1][0] == kind:
            merged[-1] = (kind, merged[-1][1] + text)
        elif text:
            merged.append((kind, text))
    return merged


def _narrowing_diff(
    a: list[str], b: list[str], finer: Callable[[str, str], list[tuple[str, str]]]
) -> list[tuple[str, str]]:
    """Pieces of a diff of two sequences of text units, the units that changed compared by `finer`."""
    pieces: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            pieces.append(("same", "".join(a[i1:i2])))
        else:
            pieces.extend(finer("".join(a[i1:i2]), "".join(b[j1:j2])))
    return pieces


def _sentences_diff(original: str, edited: str) -> list[tuple[str, str]]:
    return _narrowing_diff(_DIFF_SENTENCES.findall(original), _DIFF_SENTENCES.findall(edited), _words_diff)


def _words_diff(original: str, edited: str) -> list[tuple[str, str]]:
    a, b = _DIFF_TOKENS.findall(original), _DIFF_TOKENS.findall(edited)
    if len(a) * len(b) > _DIFF_MAX_PAIRS:
        return _replaced(original, edited)
    return _narrowing_diff(a, b, _replaced)


def _replaced(original: str, edited: str) -> list[tuple[str, str]]:
    """The finest a diff goes: the original's words taken out, the edited text's put in (an
    empty piece is dropped as word_diff merges them)."""
    return [("removed", original), ("added", edited)]


def diff_summary(pieces: list[tuple[str, str]]) -> str:
    """One line: how many places changed, how many words were taken out and put in."""
    words = {"removed": 0, "added": 0}
    places, in_change = 0, False
    for kind, text in pieces:
        if kind == "same" or not text.strip():
            in_change = in_change and kind != "same"
            continue
        places += not in_change
        in_change = True
        words[kind] += len(re.findall(r"\w+", text))
    if places == 0:
        if any(kind != "same" for kind, _ in pieces):
            return "Only spaces or line breaks changed."
        return "The reply is the same as the document."
    out, put = words["removed"], words["added"]
    changes = f"{places} change{'s' if places != 1 else ''}"
    if out == put == 0:
        return f"{changes} to punctuation. Taken out: struck through; put in: underlined."
    return (
        f"{changes}: {out} word{'s' if out != 1 else ''} taken out, {put} put in. "
        "Taken out: struck through; put in: underlined."
    )


def _shorten_same(text: str, first: bool, last: bool) -> str:
    """Unchanged text as shown: a long run keeps only the lines next to the changes."""
    lines = text.split("\n")
    keep = _DIFF_KEEP_LINES
    if len(lines) <= 2 * keep + 2:
        return text
    head = [] if first else lines[: keep + 1]
    tail = [] if last else lines[-keep - 1 :]
    hidden = len(lines) - len(head) - len(tail)
    return "\n".join([*head, f"⋯ {hidden} unchanged lines ⋯", *tail])


def diff_html(original: str, edited: str, monospace: bool = False) -> str:
    """The edited text with its changes marked in place: words taken out struck through on red,
    words put in underlined on green (a cue besides colour), white space and line breaks kept,
    long unchanged stretches shortened. A summary line first."""
    removed_bg, added_bg = ("#6e2828", "#1e5a32") if theme.colors().is_dark else ("#ffcdcd", "#c8f0cd")
    pieces = word_diff(original, edited)
    out = []
    for i, (kind, text) in enumerate(pieces):
        if kind == "same":
            out.append(html.escape(_shorten_same(text, i == 0, i == len(pieces) - 1)))
        elif not text.strip():
            out.append(html.escape(text) if kind == "added" else "")  # white space: the new text's
        elif kind == "removed":
            out.append(
                f'<span style="background-color:{removed_bg}; text-decoration: line-through;">{html.escape(text)}</span>'
            )
        else:
            out.append(
                f'<span style="background-color:{added_bg}; text-decoration: underline;">{html.escape(text)}</span>'
            )
    font = "font-family: monospace; " if monospace else ""
    return (
        f"<p>{html.escape(diff_summary(pieces))}</p>"
        f'<div style="{font}white-space: pre-wrap;">{"".join(out)}</div>'
    )


class DiffDialog(QDialog):
    """The reply against the original document: the diff, Copy (the reply's text) and Save as."""

    def __init__(self, document: Document, reply: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        # The part of the reply most like the document (ui/chat/edit_finder.py), or none close.
        found = edited_copy(reply, document.text)
        self.edited = found if found is not None else reply_body(reply)
        self.setWindowTitle(f"Changes to {document.name}")
        self.resize(760, 560)
        layout = QVBoxLayout(self)
        self.view = named(QTextBrowser(), "", f"Changes the reply made to {document.name}")
        if found is None:
            self.view.setPlainText(f"No edited copy of {document.name} in this reply.")
        else:
            self.view.setHtml(diff_html(document.text, self.edited, document.kind is DocumentKind.CODE))
        layout.addWidget(self.view, 1)
        buttons = QHBoxLayout()
        self.copy_button = button("Copy the new text", clicked=self.copy)
        self.save_button = button("Save as…", clicked=self.save_as)
        for action in (self.copy_button, self.save_button):
            action.setEnabled(found is not None)
            buttons.addWidget(action)
        buttons.addStretch(1)
        buttons.addWidget(button("Close", clicked=self.accept))
        layout.addLayout(buttons)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.edited)

    def save_as(self, path: str | None = None) -> None:
        if not path:
            path, _ = QFileDialog.getSaveFileName(self, "Save the new text", self.document.name)
        if path:
            Path(path).write_text(
                self.edited if self.edited.endswith("\n") else self.edited + "\n", encoding="utf-8"
            )
