"""The models page: one scrolling column of its parts (the pair picker, the catalog and its
downloads, the pair doctor, the models on this computer and their import), each a module of
ui/models/; the page scans the models folder and hands what it found to each part."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app import paths
from app.library.catalog import (
    Catalog,
    LocalModel,
    MachineInfo,
    detect_machine,
    load_catalog,
    local_model,
    scan_local_models,
)
from ui.models.catalog_section import CatalogSection, IncompatiblePairs
from ui.models.download_jobs import DownloadJobs
from ui.models.local_models import LocalModelsBox, ModelImports, dropped_files
from ui.models.model_downloads import ModelDownloads
from ui.models.pair_doctor_panel import PairDoctorPanel
from ui.models.pair_picker import PairPicker
from ui.qt import theme
from ui.qt.page_scroll import scrolling_content
from ui.qt.widgets import label


class ModelsPage(QWidget):
    """The "Models" tab. Emits pair_chosen(target_path, DraftChoice)."""

    pair_chosen = Signal(str, object)  # relays the picker's, the catalog's and the doctor's: one for three

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        catalog: Catalog | None = None,
        models_dir: Path | None = None,
        machine: MachineInfo | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("modelsPage")
        self.setAcceptDrops(True)
        self.catalog = catalog or load_catalog()
        self.models_dir = models_dir or paths.models_dir()
        self.machine = machine or detect_machine()
        self.local_models: list[LocalModel] = []
        self.model_in_use: Path | None = None  # the engine's target, listed wherever it lives

        self.picker = PairPicker(self.models_dir)
        self.picker.pair_chosen.connect(self.pair_chosen)
        self.catalog_section = CatalogSection(self.catalog, self.machine, self.models_dir)
        self.catalog_section.pair_chosen.connect(self.pair_chosen)
        self.downloads = DownloadJobs(self.models_dir)
        self.download_view = ModelDownloads(self.downloads, self.models_dir, self)
        for card in self.catalog_section.cards.values():
            self.download_view.add_card(card)
        self.download_view.files_arrived.connect(self.refresh_local_models)
        self.doctor = PairDoctorPanel(self.downloads, self.models_dir)
        self.doctor.pair_chosen.connect(self.pair_chosen)
        self.doctor.measured_here.connect(self.catalog_section.show_measured_here)
        self.local_box = LocalModelsBox(self.models_dir)
        self.imports = ModelImports(self.models_dir, self)
        self.imports.message.connect(self.show_message)
        self.imports.imported.connect(self.refresh_local_models)
        self.local_box.import_button.clicked.connect(lambda: self.imports.ask_and_import(self))
        self.local_box.refresh_button.clicked.connect(lambda: self.refresh_local_models())
        self.incompatible = IncompatiblePairs(self.catalog)
        self.message_label = label(name="modelsMessage")

        # One scrolling column: what you chat with now, the pairs to choose from, the pairs that
        # do not work (folded), your own files, and any file from the hub.
        scroll, content = scrolling_content(self, "modelsScroll", "modelsContent")
        self.scroll_area = scroll
        layout = QVBoxLayout(content)
        layout.setSpacing(12)
        for part in (
            self.picker,
            self.catalog_section,
            self.incompatible,
            self.doctor,
            self.local_box,
            self.message_label,
        ):
            layout.addWidget(part)
        layout.addStretch(1)
        # One hub section: a file by its repository and name sits under the hub's search.
        self.download_view.custom_box.setTitle("Or a GGUF file by its repository and name")
        doctor_layout = self.doctor.layout()
        if doctor_layout is not None:
            doctor_layout.addWidget(self.download_view.custom_box)
        self.refresh_local_models()
        self.catalog_section.show_fit_and_recommendation()

    # --- the models here ---------------------------------------------------------------------------

    def set_model_in_use(self, path: str | None) -> None:
        """The engine's target (the built-in model, or one opened with --model): listed among the
        local models wherever it lives, and chosen under "Chat with"."""
        self.model_in_use = Path(path).resolve() if path else None
        self.refresh_local_models(select=self.model_in_use)

    def refresh_local_models(self, select: Path | None = None) -> None:
        from app.library.file_identity import same_file

        self.local_models = scan_local_models(self.models_dir)
        in_use = self.model_in_use
        if (
            in_use is not None
            and in_use.is_file()
            and not any(same_file(m.path, in_use) for m in self.local_models)  # a copy here is it
        ):
            self.local_models.insert(0, local_model(in_use))
        self.local_box.show_models(self.local_models, in_use)
        self.picker.set_models(self.local_models, in_use, select if isinstance(select, Path) else None)
        self.catalog_section.show_card_states(in_use)

    # --- the pair doctor ---------------------------------------------------------------------------

    def open_link(self, url: str) -> None:
        """A tandem://open_from_hf?model=OWNER/REPO&file=FILE link: show the pair doctor checking it."""
        self.scroll_area.ensureWidgetVisible(self.doctor)
        self.doctor.open_check(url)

    # --- the page ----------------------------------------------------------------------------------

    def show_message(self, text: str, is_error: bool = False) -> None:
        self.message_label.setText(text)
        theme.set_tone(self.message_label, "error" if is_error else "")

    def event(self, event: QEvent) -> bool:
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self.catalog_section.restyle()
            self.doctor.restyle()
        return super().event(event)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt's name
        if dropped_files(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt's name
        files = dropped_files(event.mimeData())
        if files:
            event.acceptProposedAction()
            self.imports.import_files(files)
