"""Speed you can see: a compact panel under a reply, drawn from the stats that already arrive.

Left to right: a tokens/s sparkline that grows with the reply (the rate over the last half
second of decoding) with plain decoding's rate as a dashed reference line, then the reply's one
headline (ui/presenters/words.py: "2.4× faster, 12 s saved", or a neutral "About as fast as usual" with its
reason). The figures behind it are the message's Details, shown on demand, not here. While the
reply streams the panel is drawn larger; a finished reply keeps a small version of it.

Nothing here touches the engine: `add_stats` takes the snapshots the window already receives
(ReplyProgress.stats), and one paint per event-loop turn draws them (QWidget.update coalesces).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QPainter,
    QPainterPath,
    QPaintEvent,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import QSizePolicy, QWidget

from engine.events import Stats, StatsRecord
from ui.presenters import verdict
from ui.qt import theme
from ui.qt.widgets import named

RATE_WINDOW_S = 0.5  # the sparkline's rate: tokens over the last this many seconds of decoding
MAX_POINTS = 600  # more snapshots are thinned (every other one dropped)
KEPT_POINTS = 48  # a finished reply's sparkline, stored with its stats
POINTS_KEY = "speed_points"  # ... under this key: [[decode_s, n_generated], ...]
REASON_LINES = 2  # a reason too long for one line under the headline wraps to this many (then elided)


def wrapped(text: str, metrics: QFontMetrics, width: int, max_lines: int) -> list[str]:
    """`text` in lines of at most `width` pixels, broken between words, at most `max_lines` of
    them: the last elided where the rest does not fit it."""
    lines: list[str] = []
    rest = text.split()
    while rest and len(lines) < max_lines - 1:
        n = 1
        while n < len(rest) and metrics.horizontalAdvance(" ".join(rest[: n + 1])) <= width:
            n += 1
        lines.append(" ".join(rest[:n]))
        rest = rest[n:]
    if rest:
        lines.append(metrics.elidedText(" ".join(rest), Qt.TextElideMode.ElideRight, max(0, width)))
    return lines


def windowed_rates(points: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """(decode time, tokens/s over the last RATE_WINDOW_S) for each (decode time, tokens) point;
    the cumulative rate until RATE_WINDOW_S of decoding has passed."""
    out: list[tuple[float, float]] = []
    j = 0
    for t, n in points:
        while j + 1 < len(points) and t - points[j + 1][0] >= RATE_WINDOW_S:
            j += 1
        t0, n0 = points[j]
        if t - t0 >= RATE_WINDOW_S and t > t0:
            out.append((t, (n - n0) / (t - t0)))
        elif t > 0:
            out.append((t, n / t))
    return out


class SpeedPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.points: list[tuple[float, int]] = []  # (decode_s, n_generated) per snapshot
        self.stats: StatsRecord | None = None
        self.plain_tokens_per_s: float | None = None
        # The quickest one-token steps timed on this computer before (where no plain speed was
        # measured), and whether the computer was seen busy during this reply: kept to its end.
        self.usual_steps: float | None = None
        self.busy_seen = False
        self.is_compact = False
        named(self, "speedPanel", "Speed of this reply")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self._height())

    def _height(self) -> int:
        """Room for the headline and a line of reason, and a line more where the reason wraps."""
        line = self.fontMetrics().height()
        lines, below = self.reason_lines()
        extra = line * (len(lines) - 1) if below else 0
        return int(line * (2.0 if self.is_compact else 2.8)) + 6 + extra

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if self.height() != self._height():  # the reason wraps, or no longer needs to, at this width
            self.setFixedHeight(self._height())

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(420, self._height())

    def add_stats(
        self, snapshots: Sequence[Stats], plain_tokens_per_s: float | None, usual_steps: float | None = None
    ) -> None:
        """Snapshots of the streaming reply (oldest first; at least one)."""
        for s in snapshots:
            if s.decode_s > 0 and (not self.points or s.decode_s > self.points[-1][0]):
                self.points.append((s.decode_s, s.n_generated))
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
        last = snapshots[-1]
        self.stats = StatsRecord.of(last)
        self.plain_tokens_per_s = plain_tokens_per_s
        self.usual_steps = usual_steps
        if not self.busy_seen:  # once busy, said so to the end: the reason does not flip
            self.busy_seen = self.headline().is_busy
        if self.height() != self._height():  # a reason that wraps came, or went
            self.setFixedHeight(self._height())
        self.update()

    def set_final(self, stats: StatsRecord) -> None:
        """The reply's final numbers (a finished reply, or one loaded from the store): drawn small.
        Its usual speed is the one its record keeps, as its Details read it and as it reads when
        shown again, not the last one streamed."""
        self.stats = stats
        self.usual_steps = None
        plain = stats.plain_tokens_per_s
        if plain is not None and plain > 0:
            self.plain_tokens_per_s = plain
        decode_s, n = stats.decode_s, stats.n_generated
        kept = stats.extras.get(POINTS_KEY)
        if not self.points and isinstance(kept, list):  # a stored reply's thinned sparkline
            self.points = [
                (float(p[0]), int(p[1]))
                for p in kept
                if isinstance(p, list | tuple)
                and len(p) == 2
                and all(isinstance(v, int | float) and math.isfinite(v) for v in p)
            ]
        if self.points and decode_s > self.points[-1][0]:
            self.points.append((decode_s, n))
        self.is_compact = True
        self.setFixedHeight(self._height())
        headline = self.headline()
        rows = verdict.details(stats, self.plain_tokens_per_s, self.usual_steps)
        said = ". ".join([t for t in (headline.text, headline.reason) if t] + [f"{k}: {v}" for k, v in rows])
        self.setAccessibleDescription(said)  # for screen readers; the eye gets the Details button
        self.setToolTip(headline.reason)  # whole, where the panel is too narrow for it
        self.update()

    def kept_points(self) -> list[list[float]]:
        """The sparkline's points thinned to about KEPT_POINTS, to be stored with the reply's stats."""
        step = max(1, len(self.points) // KEPT_POINTS)
        kept = self.points[::step]
        if self.points and kept[-1] != self.points[-1]:
            kept.append(self.points[-1])
        return [[round(t, 3), k] for t, k in kept]

    # ---- numbers

    def reference_rate(self) -> float | None:
        """The usual speed the headline compares with (the dashed line)."""
        if self.plain_tokens_per_s:
            return self.plain_tokens_per_s
        if self.stats is None:
            return None
        return verdict.plain_speed(self.stats, None, self.usual_steps)[0]

    # ---- drawing

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        stats = self.stats
        if stats is None:
            return
        colors = theme.colors()
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        text_color = self.palette().windowText().color()
        muted = QColor(colors.muted_text)
        h = self.height()
        rates = windowed_rates(self.points)
        if rates:
            width = 110.0 if self.is_compact else 180.0
            self._draw_sparkline(painter, QRectF(2.0, 3, width, h - 6), rates, colors, muted)
        self._draw_headline(painter, self._text_left(), colors, text_color, muted)
        painter.end()

    def headline(self) -> verdict.Headline:
        """The reply's one line (ui/presenters/words.py): the whole request against plain decoding here."""
        if self.stats is None:
            return verdict.Headline(verdict.Verdict.PENDING, "")
        return verdict.headline(
            self.stats,
            self.plain_tokens_per_s,
            self.stats.note_kind,
            self.usual_steps,
            self.busy_seen,
            ended=self.is_compact,  # (set_final: the reply's final numbers)
        )

    def _headline_font(self, headline: verdict.Headline) -> QFont:
        font = QFont(self.font())
        font.setBold(headline.verdict is verdict.Verdict.FASTER)
        if not self.is_compact:
            font.setPointSizeF(font.pointSizeF() * 1.15)
        return font

    def _text_left(self) -> float:
        """Where the headline starts: after the sparkline, where there is one."""
        return 2.0 + ((110.0 if self.is_compact else 180.0) + 12 if windowed_rates(self.points) else 0.0)

    def reason_lines(self) -> tuple[list[str], bool]:
        """The reason as drawn, in lines, and whether it is under the headline: beside it where it
        fits, else under it, wrapped to a second line (the panel grows) and elided only where even
        two lines are too narrow."""
        headline = self.headline()
        if not headline.reason:
            return [], False
        x = self._text_left()
        beside = x + QFontMetrics(self._headline_font(headline)).horizontalAdvance(headline.text) + 10
        metrics = QFontMetrics(self.font())
        if metrics.horizontalAdvance(headline.reason) <= self.width() - beside - 4:
            return [headline.reason], False
        return wrapped(headline.reason, metrics, int(self.width() - x - 4), REASON_LINES), True

    def _draw_headline(
        self, painter: QPainter, x: float, colors: theme.ThemeColors, text: QColor, muted: QColor
    ) -> None:
        """The headline, green where the speed-up paid, in the body colour where it did not,
        with its reason in grey beside it, or under it where it does not fit: nothing shown twice."""
        headline = self.headline()
        if not headline.text:
            return
        painter.setFont(self._headline_font(headline))
        metrics = painter.fontMetrics()
        lines, below = self.reason_lines()
        reason_metrics = QFontMetrics(self.font())
        y = (self.height() + metrics.ascent() - metrics.descent()) / 2
        if below:
            under = reason_metrics.height() * len(lines)
            y = max(0.0, (self.height() - metrics.height() - under) / 2) + metrics.ascent()
        is_faster = headline.verdict is verdict.Verdict.FASTER
        painter.setPen(
            colors.speedup_text if is_faster else (muted if headline.verdict is verdict.Verdict.OFF else text)
        )
        painter.drawText(QPointF(x, y), headline.text)
        if lines:
            painter.setFont(self.font())
            painter.setPen(muted)
            if below:
                top = y + metrics.descent() + reason_metrics.ascent() + 1
                for i, line in enumerate(lines):
                    painter.drawText(QPointF(x, top + i * reason_metrics.height()), line)
            else:
                painter.drawText(QPointF(x + metrics.horizontalAdvance(headline.text) + 10, y), lines[0])

    def _draw_sparkline(
        self,
        painter: QPainter,
        rect: QRectF,
        rates: list[tuple[float, float]],
        colors: theme.ThemeColors,
        muted: QColor,
    ) -> None:
        reference = self.reference_rate()
        # About one point per two pixels: more costs paint time and shows nothing more.
        step = max(1, -(-len(rates) // max(1, int(rect.width() / 2))))
        if step > 1:
            rates = rates[::step] + ([rates[-1]] if (len(rates) - 1) % step else [])
        top_rate = max(max(r for _, r in rates), reference or 0.0) * 1.15 or 1.0
        end_t = rates[-1][0] or 1.0
        # A little room: the line grows towards the right as the reply does.
        span_t = max(end_t, 1.0) if not self.is_compact else end_t

        def point(t: float, r: float) -> QPointF:
            return QPointF(
                rect.left() + rect.width() * t / span_t, rect.bottom() - rect.height() * r / top_rate
            )

        painter.setPen(QPen(QColor(muted.red(), muted.green(), muted.blue(), 60), 1))
        painter.drawLine(rect.bottomLeft(), rect.bottomRight())
        line = QPainterPath(point(*rates[0]))
        for t, r in rates[1:]:
            line.lineTo(point(t, r))
        fill = QPainterPath(line)
        fill.lineTo(point(rates[-1][0], 0))
        fill.lineTo(point(rates[0][0], 0))
        fill.closeSubpath()
        shade = QColor(colors.speculative_line)
        shade.setAlpha(45)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)  # a soft fill needs no AA
        painter.fillPath(fill, shade)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(colors.speculative_line, 1.6))
        painter.drawPath(line)
        if reference:
            # The usual speed: a crisp dashed line (the Details say its figure; no tiny label on it).
            y = round(rect.bottom() - rect.height() * reference / top_rate) + 0.5
            painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
            painter.setPen(QPen(colors.plain_line, 1, Qt.PenStyle.DashLine))
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
