"""The app's icon and the About box.

The icon is resources/tandem.svg, drawn by Qt's SVG icon engine at whatever size and device
pixel ratio is asked for: sharp at scale 2 (or 1.5) rather than a 1x bitmap stretched. The
packaged PNG/ICO/ICNS icons are rendered from the same file (packaging/linux/render_icons.py).
"""

from __future__ import annotations

import html
import importlib.metadata

import PySide6
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QIcon, QShowEvent
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from app import paths
from ui.qt.widgets import label, named

ABOUT_ICON_SIZE = 96  # logical pixels


def app_icon() -> QIcon:
    """Tandem's icon, scalable (a null QIcon where Qt's SVG icon engine is missing)."""
    return QIcon(str(paths.resources_dir() / "tandem.svg"))


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class AboutDialog(QDialog):
    """Help ▸ About Tandem: the icon, the version, what Tandem is, and what it is built on."""

    def __init__(self, parent: QWidget | None = None, runs_on: str = "") -> None:
        """runs_on: what the model runs on, in words (ui.presenters.words.runs_on_words)."""
        super().__init__(parent)
        named(self, "aboutDialog", "About Tandem")
        self.setWindowTitle("About Tandem")
        icon = app_icon()
        self.setWindowIcon(icon)
        self.icon = icon
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        self.icon_label = named(QLabel(), "aboutIcon", "Tandem's icon")
        self.icon_label.setFixedSize(ABOUT_ICON_SIZE, ABOUT_ICON_SIZE)
        row.addWidget(self.icon_label, 0, Qt.AlignmentFlag.AlignTop)
        text = label(
            f"<h2>Tandem {_version('tandem')}</h2>"
            "<p>Chat with local language models, sped up by speculative decoding: a cheap drafter "
            "guesses ahead and the model checks its guesses in one pass, so the text is the "
            "model's own, only sooner.</p>"
            f"<p>Built on llama.cpp (llama-cpp-python {_version('llama_cpp_python')}) and "
            f"Qt (PySide6 {PySide6.__version__}).</p>"
            + (f"<p>{html.escape(runs_on)}</p>" if runs_on else ""),
            "aboutText",
            rich=True,
        )
        text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        text.setMinimumWidth(360)
        row.addWidget(text, 1)
        layout.addLayout(row)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.button(QDialogButtonBox.StandardButton.Close).setAccessibleName("Close")
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.show_icon()

    def show_icon(self) -> None:
        """The icon drawn for this screen's device pixel ratio (again when shown: the window
        may open on another screen than the one it was made for)."""
        size = QSize(ABOUT_ICON_SIZE, ABOUT_ICON_SIZE)
        self.icon_label.setPixmap(self.icon.pixmap(size, self.devicePixelRatioF()))

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt's name
        self.show_icon()
        super().showEvent(event)
