"""View ▸ Theme: Follow the system, Light or Dark, from the menu as well as Settings ▸ Chat (the
choice is saved as Settings' is; ui/qt/theme.py applies it)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QMenuBar

from app.settings import Theme
from ui.qt.theme import ThemeManager

THEME_CHOICES = ((Theme.SYSTEM, "Follow the &system"), (Theme.LIGHT, "&Light"), (Theme.DARK, "&Dark"))


def install_theme_menu(menu_bar: QMenuBar, theme: ThemeManager, choose: Callable[[Theme], None]) -> QMenu:
    """Add Theme to the menu bar's View menu (ui/shortcuts.py made it); a choice goes to `choose`
    (the window saves and applies it as it does Settings'), and the menu checks `theme`'s choice."""
    view = next(m for a in menu_bar.actions() if a.text() == "&View" and isinstance(m := a.menu(), QMenu))
    view.addSeparator()
    menu = view.addMenu("&Theme")
    menu.setObjectName("themeMenu")
    group = QActionGroup(menu)
    for choice, text in THEME_CHOICES:
        action = QAction(text, menu, checkable=True)
        action.setObjectName(f"theme-{choice}")
        action.setData(choice)
        action.triggered.connect(lambda _=False, c=choice: choose(c))
        group.addAction(action)
        menu.addAction(action)

    def show_checked() -> None:
        for action in menu.actions():
            action.setChecked(action.data() == theme.choice)

    menu.aboutToShow.connect(show_checked)
    show_checked()
    return menu
