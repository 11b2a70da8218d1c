"""The tint people read: contrast ratios (WCAG) computed for both themes, syntax colours included.

The review measured 3.2:1 (light, green keywords on the tint) and 2.2:1 (dark, red keywords on
the tint); body text and every colour of both Pygments styles must reach AA (4.5:1) on every
background a reply's text can sit on, the tint included. Colour is not the only cue: the same
text carries a dotted underline.
"""

from __future__ import annotations

import pytest
from PySide6.QtGui import QColor, QTextCharFormat, QTextDocument

from engine.events import DraftSpan
from ui.chat.code_highlight import syntax_color
from ui.chat.markdown_view import render
from ui.qt import theme

THEMES = [theme.LIGHT, theme.DARK]


def test_contrast_ratio_matches_wcag_reference_values() -> None:
    assert theme.contrast(QColor(0, 0, 0), QColor(255, 255, 255)) == pytest.approx(21.0)
    assert theme.contrast(QColor(255, 255, 255), QColor(255, 255, 255)) == pytest.approx(1.0)
    # #767676 on white is the classic AA threshold grey: 4.54:1.
    assert theme.contrast(QColor("#767676"), QColor("#ffffff")) == pytest.approx(4.54, abs=0.01)
    # What the review measured on the old light tint (Pygments green on the translucent tint).
    old_tint = theme.over(QColor(60, 190, 110, 70), QColor(239, 239, 239))
    assert theme.contrast(QColor("#008000"), theme.over(QColor(127, 127, 127, 38), old_tint)) < 4.5


@pytest.mark.parametrize("colors", THEMES, ids=["light", "dark"])
def test_body_text_reaches_aa_on_the_tint_and_every_background(colors: theme.ThemeColors) -> None:
    for background in theme.text_backgrounds(colors):
        assert theme.contrast(colors.text, background) >= theme.AA, background.name()
    # The tint is opaque: what is read on it does not depend on what lies below.
    assert colors.draft_tint.alpha() == 255
    # ... and it is told apart from the page (the underline carries the rest).
    assert theme.contrast(colors.draft_tint, colors.page) > 1.3


@pytest.mark.parametrize("colors", THEMES, ids=["light", "dark"])
def test_every_syntax_colour_reaches_aa_on_the_tint_and_code_backgrounds(colors: theme.ThemeColors) -> None:
    from pygments.styles import get_style_by_name

    style = get_style_by_name(colors.code_style)
    checked = 0
    for ttype, spec in style:
        color = syntax_color(colors, ttype)
        if color is None:
            continue
        checked += 1
        for background in theme.text_backgrounds(colors):
            ratio = theme.contrast(color, background)
            assert ratio >= theme.AA, f"{ttype} {color.name()} on {background.name()}: {ratio:.2f}:1"
        if spec["color"]:  # the hue is kept where the style's own colour already passes
            original = QColor("#" + spec["color"])
            if all(theme.contrast(original, bg) >= theme.AA for bg in theme.text_backgrounds(colors)):
                assert color == original
    assert checked > 20


def test_tinted_text_also_carries_a_dotted_underline(qtbot) -> None:
    doc = QTextDocument()
    render(doc, "Plain start. The copied part.", [DraftSpan(13, 29)], tint=True)
    formats = []
    block = doc.firstBlock()
    it = block.begin()
    while not it.atEnd():
        fragment = it.fragment()
        formats.append((fragment.text(), fragment.charFormat()))
        it += 1
    tinted = [(t, f) for t, f in formats if f.background().color() == theme.colors().draft_tint]
    assert tinted and "copied" in "".join(t for t, _ in tinted)
    for _text, fmt in tinted:
        assert fmt.underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine
    plain = [f for t, f in formats if t.startswith("Plain")]
    assert plain and plain[0].underlineStyle() == QTextCharFormat.UnderlineStyle.NoUnderline


@pytest.mark.parametrize("colors", THEMES, ids=["light", "dark"])
def test_every_sources_tint_is_opaque_readable_and_marked(colors: theme.ThemeColors) -> None:
    """Each source's tint (document, conversation, earlier reply, draft model) is one of the
    backgrounds the two tests above check body text and every syntax colour on; each is opaque,
    told apart from the page, and its underline (the cue that is not colour) shows on it."""
    backgrounds = theme.text_backgrounds(colors)
    assert len(colors.draft_looks) == 4
    for look in colors.draft_looks:
        assert look.tint in backgrounds, look.source
        assert look.tint.alpha() == 255 and look.mark.alpha() == 255
        assert theme.contrast(colors.text, look.tint) >= theme.AA
        assert theme.contrast(look.tint, colors.page) > 1.3, look.source
        assert theme.contrast(look.mark, look.tint) >= theme.MARK_CONTRAST, look.source
    assert theme.contrast(colors.draft_mark, colors.draft_tint) >= theme.MARK_CONTRAST
