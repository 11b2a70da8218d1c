"""Speed you can see: a compact panel under a reply, drawn from the stats that already arrive.

Left to right: a tokens/s sparkline that grows with the reply (the rate over the last half
second of decoding) with plain decoding's rate as a dashed reference line, an acceptance
gauge, the mean accepted length, and the speedup over plain decoding. While the reply streams
the panel is drawn larger; a finished reply keeps a small version of it. A stored reply has
only its final numbers, so its panel has no sparkline.

Nothing here touches the engine: `add_stats` takes the snapshots the window already receives
(ReplyProgress.stats), and one paint per event-loop turn draws them (QWidget.update coalesces).
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPainterPath, QPaintEvent, QPen, QPixmap
from PySide6.QtWidgets import QSizePolicy, QWidget

from engine.events import Stats, StatsRecord
from ui import theme
from ui.stats_format import DASH, live_line, plain_estimate

RATE_WINDOW_S = 0.5  # the sparkline's rate: tokens over the last this many seconds of decoding
MAX_POINTS = 600  # more snapshots are thinned (every other one dropped)
KEPT_POINTS = 48  # a finished reply's sparkline, stored with its stats
_gauge_cache: dict[tuple[object, ...], QPixmap] = {}
POINTS_KEY = "speed_points"  # ... under this key: [[decode_s, n_generated], ...]


def windowed_rates(
    points: Sequence[tuple[float, int]], window_s: float = RATE_WINDOW_S
) -> list[tuple[float, float]]:
    """(decode time, tokens/s over the last window_s) for each (decode time, tokens) point;
    the cumulative rate until window_s of decoding has passed."""
    out: list[tuple[float, float]] = []
    j = 0
    for t, n in points:
        while j + 1 < len(points) and t - points[j + 1][0] >= window_s:
            j += 1
        t0, n0 = points[j]
        if t - t0 >= window_s and t > t0:
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
        self.is_compact = False
        self.setObjectName("speedPanel")
        self.setAccessibleName("Speed of this reply")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(self._height())

    def _height(self) -> int:
        line = self.fontMetrics().height()
        return int(line * (2.0 if self.is_compact else 2.8)) + 6

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(420, self._height())

    def add_stats(self, snapshots: Sequence[Stats], plain_tokens_per_s: float | None) -> None:
        """Snapshots of the streaming reply (oldest first)."""
        if not snapshots:
            return
        for s in snapshots:
            if s.decode_s > 0 and (not self.points or s.decode_s > self.points[-1][0]):
                self.points.append((s.decode_s, s.n_generated))
        if len(self.points) > MAX_POINTS:
            self.points = self.points[::2]
        last = snapshots[-1]
        self.stats = StatsRecord.of(last)
        self.plain_tokens_per_s = plain_tokens_per_s
        self.update()

    def set_final(self, stats: StatsRecord, compact: bool = True) -> None:
        """The reply's final numbers (a finished reply, or one loaded from the store)."""
        self.stats = stats
        plain = stats.plain_tokens_per_s
        if plain is not None and plain > 0:
            self.plain_tokens_per_s = plain
        decode_s, n = stats.decode_s, stats.n_generated
        kept = stats.extras.get(POINTS_KEY)
        if not self.points and isinstance(kept, list):  # a stored reply's thinned sparkline
            self.points = [
                (float(p[0]), int(p[1])) for p in kept if isinstance(p, list | tuple) and len(p) == 2
            ]
        if self.points and decode_s > self.points[-1][0]:
            self.points.append((decode_s, n))
        self.is_compact = compact
        self.setFixedHeight(self._height())
        text = live_line(stats, self.plain_tokens_per_s)
        self.setToolTip(text)
        self.setAccessibleDescription(text)
        self.update()

    def kept_points(self, n: int = KEPT_POINTS) -> list[list[float]]:
        """The sparkline's points thinned to about n, to be stored with the reply's stats."""
        step = max(1, len(self.points) // n)
        kept = self.points[::step]
        if self.points and kept[-1] != self.points[-1]:
            kept.append(self.points[-1])
        return [[round(t, 3), k] for t, k in kept]

    # ---- numbers

    def tokens_per_s(self) -> float:
        return self.stats.decode_tokens_per_s if self.stats is not None else 0.0

    def speedup(self) -> tuple[float | None, bool]:
        """(speed over plain decoding, whether it is an estimate)."""
        if self.stats is None or not self.stats.is_speculative:
            return 1.0, False
        tps = self.tokens_per_s()
        if tps <= 0:
            return None, False
        if self.plain_tokens_per_s:
            return tps / self.plain_tokens_per_s, False
        estimate = plain_estimate(self.stats)  # None for replies too short to compare fairly
        if estimate is not None:
            return tps / estimate, True
        return None, False

    def reference_rate(self) -> float | None:
        if self.plain_tokens_per_s:
            return self.plain_tokens_per_s
        estimate = self.stats.plain_tokens_per_s_est if self.stats is not None else None
        return estimate if estimate is not None and estimate > 0 else None

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
        x = 2.0
        rates = windowed_rates(self.points)
        if rates:
            width = 110.0 if self.is_compact else 180.0
            self._draw_sparkline(painter, QRectF(x, 3, width, h - 6), rates, colors, muted)
            x += width + 12
        big = QFont(self.font())
        big.setBold(True)
        if not self.is_compact:
            big.setPointSizeF(big.pointSizeF() * 1.25)
        tps = self.tokens_per_s()
        x = self._draw_figure(painter, x, f"{tps:.1f}" if tps > 0 else DASH, "tok/s", big, text_color, muted)
        if stats.is_speculative:
            drafted = stats.n_drafted
            acceptance = stats.acceptance_rate if drafted else None
            x = self._draw_gauge(painter, x + 6, acceptance, colors.speculative_line, muted, text_color) + 8
            mean = stats.mean_accepted_length
            x = self._draw_figure(
                painter, x, f"{mean:.2f}" if drafted else DASH, "per draft", big, text_color, muted
            )
            speedup, is_estimate = self.speedup()
            label = DASH if speedup is None else (f"≈{speedup:.1f}×" if is_estimate else f"{speedup:.2f}×")
            x = self._draw_figure(
                painter,
                x,
                label,
                "vs plain (est.)" if is_estimate else "vs plain",
                big,
                colors.speculative_line if speedup and speedup >= 1.0 else text_color,
                muted,
            )
        else:
            self._draw_figure(painter, x, "plain", "no speculation", self.font(), muted, muted)
        painter.end()

    def _draw_figure(
        self, painter: QPainter, x: float, value: str, caption: str, font: QFont, color: QColor, muted: QColor
    ) -> float:
        """A number over its caption; returns the x after it."""
        painter.setFont(font)
        value_metrics = painter.fontMetrics()
        painter.setPen(color)
        top = 3 + value_metrics.ascent()
        painter.drawText(QPointF(x, top), value)
        painter.setFont(self.font())
        caption_metrics = painter.fontMetrics()
        painter.setPen(muted)
        painter.drawText(QPointF(x, top + caption_metrics.height()), caption)
        return (
            x + max(value_metrics.horizontalAdvance(value), caption_metrics.horizontalAdvance(caption)) + 14
        )

    def _draw_gauge(
        self, painter: QPainter, x: float, fraction: float | None, color: QColor, muted: QColor, text: QColor
    ) -> float:
        """An arc from 0 to 100 % of drafted tokens accepted; returns the x after it. The arc is
        drawn once per whole percent into a cached pixmap (an antialiased arc costs ~2 ms)."""
        size = min(self.height() - 8.0, 40.0)
        percent = None if fraction is None else round(100 * max(0.0, min(1.0, fraction)))
        ratio = self.devicePixelRatioF()
        key = (percent, size, ratio, color.rgba(), muted.rgba(), text.rgba(), self.font().key())
        pixmap = _gauge_cache.get(key)
        if pixmap is None:
            pixmap = QPixmap(int(size * ratio) + 2, int(size * ratio) + 2)
            pixmap.setDevicePixelRatio(ratio)
            pixmap.fill(Qt.GlobalColor.transparent)
            arc_painter = QPainter(pixmap)
            arc_painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            self._draw_arc(arc_painter, size, None if percent is None else percent / 100, color, muted, text)
            arc_painter.end()
            if len(_gauge_cache) > 512:
                _gauge_cache.clear()
            _gauge_cache[key] = pixmap
        painter.drawPixmap(QPointF(x, 4), pixmap)
        caption = "accepted" if size >= 30 else f"{DASH if percent is None else f'{percent}%'} accepted"
        painter.setFont(self.font())
        painter.setPen(muted)
        metrics = painter.fontMetrics()
        caption_x = x + size + 4
        painter.drawText(QPointF(caption_x, 3 + metrics.ascent() + metrics.height() * 0.5), caption)
        return caption_x + metrics.horizontalAdvance(caption) + 6

    def _draw_arc(
        self,
        painter: QPainter,
        size: float,
        fraction: float | None,
        color: QColor,
        muted: QColor,
        text: QColor,
    ) -> None:
        rect = QRectF(0, 0, size, size)
        pen_width = max(3.0, size / 9)
        inner = rect.adjusted(pen_width / 2, pen_width / 2, -pen_width / 2, -pen_width / 2)
        painter.setPen(QPen(QColor(muted.red(), muted.green(), muted.blue(), 70), pen_width))
        painter.drawArc(inner, 225 * 16, -270 * 16)
        if fraction is not None:
            pen = QPen(color, pen_width)
            pen.setCapStyle(Qt.PenCapStyle.RoundCap)
            painter.setPen(pen)
            painter.drawArc(inner, 225 * 16, -int(270 * 16 * max(0.0, min(1.0, fraction))))
        if size >= 30:  # the share inside the arc; beside it when the arc is small
            small = QFont(self.font())
            small.setPointSizeF(max(6.0, small.pointSizeF() * 0.8))
            painter.setFont(small)
            painter.setPen(text)
            painter.drawText(
                rect, Qt.AlignmentFlag.AlignCenter, DASH if fraction is None else f"{fraction:.0%}"
            )

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
            y = rect.bottom() - rect.height() * reference / top_rate
            pen = QPen(colors.plain_line, 1.2, Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.drawLine(QPointF(rect.left(), y), QPointF(rect.right(), y))
            small = QFont(self.font())
            small.setPointSizeF(max(6.0, small.pointSizeF() * 0.75))
            painter.setFont(small)
            painter.setPen(colors.plain_line)
            label = "plain"
            label_y = (
                y - 2
                if y - 2 - painter.fontMetrics().ascent() > rect.top()
                else y + painter.fontMetrics().ascent()
            )
            painter.drawText(QPointF(rect.left() + 2, label_y), label)  # left: the line grows rightwards
            painter.setFont(self.font())
