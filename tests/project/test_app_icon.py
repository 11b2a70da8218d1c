"""The app's icon: set on the application and the window, sharp at scale 2, shown in About."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QSize  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app import paths  # noqa: E402
from ui.about import AboutDialog, app_icon  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _argb(image: QImage) -> QImage:
    return image.convertToFormat(QImage.Format.Format_ARGB32)


def test_the_icon_is_drawn_for_each_scale_not_stretched(qtbot) -> None:
    icon = app_icon()
    assert not icon.isNull()
    at_2x = icon.pixmap(QSize(32, 32), 2.0)
    assert at_2x.devicePixelRatio() == 2.0 and at_2x.size() == QSize(64, 64)
    # The same pixels as the icon drawn at 64 px: rendered for the scale, not a 32 px image enlarged.
    assert _argb(at_2x.toImage()) == _argb(icon.pixmap(QSize(64, 64), 1.0).toImage())
    stretched = icon.pixmap(QSize(32, 32), 1.0).toImage().scaled(64, 64)
    assert _argb(at_2x.toImage()) != _argb(stretched)
    # Not blank: the white bubble and the blue background are both there.
    image = icon.pixmap(QSize(64, 64), 1.0).toImage()
    assert image.pixelColor(32, 8).blue() > 150 and image.pixelColor(48, 40).lightness() > 240


def test_the_packaged_freedesktop_svg_is_the_same_drawing() -> None:
    packaged = ROOT / "packaging" / "linux" / "icons" / "hicolor" / "scalable" / "apps" / "tandem.svg"
    drawn = paths.resources_dir() / "tandem.svg"  # what app_icon draws
    assert packaged.read_bytes() == drawn.read_bytes()  # render_icons.py copies it


def test_the_window_and_the_about_box_show_the_icon(qtbot, open_window, tiny_target) -> None:
    window = open_window(tiny_target)
    for icon in (QApplication.windowIcon(), window.windowIcon()):
        assert not icon.isNull()
        assert icon.pixmap(QSize(48, 48), 2.0).size() == QSize(96, 96)
    actions = [a for a in window.menuBar().actions() if a.menu() is not None]
    help_menu = next(a.menu() for a in actions if a.text() == "&Help")
    about = next(a for a in help_menu.actions() if a.text() == "About Tandem")
    about.trigger()
    qtbot.waitUntil(lambda: window.findChild(AboutDialog) is not None, timeout=5000)
    dialog = window.findChild(AboutDialog)
    qtbot.waitUntil(dialog.isVisible, timeout=5000)
    pixmap = dialog.icon_label.pixmap()
    assert not pixmap.isNull()
    assert pixmap.devicePixelRatio() == dialog.devicePixelRatioF()
    assert pixmap.size() == QSize(96, 96) * dialog.devicePixelRatioF()
    text = dialog.findChild(type(dialog.icon_label), "aboutText").text()
    assert "<h2>Tandem " in text and "llama.cpp" in text
    dialog.close()
