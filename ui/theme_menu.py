"""View ▸ Theme: Follow the system, Light or Dark, from the menu as well as Settings ▸ Chat (the
choice is saved as Settings' is; ui/qt/theme.py applies it)."""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu

THEME_CHOICES = (("system", "Follow the &system"), ("light", "&Light"), ("dark", "&Dark"))


def install_theme_menu(window: Any) -> QMenu | None:
    """Add Theme to the window's View menu (None where it has none); window: the main window
    (its menu bar, `theme`, `_update_settings`)."""
    view = next(
        (a.menu() for a in window.menuBar().actions() if a.text() == "&View" and isinstance(a.menu(), QMenu)),
        None,
    )
    if view is None:
        return None
    view.addSeparator()
    menu = view.addMenu("&Theme")
    menu.setObjectName("themeMenu")
    group = QActionGroup(menu)
    for choice, text in THEME_CHOICES:
        action = QAction(text, menu)
        action.setObjectName(f"theme-{choice}")
        action.setCheckable(True)
        action.setData(choice)
        action.triggered.connect(lambda _=False, c=choice: _choose(window, c))
        group.addAction(action)
        menu.addAction(action)

    def show_checked() -> None:
        for action in menu.actions():
            action.setChecked(action.data() == window.theme.choice)

    menu.aboutToShow.connect(show_checked)
    show_checked()
    return menu


def _choose(window: Any, choice: str) -> None:
    window._update_settings(theme=choice)
    window.theme.set_choice(choice)
