"""The window's usual labels and buttons, made in one call instead of a setter a line."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from PySide6.QtCore import Qt, SignalInstance
from PySide6.QtWidgets import QAbstractButton, QLabel, QPushButton, QToolButton, QWidget

B = TypeVar("B", bound=QAbstractButton)


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


def _button(
    made: B,
    text: str,
    name: str,
    clicked: Callable[[], object] | SignalInstance | None,
    tip: str,
    accessible: str,
    hidden: bool,
) -> B:
    made.setText(text)
    made.setObjectName(name)
    made.setToolTip(tip)
    if accessible:
        made.setAccessibleName(accessible)
    if clicked is not None:
        made.clicked.connect(clicked)
    if hidden:
        made.setVisible(False)
    return made


def button(
    text: str = "",
    name: str = "",
    clicked: Callable[[], object] | SignalInstance | None = None,
    tip: str = "",
    *,
    accessible: str = "",
    hidden: bool = False,
) -> QPushButton:
    """A push button that calls `clicked`."""
    return _button(QPushButton(), text, name, clicked, tip, accessible, hidden)


def tool_button(
    text: str = "",
    name: str = "",
    clicked: Callable[[], object] | SignalInstance | None = None,
    tip: str = "",
    *,
    accessible: str = "",
    hidden: bool = False,
) -> QToolButton:
    """A tool button (a flat action beside text) that calls `clicked`."""
    return _button(QToolButton(), text, name, clicked, tip, accessible, hidden)


W = TypeVar("W", bound=QWidget)


def named(widget: W, name: str, accessible: str = "", tip: str = "") -> W:
    """`widget` with its object name, accessible name and tooltip (each where given)."""
    widget.setObjectName(name)
    if accessible:
        widget.setAccessibleName(accessible)
    if tip:
        widget.setToolTip(tip)
    return widget
