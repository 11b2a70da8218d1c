"""A page that scrolls up and down within its tab: its content's least height is not the window's."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QVBoxLayout, QWidget

from ui.qt.widgets import flush


class FittingScroll(QScrollArea):
    """A scroll area as tall as its content at its width where the window has room; squeezed in
    a short window it scrolls, its content whole (the welcome's text was cut mid-line at 425 px)."""

    def hasHeightForWidth(self) -> bool:  # noqa: N802 (Qt's names)
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        content = self.widget()
        return content.heightForWidth(width) if content is not None else -1

    def sizeHint(self) -> QSize:  # noqa: N802 (its content's, as a panel laid out directly had)
        content = self.widget()
        return content.sizeHint() if content is not None else super().sizeHint()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # its content's height changed (a line hidden): its own follows
        return super().eventFilter(watched, event)


def vertical_scroll(name: str = "", fitting: bool = False) -> QScrollArea:
    """A frameless scroll area that scrolls vertically only: its content follows its width
    (`fitting`: a FittingScroll)."""
    scroll = (FittingScroll if fitting else QScrollArea)(widgetResizable=True)
    scroll.setObjectName(name)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return scroll


def scrolling_content(page: QWidget, scroll_name: str, content_name: str = "") -> tuple[QScrollArea, QWidget]:
    """Fill `page` with a frameless scroll area that scrolls vertically only (the content follows
    the page's width) and return it with the widget to lay the page's content out in. A page laid
    out directly lends the window its least size: Compare's 590 px made the window 722 px tall."""
    outer = flush(QVBoxLayout(page))
    scroll = vertical_scroll(scroll_name)
    outer.addWidget(scroll)
    content = QWidget()
    if content_name:
        content.setObjectName(content_name)
    scroll.setWidget(content)
    return scroll, content
