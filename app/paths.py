"""Where Tandem keeps its files. TANDEM_HOME moves all of them (tests and users can isolate it)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP_NAME = "Tandem"


def home() -> Path:
    env = os.environ.get("TANDEM_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    path.mkdir(parents=True, exist_ok=True)
    return path


def database_path() -> Path:
    return home() / "tandem.db"


def settings_path() -> Path:
    return home() / "settings.json"


def models_dir() -> Path:
    path = home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def cost_cache_dir() -> Path:
    """Step costs and acceptance measured on this machine (engine.costcache), kept between runs."""
    return home() / "costs"


def logs_dir() -> Path:
    path = home() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resources_dir() -> Path:
    """resources/ beside the packages (source tree, editable install, or PyInstaller bundle)."""
    import sys

    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"
