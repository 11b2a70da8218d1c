"""The window's usual labels and buttons, made in one call instead of a setter a line."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

from PySide6.QtCore import Qt, SignalInstance
from PySide6.QtWidgets import QAbstractButton, QLabel, QLayout, QPushButton, QToolButton, QWidget

B = TypeVar("B", bound=QAbstractButton)
W = TypeVar("W", bound=QWidget)
L = TypeVar("L", bound=QLayout)


def label(text: str = "", name: str = "", *, rich: bool = False, hidden: bool = False) -> QLabel:
    """A word-wrapped label; `name` is its object name (the style sheet's and the tests' handle)."""
    made = QLabel(text)
    made.setObjectName(name)
    made.setWordWrap(True)
    if rich:
        made.setTextFormat(Qt.TextFormat.RichText)
    if hidden:
        made.setVisible(False)
    return made


def made_button(
    kind: type[B],
    text: str = "",
    name: str = "",
    clicked: Callable[[], object] | SignalInstance | None = None,
    tip: str = "",
    *,
    accessible: str = "",
    hidden: bool = False,
) -> B:
    """A button of `kind` that calls `clicked` (`accessible`: its accessible name, where its text
    does not say it)."""
    made = named(kind(), name, accessible, tip)
    made.setText(text)
    if clicked is not None:
        made.clicked.connect(clicked)
    if hidden:
        made.setVisible(False)
    return made


button = partial(made_button, QPushButton)
tool_button = partial(made_button, QToolButton)  # a flat action beside text


def named(widget: W, name: str, accessible: str = "", tip: str = "") -> W:
    """`widget` with its object name, accessible name and tooltip (each where given)."""
    widget.setObjectName(name)
    if accessible:
        widget.setAccessibleName(accessible)
    if tip:
        widget.setToolTip(tip)
    return widget


def flush(layout: L) -> L:
    """`layout` without margins of its own (a row or a page laid inside another's margins)."""
    layout.setContentsMargins(0, 0, 0, 0)
    return layout
