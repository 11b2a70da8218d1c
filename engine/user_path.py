"""A path a user wrote (a model file, a document, a prompt file, TANDEM_HOME): one expansion of ~
for all of Tandem (app.paths passes it on), which never raises."""

from __future__ import annotations

import os
from pathlib import Path


def user_path(text: str | os.PathLike[str]) -> Path:
    """The path with a leading ~ or ~name expanded; as written where that home is unknown ("~0",
    "~nobody-here"), for which Path.expanduser raises RuntimeError."""
    path = Path(text)
    try:
        return path.expanduser()
    except RuntimeError:
        return path
