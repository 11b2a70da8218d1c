"""Compare: the same request the usual way, then with the speed-up, side by side.

The two runs go one after the other (the worker serves one request at a time): run side by side
they would share the CPU and both numbers would be wrong. The result is one headline ("71 s
instead of 168 s: 2.4× faster", whole requests), a check that the texts are the same (greedy) or
a note that sampled texts differ by design, and a chart of tokens written over time; the
highlight's legend says the tinted text is the model's own, not a difference.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QPainter, QPainterPath, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.host.reply import Reply, ReplyProgress
from app.settings import SpeedUp
from engine.events import ReplyText, Stats
from ui.chat.markdown_view import MessageBody
from ui.presenters import verdict, words
from ui.presenters.compare_presenter import ComparePresenter
from ui.presenters.stats_format import DASH
from ui.qt import theme
from ui.qt.page_scroll import scrolling_content
from ui.qt.widgets import button, flush, label, named


class TokensChart(QWidget):
    """Tokens written over time for two runs, drawn with QPainter, on the headline's clock.

    Both runs are drawn from the same start: the prompt read once from scratch (the longer of the
    two readings: the second run finds it already read, as words.compare_seconds counts it), then
    each run's writing. So where the lines end is what the headline and the panes say."""

    def __init__(self, comparison: ComparePresenter, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.comparison = comparison  # its runs' figures as they came (ComparePresenter.stats)
        self.setMinimumHeight(140)
        self.setAccessibleName("Tokens written over time")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def points(self, name: str) -> list[tuple[float, int]]:
        """(seconds since the request began, on the headline's clock, tokens written)."""
        runs = self.comparison.stats
        if not runs.get(name):
            return []
        reading = max((s.prefill_s for run in runs.values() for s in run), default=0.0)
        return [(0.0, 0), (reading, 0), *((reading + s.decode_s, s.n_generated) for s in runs[name])]

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        metrics = painter.fontMetrics()
        left, bottom, top, right = metrics.horizontalAdvance("0000") + 8, metrics.height() + 6, 8, 8
        plot = QRectF(left, top, max(10, self.width() - left - right), max(10, self.height() - top - bottom))
        painter.setPen(QPen(self.palette().mid().color()))
        painter.drawRect(plot)
        all_points = [p for name in ("plain", "speculative") for p in self.points(name)]
        max_t = max((t for t, _ in all_points), default=0.0) or 1.0
        max_n = max((n for _, n in all_points), default=0) or 1
        painter.setPen(self.palette().text().color())
        painter.drawText(QPointF(2, top + metrics.ascent()), str(max_n))
        painter.drawText(QPointF(2, plot.bottom()), "0")
        painter.drawText(QPointF(plot.left(), self.height() - 2), "0 s")
        label = f"{max_t:.1f} s"
        painter.drawText(QPointF(plot.right() - metrics.horizontalAdvance(label), self.height() - 2), label)
        painter.drawText(
            QPointF(plot.left() + 6, plot.top() + metrics.ascent() + 2), "tokens written over time"
        )
        colors = theme.colors()
        lines = (("plain", colors.plain_line), ("speculative", colors.speculative_line))
        names = {"plain": "the usual way", "speculative": "with the speed-up"}
        for name, color in lines:
            points = self.points(name)
            if not points:
                continue
            path = QPainterPath(QPointF(plot.left(), plot.bottom()))
            for t, n in points[1:]:
                path.lineTo(plot.left() + plot.width() * t / max_t, plot.bottom() - plot.height() * n / max_n)
            painter.setPen(QPen(color, 2))
            painter.drawPath(path)
        legend_y = plot.top() + 2 * metrics.height() + 4
        for i, (name, color) in enumerate(lines):
            y = legend_y + i * metrics.height()
            painter.setPen(QPen(color, 3))
            painter.drawLine(
                QPointF(plot.left() + 8, y - metrics.ascent() / 3),
                QPointF(plot.left() + 24, y - metrics.ascent() / 3),
            )
            painter.setPen(self.palette().text().color())
            painter.drawText(QPointF(plot.left() + 30, y), names[name])
        painter.end()


class _RunPane(QGroupBox):
    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(title, parent)
        layout = QVBoxLayout(self)
        self.body = MessageBody(grows_with_content=False)
        self.body.setMinimumHeight(120)
        self.stats = label(DASH)
        layout.addWidget(self.body, 1)
        layout.addWidget(self.stats)

    @property
    def text(self) -> str:
        """The run's text so far, exactly as generated (its body's)."""
        return self.body.source_text()

    def reset(self) -> None:
        self.body.set_content(ReplyText(""), True)
        self.stats.setText(DASH)

    def show_stats(self, stats: Stats) -> None:
        """How long this run took, in words (the figures are the summary's details)."""
        self.stats.setText(f"{stats.n_generated} tokens in {verdict.seconds(stats.total_s)}")


class CompareView(QWidget):
    compare_requested = Signal(str)
    stop_requested = Signal()

    def __init__(self, comparison: ComparePresenter, parent: QWidget | None = None) -> None:
        """comparison: the runs' presenter (the window connects its signals to start, on_progress,
        on_finished and on_failed); whether they sample and the task's preset are read from it."""
        super().__init__(parent)
        self.comparison = comparison
        # In a scroll area: the page needs about 590 px, and as the window's own minimum it made
        # the window 722 px tall at least, taller than a laptop's 768-px screen leaves room for.
        _, content = scrolling_content(self, "compareScroll")
        layout = QVBoxLayout(content)
        intro = label(
            "Runs your request twice, the usual way and then with the speed-up, one after the other "
            "(so they do not share the computer), and shows both replies and the time each took."
        )
        layout.addWidget(intro)
        tasks = QHBoxLayout()
        tasks_label = QLabel("Try a task where it pays:")
        tasks.addWidget(tasks_label)
        self.task_combo = named(QComboBox(), "compareTasks", "A task to compare")
        self.task_combo.addItem("Choose…", "")
        for name, prompt in words.DEMO_TASKS:
            self.task_combo.addItem(name, prompt)
        self.task_combo.activated.connect(self.on_task_combo_activated)
        tasks_label.setBuddy(self.task_combo)
        tasks.addWidget(self.task_combo)
        tasks.addStretch(1)
        layout.addLayout(tasks)
        row = QHBoxLayout()
        self.prompt = named(QPlainTextEdit(placeholderText="Prompt to compare"), "", "Prompt to compare")
        self.prompt.setTabChangesFocus(True)
        self.prompt.setMaximumHeight(self.fontMetrics().lineSpacing() * 5 + 12)
        row.addWidget(self.prompt, 1)
        buttons = QVBoxLayout()
        self.run_button = button("Compare", clicked=self.on_run_button_clicked)
        self.stop_button = button("Stop", clicked=self.stop_requested)
        self.stop_button.setEnabled(False)
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        row.addLayout(buttons)
        layout.addLayout(row)
        self.availability = label()
        layout.addWidget(self.availability)
        panes = QGridLayout()
        self.plain = _RunPane("The usual way")
        self.speculative = _RunPane("With the speed-up")
        panes.addWidget(self.plain, 0, 0)
        panes.addWidget(self.speculative, 0, 1)
        layout.addLayout(panes, 1)
        self.summary = named(QLabel(DASH), "summary", "Compare result")
        font = self.summary.font()
        font.setBold(True)
        font.setPointSizeF(font.pointSizeF() * 1.5)
        self.summary.setFont(font)
        layout.addWidget(self.summary)
        # Where the computer's own speed changed between the two runs: said, with another try.
        self.unfair = named(QWidget(), "compareUnfair")
        unfair = flush(QHBoxLayout(self.unfair))
        self.unfair_label = label(words.UNFAIR_COMPARE, "unfairNote")
        unfair.addWidget(self.unfair_label, 1)
        again = "Run the comparison again"
        self.again_button = button("Run again", "", self.on_run_button_clicked, accessible=again)
        unfair.addWidget(self.again_button, 0, Qt.AlignmentFlag.AlignTop)
        self.unfair.setVisible(False)
        layout.addWidget(self.unfair)
        self.check = label("", "sameText")  # the same text, or why not
        self.details = label("", "compareDetails")  # the figures behind the headline, once
        self.legend = label(words.LEGEND, "compareLegend")
        for line in (self.check, self.details, self.legend):
            layout.addWidget(line)
        self.chart = TokensChart(comparison)
        layout.addWidget(self.chart)
        self.final_stats: dict[str, Stats] = {}
        self._is_busy = False
        self._was_stopped = False  # a run of this Compare ended cut short: nothing is compared
        self._can_speculate = True
        self._tint = True  # the drafted stretches tinted (View ▸ Highlight): set_tint

    def restyle(self) -> None:
        """The theme changed: both replies and the chart in its colours."""
        self.plain.body.restyle()
        self.speculative.body.restyle()
        self.chart.update()

    def set_speculation(self, speculation: SpeedUp) -> None:
        self._can_speculate = speculation != SpeedUp.NONE
        name = words.choice_name(speculation)
        self.speculative.setTitle(f"With the speed-up: {name[:1].lower()}{name[1:]}")  # no (…(…))
        self.availability.setText(
            ""
            if self._can_speculate
            else "The speed-up is off: choose one in the chat's header to compare it with the usual way."
        )
        self._update_buttons()

    def set_tint(self, tint: bool) -> None:
        """The tint of the runs' drafted stretches from their next update."""
        self._tint = tint

    def set_busy(self, is_busy: bool) -> None:
        self._is_busy = is_busy
        self._update_buttons()

    def _update_buttons(self) -> None:
        self.run_button.setEnabled(self._can_speculate and not self._is_busy)
        self.again_button.setEnabled(self.run_button.isEnabled())
        self.stop_button.setEnabled(self._is_busy and bool(self.comparison.runs))

    def start(self) -> None:
        self.final_stats = {}
        self._was_stopped = False
        self.plain.reset()
        self.speculative.reset()
        self.chart.update()
        self.summary.setText("Writing the usual way first…")
        self.unfair.setVisible(False)
        self.check.setText("")
        self.details.setText("")
        self._update_buttons()

    def pane(self, name: str) -> _RunPane:
        """A run's pane, by the run's name ("plain" or "speculative")."""
        return self.plain if name == "plain" else self.speculative

    def on_progress(self, name: str, progress: ReplyProgress) -> None:
        pane = self.pane(name)
        if len(progress.reply) != progress.start:  # the reply so far; only its new text is laid out
            pane.body.stream(progress.reply.raw(), self._tint)
        if progress.stats:
            pane.show_stats(progress.stats[-1])
            self.chart.update()

    def on_finished(self, name: str, reply: Reply) -> None:
        assert reply.finished is not None  # (the presenter emits a run once it has finished)
        pane, stats = self.pane(name), reply.finished.stats
        pane.body.finish(reply.raw(), self._tint)  # the final text (stop strings trimmed), rendered once
        pane.show_stats(stats)
        self.chart.update()
        self.final_stats[name] = stats
        self._was_stopped |= reply.finished.stop_reason == "cancelled"
        self._show_summary()
        if not self.comparison.runs:  # both ended
            self._update_buttons()

    def on_failed(self, name: str, sentence: str) -> None:
        self.pane(name).stats.setText(sentence)
        if not self.comparison.runs:
            self._update_buttons()

    def _show_summary(self) -> None:
        plain, spec = self.final_stats.get("plain"), self.final_stats.get("speculative")
        if plain is None or spec is None:
            self.summary.setText("Now with the speed-up…")
            return
        if self._was_stopped:  # each pane keeps its own run's figures; no ratio, no text check
            self.summary.setText(words.COMPARE_STOPPED)
            return
        # A run that drafted nothing, stalled, or ran while the computer's speed changed does not
        # measure the speed-up: said so, with Run again, and no "N× slower" (the welcome's See it
        # showed "3.6× slower" for a run that drafted nothing while the computer stalled).
        problem = self.comparison.problem  # (ui/presenters/compare_presenter.py judged the runs)
        self.summary.setText(words.compare_headline(plain, spec, is_measure=not problem) or DASH)
        self.unfair_label.setText(problem)
        self.unfair.setVisible(bool(problem))
        # The two times are the headline's ("0.5 s instead of 0.7 s"): each pane keeps its count.
        self.plain.stats.setText(f"{plain.n_generated} tokens")
        self.speculative.stats.setText(f"{spec.n_generated} tokens")
        runs = self.comparison
        is_same, said = words.same_text_words(self.plain.text, self.speculative.text, runs.is_greedy)
        if runs.task_preset is not None:
            said += " " + words.task_preset_words(runs.task_preset)
        self.check.setText(said)
        parts = [
            f"usual way {plain.decode_tokens_per_s:.1f} tokens/s",
            f"with the speed-up {spec.decode_tokens_per_s:.1f} tokens/s",
        ]
        if spec.n_drafted:
            parts.append(f"{spec.acceptance_rate:.0%} of its guesses confirmed")
        self.details.setText(" · ".join(parts))

    def on_task_combo_activated(self, index: int) -> None:
        prompt = self.task_combo.itemData(index)
        if prompt:
            self.prompt.setPlainText(prompt)

    def show_demo(self) -> None:
        """The welcome's demo: the first task, run at once when the engine is free."""
        self.task_combo.setCurrentIndex(1)
        self.on_task_combo_activated(1)
        if self.run_button.isEnabled():
            self.on_run_button_clicked()

    def on_run_button_clicked(self) -> None:
        text = self.prompt.toPlainText().strip()
        self.availability.setText("" if text else words.COMPARE_NO_PROMPT)
        if text:
            self.compare_requested.emit(text)
