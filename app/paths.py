"""Where Tandem keeps its files. TANDEM_HOME moves all of them (tests and users can isolate it)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import platformdirs

from engine.user_path import user_path as user_path  # a path a user wrote, ~ expanded

APP_NAME = "Tandem"


def private_dir(path: Path) -> Path:
    """A folder of Tandem's that only the user can open (0700): created so, or tightened (it holds
    conversations, documents' text and logs). A folder Tandem cannot change is left as it is."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except OSError:
        pass
    return path


def write_private_text(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600: settings hold API keys, an exported conversation
    what was said), whole or not at all (a temporary file, then an atomic rename)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # A .tmp left by an older version may have had wider permissions. (Windows has no POSIX
    # modes; the user's profile folder is private already.)
    with contextlib.suppress(AttributeError, OSError):
        os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def home() -> Path:
    env = os.environ.get("TANDEM_HOME")
    path = user_path(env) if env else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    return private_dir(path)


def database_path() -> Path:
    return home() / "tandem.db"


def settings_path() -> Path:
    return home() / "settings.json"


def models_dir() -> Path:
    return private_dir(home() / "models")


def cost_cache_dir() -> Path:
    """Step costs and acceptance measured on this machine (engine.costcache), kept between runs."""
    return home() / "costs"


def logs_dir() -> Path:
    return private_dir(home() / "logs")


def resources_dir() -> Path:
    """resources/ beside the packages (source tree, editable install, or PyInstaller bundle)."""
    import sys

    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        return Path(bundle) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"
