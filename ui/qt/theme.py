"""Light and dark: follow the system's colour scheme, or the user's choice in Settings.

`ThemeManager` watches Qt's colour scheme hint (QStyleHints.colorScheme, Qt 6.5+) and applies
the choice ("system", "light" or "dark"). With "system" the platform's palette is kept, and its
lightness decides which of our colours (the draft tint, code blocks, the highlighter's style, the
charts) go with it: a dark platform theme that gives no scheme hint is still read as dark. A
forced choice asks the platform for that scheme and, where the platform cannot switch (Linux
without a portal, offscreen), sets a palette of its own.

Everything that draws reads `colors()`; `ThemeManager.changed` says when to redraw. This module
imports nothing else of the window (the renderer and the highlighter read it, not the reverse).

The tint under the model's own, confirmed text says where the guess came from: one colour per
source (an attached document, the conversation's text, an earlier reply, the draft model; see
`DraftLook`), and `draft_tint` where a reply was saved before its sources were kept. Each is an
opaque colour (not a translucent one laid over whatever is below), so what is read on it is
known: body text and every syntax colour reach WCAG AA (4.5:1) on every tint and on the page and
code backgrounds (`readable` over `text_backgrounds`, tested for every colour of both Pygments
styles in tests/ui/test_ui_contrast.py). The tints differ in hue, not in lightness (lightness is
what the text needs), so each source also has its own underline style in its own mark colour:
the source can be told without seeing colour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication, QPalette, QTextCharFormat
from PySide6.QtWidgets import QApplication, QWidget

from app.settings import Theme
from engine.events import DraftSource

THEME_CHOICES = (("System", Theme.SYSTEM), ("Light", Theme.LIGHT), ("Dark", Theme.DARK))
AA = 4.5  # WCAG AA: the least contrast for body text
MARK_CONTRAST = 3.0  # WCAG 1.4.11: the least contrast of a non-text cue (the underline) on its tint

Underline = QTextCharFormat.UnderlineStyle
# Each source's underline (the same in both themes): the cue that does not rest on colour.
# Text saved without its source keeps the dotted line the single tint always had.
UNDERLINES = {
    DraftSource.DOCUMENT: Underline.SingleUnderline,
    DraftSource.TEXT: Underline.DotLine,
    DraftSource.MEMORY: Underline.DashUnderline,
    DraftSource.MODEL: Underline.WaveUnderline,
}
# The order the legend names them in.
SOURCES = (DraftSource.DOCUMENT, DraftSource.TEXT, DraftSource.MEMORY, DraftSource.MODEL)


@dataclass(frozen=True)
class DraftLook:
    """How text drafted from one source is marked: an opaque tint behind it and an underline in
    `mark` (source "": a reply saved before sources were kept)."""

    source: DraftSource
    tint: QColor
    mark: QColor
    underline: QTextCharFormat.UnderlineStyle


@dataclass(frozen=True)
class ThemeColors:
    is_dark: bool
    page: QColor  # the window's background (Window), where replies are drawn
    base: QColor  # inputs' and panes' background (Base)
    text: QColor  # body text
    draft_tint: QColor  # the background of confirmed text whose source was not kept (opaque)
    draft_mark: QColor  # the dotted underline beside it (a cue that is not only colour)
    code_background: QColor
    code_style: str  # a Pygments style
    plain_line: QColor  # charts: plain decoding
    speculative_line: QColor  # charts: with speculation
    speedup_text: QColor  # a headline that says the speed-up paid (4.5:1 on the page)
    user_bubble: str  # CSS colour of the user's messages
    muted_text: (
        str  # CSS colour of details lines, unselected tabs and the status bar (4.5:1 on page and base)
    )
    error_text: str  # CSS colour of an error or a failing verdict (4.5:1 on page and base)
    ok_text: str  # CSS colour of a passing verdict ("They pair", "Fits") (4.5:1 on page and base)
    # (tint, mark) per source, in SOURCES' order: document, text, earlier reply, draft model.
    source_colors: tuple[tuple[QColor, QColor], ...]

    @property
    def draft_looks(self) -> tuple[DraftLook, ...]:
        """Each source's look, in the legend's order."""
        return tuple(
            DraftLook(source, tint, mark, UNDERLINES[source])
            for source, (tint, mark) in zip(SOURCES, self.source_colors, strict=True)
        )

    def draft_look(self, source: DraftSource) -> DraftLook:
        """The look of text drafted from `source` ("" or unknown: the tint of unrecorded sources)."""
        for look in self.draft_looks:
            if look.source == source:
                return look
        return DraftLook(DraftSource.NONE, self.draft_tint, self.draft_mark, Underline.DotLine)


LIGHT = ThemeColors(
    is_dark=False,
    page=QColor(239, 239, 239),
    base=QColor(255, 255, 255),
    text=QColor(20, 20, 20),
    # A neutral grey-blue: older replies did not keep where their guesses came from.
    draft_tint=QColor(204, 206, 212),
    draft_mark=QColor(80, 84, 96),
    code_background=QColor(127, 127, 127, 38),
    code_style="default",
    plain_line=QColor(120, 120, 120),
    speculative_line=QColor(30, 150, 80),
    speedup_text=QColor(20, 115, 60),
    user_bubble="rgba(90, 140, 230, 28)",
    muted_text="#595959",
    error_text="#b00020",
    ok_text="#14733c",
    # The same lightness as the old single green (the old translucent green at alpha 110 over the
    # page; 1.2:1 at alpha 70 was hard to see), in four hues: amber, green, teal, violet.
    source_colors=(
        (QColor(242, 204, 122), QColor(130, 82, 0)),  # document
        (QColor(162, 218, 184), QColor(20, 110, 55)),  # text
        (QColor(150, 212, 226), QColor(0, 92, 112)),  # earlier reply
        (QColor(214, 196, 245), QColor(96, 48, 168)),  # draft model
    ),
)
DARK = ThemeColors(
    is_dark=True,
    page=QColor(45, 45, 48),
    base=QColor(30, 30, 32),
    text=QColor(230, 230, 230),
    draft_tint=QColor(70, 70, 76),
    draft_mark=QColor(185, 185, 198),
    code_background=QColor(255, 255, 255, 22),
    code_style="github-dark",
    plain_line=QColor(175, 175, 175),
    speculative_line=QColor(90, 215, 140),
    speedup_text=QColor(110, 220, 150),
    user_bubble="rgba(110, 160, 255, 40)",
    muted_text="#b0b0b0",
    error_text="#ff8a80",
    ok_text="#6edc96",
    # Deep colours: each still reads as its hue on the dark page, and light syntax colours keep
    # 4.5:1 on it (a lighter green left red keywords at 2.2:1).
    source_colors=(
        (QColor(92, 70, 22), QColor(235, 185, 80)),  # document
        (QColor(32, 84, 56), QColor(110, 220, 150)),  # text
        (QColor(22, 74, 92), QColor(100, 205, 235)),  # earlier reply
        (QColor(78, 54, 116), QColor(195, 165, 255)),  # draft model
    ),
)

_current = LIGHT


def colors() -> ThemeColors:
    """The colours in use now."""
    return _current


def _set_current(theme: ThemeColors) -> None:
    global _current
    _current = theme


# ---- contrast (WCAG 2.x): what the tint and the syntax colours are checked and adjusted by


def over(color: QColor, background: QColor) -> QColor:
    """A translucent colour laid over an opaque one: the colour that is seen."""
    a = color.alphaF()
    return QColor(
        round(color.red() * a + background.red() * (1 - a)),
        round(color.green() * a + background.green() * (1 - a)),
        round(color.blue() * a + background.blue() * (1 - a)),
    )


def luminance(color: QColor) -> float:
    """WCAG relative luminance of an opaque colour."""

    def channel(value: int) -> float:
        c = value / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(color.red()) + 0.7152 * channel(color.green()) + 0.0722 * channel(color.blue())


def contrast(a: QColor, b: QColor) -> float:
    """The WCAG contrast ratio of two opaque colours (1 to 21)."""
    la, lb = luminance(a), luminance(b)
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def text_backgrounds(theme: ThemeColors) -> tuple[QColor, ...]:
    """Every background a reply's text can sit on: the page, a pane, code blocks on either, and
    every tint (each source's, and the one of text whose source was not kept)."""
    return (
        theme.page,
        theme.base,
        over(theme.code_background, theme.page),
        over(theme.code_background, theme.base),
        theme.draft_tint,
        *(tint for tint, _mark in theme.source_colors),
    )


def readable(color: QColor, backgrounds: Sequence[QColor], is_dark: bool) -> QColor:
    """`color` where it reaches AA on every background; else mixed towards white (dark
    theme) or black (light) in small steps until it does: the hue stays, the contrast is met."""
    toward = 255 if is_dark else 0
    r, g, b = color.red(), color.green(), color.blue()
    for step in range(21):
        k = step / 20
        mixed = QColor(round(r + (toward - r) * k), round(g + (toward - g) * k), round(b + (toward - b) * k))
        if all(contrast(mixed, bg) >= AA for bg in backgrounds):
            return mixed
    return QColor(toward, toward, toward)


R = QPalette.ColorRole
# Each role's colour in our own palettes: (light, dark), for where the platform cannot switch.
PALETTE = {
    R.Window: (QColor(239, 239, 239), QColor(45, 45, 48)),
    R.WindowText: (QColor(20, 20, 20), QColor(230, 230, 230)),
    R.Base: (QColor(255, 255, 255), QColor(30, 30, 32)),
    R.AlternateBase: (QColor(247, 247, 247), QColor(38, 38, 41)),
    R.ToolTipBase: (QColor(255, 255, 220), QColor(55, 55, 58)),
    R.ToolTipText: (QColor(20, 20, 20), QColor(230, 230, 230)),
    R.PlaceholderText: (QColor(120, 120, 120), QColor(150, 150, 150)),
    R.Text: (QColor(20, 20, 20), QColor(230, 230, 230)),
    R.Button: (QColor(239, 239, 239), QColor(45, 45, 48)),
    R.ButtonText: (QColor(20, 20, 20), QColor(230, 230, 230)),
    R.BrightText: (QColor(255, 255, 255), QColor(255, 90, 90)),
    R.Light: (QColor(255, 255, 255), QColor(70, 70, 74)),
    R.Midlight: (QColor(202, 202, 202), QColor(60, 60, 64)),
    R.Mid: (QColor(184, 184, 184), QColor(90, 90, 95)),
    R.Dark: (QColor(159, 159, 159), QColor(20, 20, 22)),
    R.Shadow: (QColor(118, 118, 118), QColor(0, 0, 0)),
    R.Highlight: (QColor(48, 140, 198), QColor(60, 120, 215)),
    R.HighlightedText: (QColor(255, 255, 255), QColor(255, 255, 255)),
    R.Link: (QColor(0, 90, 200), QColor(110, 170, 255)),
    R.LinkVisited: (QColor(110, 40, 180), QColor(180, 140, 255)),
}
DISABLED_TEXT = (QColor(150, 150, 150), QColor(130, 130, 130))


def own_palette(is_dark: bool) -> QPalette:
    p = QPalette()
    for role, colours in PALETTE.items():
        p.setColor(role, colours[is_dark])
    for role in (R.WindowText, R.Text, R.ButtonText):
        p.setColor(QPalette.ColorGroup.Disabled, role, DISABLED_TEXT[is_dark])
    return p


def style_sheet(theme: ThemeColors) -> str:
    """The application's style sheet over Fusion: room, rounded controls, one accent (the
    palette's Highlight) for the primary action and the current tab. Qt Widgets with a real style
    sheet, not Qt Quick: the window is written (and tested under pytest-qt) as widgets, and a
    sheet gives it a calm, consistent look without rewriting it."""
    line = "rgba(127, 127, 127, 90)"
    soft = "rgba(127, 127, 127, 28)" if not theme.is_dark else "rgba(255, 255, 255, 16)"
    arrow = _resource(f"arrow-down-{'dark' if theme.is_dark else 'light'}.svg")
    return f"""
    QPushButton {{ border: 1px solid {line}; border-radius: 6px; padding: 5px 14px; background: {soft}; }}
    QPushButton:hover {{ border-color: palette(highlight); }}
    QPushButton:focus {{ border: 2px solid palette(highlight); }}
    QPushButton:disabled {{ color: {theme.muted_text}; border-style: dashed; }}
    QPushButton#sendButton, QPushButton#newChatButton, QPushButton#welcomeDemo {{
        background: palette(highlight); color: palette(highlighted-text); border: none; font-weight: bold;
    }}
    QPushButton#stopButton {{ border: 2px solid palette(highlight); font-weight: bold; }}
    QComboBox {{ border: 1px solid {line}; border-radius: 6px; padding: 3px 8px; }}
    QComboBox:focus {{ border: 2px solid palette(highlight); }}
    QComboBox::drop-down {{ border: none; width: 18px; }}
    QComboBox::down-arrow {{ image: url({arrow}); width: 10px; height: 10px; }}
    QLineEdit, QPlainTextEdit {{ border: 1px solid {line}; border-radius: 8px; padding: 4px 6px; }}
    QLineEdit:focus, QPlainTextEdit:focus {{ border: 2px solid palette(highlight); }}
    QToolButton {{ border: none; border-radius: 5px; padding: 2px 6px; }}
    QToolButton:hover, QToolButton:focus {{ background: {soft}; }}
    QToolButton:checked {{ background: palette(highlight); color: palette(highlighted-text); }}
    QTabWidget::pane {{ border: none; border-top: 1px solid {line}; }}
    QTabBar::tab {{ padding: 7px 18px; border: none; margin-right: 2px; font-weight: bold; }}
    QTabBar::tab:selected {{ border-bottom: 3px solid palette(highlight); }}
    QTabBar::tab:!selected {{ color: {theme.muted_text}; }}
    QListWidget {{ border: none; background: transparent; }}
    QListWidget::item {{ padding: 6px 6px; border-radius: 6px; }}
    QListWidget::item:selected {{ background: palette(highlight); color: palette(highlighted-text); }}
    QToolBar {{ border: none; spacing: 6px; }}
    QToolBar QToolButton {{ border: 1px solid {line}; border-radius: 6px; padding: 3px 10px; }}
    QStatusBar QLabel {{ color: {theme.muted_text}; }}
    QCheckBox {{ color: palette(window-text); }}
    QCheckBox::indicator {{
        width: 13px; height: 13px; border: 1px solid {theme.muted_text}; border-radius: 3px;
        background: palette(base);
    }}
    QCheckBox::indicator:checked {{
        background: palette(highlight); border-color: palette(highlight); image: url({_resource("check.svg")});
    }}
    QCheckBox::indicator:disabled {{ border-color: palette(mid); }}
    QCheckBox::indicator:focus {{ border: 2px solid palette(highlight); }}
    *[tone="error"] {{ color: {theme.error_text}; }}
    *[tone="ok"] {{ color: {theme.ok_text}; }}
    *[tone="muted"] {{ color: {theme.muted_text}; }}
    """


def _resource(name: str) -> str:
    """A picture the sheet draws where it styles a control that then draws none of its own (a
    combo box's arrow, a checked box's mark)."""
    from app.paths import resources_dir

    return (resources_dir() / name).as_posix()


def set_tone(widget: QWidget, tone: str) -> None:
    """Colour a label's text by what it says, from the theme in use ("error", "ok", "muted";
    "" the body colour): the application's style sheet holds the colours, so a theme switch
    restyles it with everything else."""
    if widget.property("tone") == tone:
        return
    widget.setProperty("tone", tone)
    style = widget.style()
    style.unpolish(widget)
    style.polish(widget)
    widget.update()


def _is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


class ThemeManager(QObject):
    """Applies a theme choice to the application and follows the system while the choice is "system"."""

    changed = Signal(bool)  # is_dark

    def __init__(self, choice: Theme = Theme.SYSTEM, parent: QObject | None = None) -> None:
        super().__init__(parent)
        app = QGuiApplication.instance()
        assert isinstance(app, QGuiApplication)
        self._app = app
        self._system_palette = QPalette(app.palette())
        self._has_own_palette = False
        self._choice = Theme.SYSTEM
        app.styleHints().colorSchemeChanged.connect(self.on_color_scheme_changed)
        self.set_choice(choice)

    @property
    def choice(self) -> Theme:
        return self._choice

    def set_choice(self, choice: Theme) -> None:
        self._choice = choice
        hints = self._app.styleHints()
        if choice is Theme.SYSTEM:
            hints.unsetColorScheme()
            self._follow_system(hints.colorScheme())
            return
        want_dark = choice is Theme.DARK
        if not self._has_own_palette:
            self._system_palette = QPalette(self._app.palette())
        hints.setColorScheme(Qt.ColorScheme.Dark if want_dark else Qt.ColorScheme.Light)
        if _is_dark(self._app.palette()) != want_dark or self._has_own_palette:
            # The platform did not switch (or an own palette is already in place): set ours.
            self._app.setPalette(own_palette(want_dark))
            self._has_own_palette = True
        self._settle(want_dark)

    def _settle(self, is_dark: bool) -> None:
        theme = DARK if is_dark else LIGHT
        is_change = theme is not colors()
        _set_current(theme)
        if isinstance(self._app, QApplication):
            self._app.setStyleSheet(style_sheet(theme))
        if is_change:
            self.changed.emit(is_dark)

    def _follow_system(self, scheme: Qt.ColorScheme) -> None:
        if self._has_own_palette:
            self._app.setPalette(self._system_palette)
            self._has_own_palette = False
        is_dark = scheme == Qt.ColorScheme.Dark
        if scheme == Qt.ColorScheme.Unknown:  # no hint: the palette's lightness says
            is_dark = _is_dark(self._app.palette())
        if _is_dark(self._app.palette()) != is_dark:
            # The platform reports a scheme its palette does not follow (no platform theme).
            self._system_palette = QPalette(self._app.palette())
            self._app.setPalette(own_palette(is_dark))
            self._has_own_palette = True
        self._settle(is_dark)

    def on_color_scheme_changed(self, scheme: Qt.ColorScheme) -> None:
        if self._choice is Theme.SYSTEM:
            self._follow_system(scheme)
