"""Settings: the engine's (threads, context, GPU layers, draft length) and the sampler's."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.settings import Settings
from engine.config import default_threads

# Changing one of these needs the engine reloaded; sampling settings apply from the next reply.
ENGINE_FIELDS = ("n_threads", "n_ctx", "n_gpu_layers", "draft_max", "adaptive")


class SettingsDialog(QDialog):
    def __init__(
        self, settings: Settings, gpu_offload_supported: bool, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings — Tandem")
        self._settings = settings
        layout = QVBoxLayout(self)
        form = QFormLayout()

        self.threads = QSpinBox()
        self.threads.setRange(0, 256)
        self.threads.setSpecialValueText(f"automatic ({default_threads()})")
        self.threads.setValue(settings.n_threads or 0)
        form.addRow("Threads:", self.threads)

        self.context = QSpinBox()
        self.context.setRange(512, 262144)
        self.context.setSingleStep(512)
        self.context.setSuffix(" tokens")
        self.context.setValue(settings.n_ctx)
        form.addRow("Context size:", self.context)

        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(0, 999)
        self.gpu_layers.setValue(settings.n_gpu_layers)
        self.gpu_layers.setEnabled(gpu_offload_supported)
        if not gpu_offload_supported:
            self.gpu_layers.setToolTip("This build of llama.cpp runs on the CPU only (no GPU offload).")
        form.addRow("GPU layers:", self.gpu_layers)
        if not gpu_offload_supported:
            note = QLabel("This llama.cpp build has no GPU offload; the model runs on the CPU.")
            note.setWordWrap(True)
            form.addRow("", note)

        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(settings.temperature)
        self.temperature.setToolTip("0 is greedy: the same prompt gives the same reply")
        form.addRow("Temperature:", self.temperature)

        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setValue(settings.top_k)
        form.addRow("Top-k:", self.top_k)

        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.0, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(settings.top_p)
        form.addRow("Top-p:", self.top_p)

        self.min_p = QDoubleSpinBox()
        self.min_p.setRange(0.0, 1.0)
        self.min_p.setSingleStep(0.01)
        self.min_p.setValue(settings.min_p)
        form.addRow("Min-p:", self.min_p)

        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(16, 32768)
        self.max_tokens.setValue(settings.max_tokens)
        form.addRow("Longest reply:", self.max_tokens)

        self.adaptive = QCheckBox("Adaptive draft length")
        self.adaptive.setChecked(settings.adaptive)
        self.adaptive.setToolTip("Let the engine choose each draft's length from recent acceptance")
        form.addRow("", self.adaptive)

        self.draft_max = QSpinBox()
        self.draft_max.setRange(1, 64)
        self.draft_max.setValue(settings.draft_max)
        form.addRow("Draft length (longest if adaptive):", self.draft_max)

        layout.addLayout(form)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    def result_settings(self) -> Settings:
        return self._settings.replace(
            n_threads=self.threads.value() or None,
            n_ctx=self.context.value(),
            n_gpu_layers=self.gpu_layers.value(),
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            max_tokens=self.max_tokens.value(),
            adaptive=self.adaptive.isChecked(),
            draft_max=self.draft_max.value(),
        )


def needs_reload(before: Settings, after: Settings) -> bool:
    return any(getattr(before, f) != getattr(after, f) for f in ENGINE_FIELDS)
