"""Qt underneath every page: the theme (light and dark), layouts, and workarounds for Qt and PySide6 behaviour."""
