"""An attached document as a value: what a message keeps of a file (its text as read, its kind),
shared by the reader (app/library/documents.py), the store (app/store.py keeps it with its
message), the command line and the window. No reading here, and no imports of a room: the store
sits below the rooms and keeps this without importing the reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DocumentKind(StrEnum):
    TEXT = "text"  # plain text or Markdown
    CODE = "code"  # source code (a language known from the file name)
    PDF = "pdf"
    DOCX = "docx"


@dataclass(frozen=True)
class Document:
    """An attached document as read: the text is the copy that stands (saved with its message),
    whatever happens to the file later."""

    name: str  # the file's name, as shown and as the model sees it
    text: str
    kind: DocumentKind
    n_bytes: int  # the file's size when read
    encoding: str = ""  # of a text file: utf-8, utf-16, cp1252 or latin-1
    language: str = ""  # of source code: the fence's language
