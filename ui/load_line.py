"""The status bar's loading line: what the engine is loading and how far it got (llama.cpp reports
a fraction; until it does, or where it cannot, the bar is busy). Shown while a model loads, hidden
once it has loaded, failed or died."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar


class LoadLine:
    """The stage in words and its progress bar, added to the status bar's left."""

    def __init__(self, status: QStatusBar) -> None:
        self.label = QLabel()
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)  # busy until llama.cpp reports a fraction
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(14)
        status.addWidget(self.label)
        status.addWidget(self.progress)
        self.set_stage(None)

    def set_stage(self, stage: str | None) -> None:
        """The stage shown (None: nothing is loading, the line hidden)."""
        self.label.setText(stage or "")
        self.label.setVisible(stage is not None)
        self.progress.setVisible(stage is not None)

    def on_controller_load_progressed(self, stage: str, fraction: float) -> None:
        """A load's stage, and how far it got (fraction < 0: not known, the bar busy)."""
        self.set_stage(stage)
        if fraction < 0:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 100)
            self.progress.setValue(round(fraction * 100))
