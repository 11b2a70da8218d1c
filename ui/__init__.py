"""Tandem's widgets. They know the engine only through the messages the worker sends."""

from ui.qt.pyside_refcount_fix import immortalize_singletons

# Before any widget is made: PySide6 6.12 on Python 3.11 leaks references to None/True/False.
immortalize_singletons()
