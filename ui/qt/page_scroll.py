"""A page that scrolls up and down within its tab: its content's least height is not the window's."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget


def vertical_scroll(name: str = "") -> QScrollArea:
    """A frameless scroll area that scrolls vertically only: its content follows its width."""
    scroll = QScrollArea(widgetResizable=True)
    scroll.setObjectName(name)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return scroll


def scrolling_content(page: QWidget, scroll_name: str, content_name: str = "") -> tuple[QScrollArea, QWidget]:
    """Fill `page` with a frameless scroll area that scrolls vertically only (the content follows
    the page's width) and return it with the widget to lay the page's content out in. A page laid
    out directly lends the window its least size: Compare's 590 px made the window 722 px tall."""
    outer = QVBoxLayout(page)
    outer.setContentsMargins(0, 0, 0, 0)
    scroll = vertical_scroll(scroll_name)
    outer.addWidget(scroll)
    content = QWidget()
    if content_name:
        content.setObjectName(content_name)
    scroll.setWidget(content)
    return scroll, content
