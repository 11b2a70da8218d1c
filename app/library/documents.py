"""Documents a person attaches to a chat message: read once, kept as text, sent as message text.

One reader for the command line (`tandem generate --chat --attach FILE`) and the window (its
attachment chips): plain text, Markdown and source code (UTF-8, UTF-16 with a byte order mark,
else Windows-1252 / Latin-1), PDF text (pypdf) and Word .docx (python-docx). What a model sees is
the message text `with_documents` writes: each document fenced under its name, then what the
person asked. `tandem serve` needs nothing of this: an API client sends documents as text.

Reading is bounded: a file's size is checked before it is opened and at most the limit (plus one
byte) is read, so a 1 GB file, /dev/zero or a file growing meanwhile cost no time and no memory;
a PDF or .docx by what it unpacks to as well (app/library/unpacked.py), and its text by the text limit.
Every refusal is a DocumentError with a DocumentProblem (the window words it from that) and one
sentence for the command line.

No Qt, no engine: counting tokens and fitting the context are the caller's (the engine's tokenizer).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import re
import stat
import zipfile
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.document import Document, DocumentKind
from app.library.catalog import available_ram_bytes
from app.paths import user_path
from engine.errors import ContextFit, ErrorKind, TandemError

if TYPE_CHECKING:
    from engine.gguf_info import GGUFInfo

# A text file this large is about a million tokens: more than any context Tandem opens.
MAX_TEXT_BYTES = 4 * 1024 * 1024
# PDF and .docx files carry pictures and fonts besides their text.
MAX_PACKED_BYTES = 64 * 1024 * 1024
# The start of a file that decides whether it is text: NUL bytes or many control characters there.
SNIFF_BYTES = 64 * 1024
MAX_CONTROL_SHARE = 0.01

CODE_LANGUAGES = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
    ".tsx": "tsx", ".jsx": "jsx", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp",
    ".rs": "rust", ".go": "go", ".java": "java", ".kt": "kotlin", ".rb": "ruby", ".php": "php",
    ".cs": "csharp", ".swift": "swift", ".sh": "bash", ".bash": "bash", ".zsh": "bash",
    ".sql": "sql", ".html": "html", ".htm": "html", ".css": "css", ".xml": "xml", ".json": "json",
    ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".ini": "ini", ".cfg": "ini", ".lua": "lua",
    ".r": "r", ".m": "matlab", ".scala": "scala", ".pl": "perl", ".hs": "haskell", ".el": "elisp",
    ".mk": "make", ".cmake": "cmake", ".dockerfile": "dockerfile", ".tex": "latex", ".csv": "csv",
}  # fmt: skip


class DocumentProblem(StrEnum):
    """Why a file cannot be attached, as data: the window words it, the command line prints str()."""

    MISSING = "missing"
    NOT_A_FILE = "not_a_file"  # a folder, a device, a pipe
    UNREADABLE = "unreadable"  # permissions, an I/O error
    TOO_LARGE = "too_large"  # more bytes than the reader takes
    BINARY = "binary"  # not text, and not a PDF or .docx
    EMPTY = "empty"  # no text in it
    SCANNED_PDF = "scanned_pdf"  # a PDF without a text layer
    ENCRYPTED_PDF = "encrypted_pdf"
    DAMAGED = "damaged"  # a PDF or .docx that cannot be read
    TOO_MANY_TOKENS = "too_many_tokens"  # more tokens than the whole context


# What is said of a problem that is always said alike.
_SAID = {
    DocumentProblem.MISSING: "there is no such file",
    DocumentProblem.BINARY: "it is a binary file, not text (Tandem reads text, Markdown, source code, PDF and .docx)",
    DocumentProblem.EMPTY: "it has no text",
    DocumentProblem.SCANNED_PDF: (
        "the PDF has no text layer (a scan or pictures only); run it through text recognition (OCR) first"
    ),
    DocumentProblem.ENCRYPTED_PDF: "the PDF is encrypted with a password; save an unlocked copy first",
}


class DocumentError(TandemError):
    kind = ErrorKind.DOCUMENT

    def __init__(self, problem: DocumentProblem, name: str, sentence: str = "") -> None:
        self.problem = problem
        self.name = name
        super().__init__(f"cannot attach {name}: {sentence or _SAID[problem]}")


def format_size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} bytes"
    unit, size = next((u, s) for u, s in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)) if n_bytes >= s)
    value = n_bytes / size
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def read_document(path: str | os.PathLike[str]) -> Document:
    """Read a file to attach; DocumentError (one sentence) for anything that is not a document."""
    path = user_path(path)
    name = path.name
    try:
        st = os.stat(path)
    except FileNotFoundError as e:
        raise DocumentError(DocumentProblem.MISSING, str(path)) from e
    except OSError as e:
        raise DocumentError(DocumentProblem.UNREADABLE, str(path), _os_reason(e)) from e
    if stat.S_ISDIR(st.st_mode):
        raise DocumentError(DocumentProblem.NOT_A_FILE, name, "it is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise DocumentError(DocumentProblem.NOT_A_FILE, name, "it is not a regular file")
    suffix = path.suffix.lower()
    limit = MAX_PACKED_BYTES if suffix in (".pdf", ".docx") else MAX_TEXT_BYTES
    if st.st_size > limit:
        raise _too_large(name, st.st_size, limit)
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)  # bounded: a file that grew since stat() is caught below
    except OSError as e:
        raise DocumentError(DocumentProblem.UNREADABLE, name, _os_reason(e)) from e
    if len(data) > limit:
        raise _too_large(name, len(data), limit)
    return read_bytes(data, name)


def read_bytes(data: bytes, name: str) -> Document:
    """A document from a file's bytes (a dropped file, pasted text): the kind from its content
    first (PDF and .docx by their signatures), then from its name."""
    suffix = Path(name).suffix.lower()
    if data.startswith(b"%PDF-") or (suffix == ".pdf" and b"\x00" in data[:SNIFF_BYTES]):
        from app.library.unpacked import pdf_limits

        with pdf_limits():  # no stream inflated past its bound
            return _read_pdf(data, name)
    if data.startswith(b"PK\x03\x04") and (suffix == ".docx" or _is_docx(data)):
        return _read_docx(data, name)
    if suffix == ".doc" and data.startswith(b"\xd0\xcf\x11\xe0"):
        raise DocumentError(
            DocumentProblem.BINARY, name, "it is an old Word .doc file; save it as .docx or text first"
        )
    text, encoding = decode_text(data, name)
    language = CODE_LANGUAGES.get(suffix, "")
    if Path(name).name.lower() in ("makefile", "dockerfile"):
        language = Path(name).name.lower().replace("makefile", "make")
    kind = DocumentKind.CODE if language else DocumentKind.TEXT
    return Document(name, text, kind, len(data), encoding, language)


def document_from_text(text: str, name: str) -> Document:
    """A document from text already in hand (a long paste offered as an attachment)."""
    if not text.strip():
        raise DocumentError(DocumentProblem.EMPTY, name)
    n_bytes = len(text.encode("utf-8", "surrogatepass"))
    if n_bytes > MAX_TEXT_BYTES:
        raise _too_large(name, n_bytes, MAX_TEXT_BYTES)
    return Document(name, _normalise(text), DocumentKind.TEXT, n_bytes, "utf-8")


def decode_text(data: bytes, name: str) -> tuple[str, str]:
    """The text of a text file and the encoding it was in. UTF-8 (with or without a BOM), UTF-16
    with a BOM, else Windows-1252 where every byte is defined there, else Latin-1 (which decodes
    anything: what decides "binary" is the NUL bytes and control characters of the result)."""
    text: str | None = None
    if data.startswith(b"\xef\xbb\xbf"):
        text, encoding = _decode(data[3:], "utf-8"), "utf-8"
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text, encoding = _decode(data, "utf-16"), "utf-16"
    else:
        if b"\x00" in data[:SNIFF_BYTES]:
            raise DocumentError(DocumentProblem.BINARY, name)
        for encoding in ("utf-8", "cp1252"):
            text = _decode(data, encoding)
            if text is not None:
                break
        else:
            text, encoding = data.decode("latin-1"), "latin-1"
    if text is None:
        raise DocumentError(DocumentProblem.BINARY, name)
    sample = text[:SNIFF_BYTES]
    n_control = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    if "\x00" in sample or n_control > MAX_CONTROL_SHARE * max(len(sample), 1):
        raise DocumentError(DocumentProblem.BINARY, name)
    text = _normalise(text)
    if not text.strip():
        raise DocumentError(DocumentProblem.EMPTY, name)
    return text, encoding


def _decode(data: bytes, encoding: str) -> str | None:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def _normalise(text: str) -> str:
    """Line ends as \n (a model and a diff see one kind), the byte order mark gone."""
    return text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return "word/document.xml" in z.namelist()
    except zipfile.BadZipFile:
        return False


def _read_pdf(data: bytes, name: str) -> Document:
    from pypdf import PdfReader
    from pypdf.errors import (
        DependencyError,
        FileNotDecryptedError,
        LimitReachedError,
        PyPdfError,
    )

    from app.library.unpacked import pdf_page_problem

    def page_text(page: Any) -> str:
        problem = pdf_page_problem(page)
        if problem is not None:
            raise DocumentError(DocumentProblem.TOO_LARGE, name, problem)
        return str(page.extract_text() or "")

    # pypdf logs what it repairs ("EOF marker not found"): the refusal below is the one sentence.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many PDFs are encrypted with an empty user password (only editing is locked): they open.
            try:
                opened = reader.decrypt("")
            except (DependencyError, NotImplementedError) as e:
                raise DocumentError(DocumentProblem.ENCRYPTED_PDF, name) from e
            if not opened:
                raise DocumentError(DocumentProblem.ENCRYPTED_PDF, name)
        pages = _held_to_text_limit((page_text(page) for page in reader.pages), name)
    except DocumentError:
        raise
    except (FileNotDecryptedError, DependencyError) as e:
        raise DocumentError(DocumentProblem.ENCRYPTED_PDF, name) from e
    except LimitReachedError as e:  # a decompression bomb: pypdf stops before memory runs out
        raise DocumentError(
            DocumentProblem.TOO_LARGE, name, "it unpacks to more data than Tandem reads from a PDF"
        ) from e
    except (
        PyPdfError,  # PdfReadError among them
        RecursionError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        OSError,
    ) as e:
        raise DocumentError(
            DocumentProblem.DAMAGED, name, "it is not a PDF that can be read (damaged or cut short)"
        ) from e
    text = _normalise("\n\n".join(p.strip("\n") for p in pages)).strip()
    if not text:
        raise DocumentError(DocumentProblem.SCANNED_PDF, name)
    return Document(name, text, DocumentKind.PDF, len(data))


def _read_docx(data: bytes, name: str) -> Document:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    from app.library.unpacked import zip_problem

    problem = zip_problem(data)  # from the zip's directory, before anything is inflated
    if problem is not None:
        raise DocumentError(DocumentProblem.TOO_LARGE, name, problem)
    try:
        document = docx.Document(io.BytesIO(data))
        parts = _held_to_text_limit((p.text for p in document.paragraphs), name)
        for table in document.tables:
            rows = (" | ".join(cell.text for cell in row.cells) for row in table.rows)
            parts += _held_to_text_limit(rows, name, sum(map(len, parts)))
    except DocumentError:
        raise
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as e:
        raise DocumentError(
            DocumentProblem.DAMAGED, name, "it is not a .docx file that can be read (damaged or cut short)"
        ) from e
    except Exception as e:  # lxml's XMLSyntaxError and the like: a damaged package
        raise DocumentError(DocumentProblem.DAMAGED, name, "it is not a .docx file that can be read") from e
    text = _normalise("\n".join(parts)).strip()
    if not text:
        raise DocumentError(DocumentProblem.EMPTY, name)
    return Document(name, text, DocumentKind.DOCX, len(data))


def _held_to_text_limit(pieces: Iterable[str], name: str, so_far: int = 0) -> list[str]:
    """The pieces of a document's text (pages, paragraphs) until they pass the text limit: then
    TOO_LARGE, without reading the rest (a packed document's text is held to a text file's)."""
    out = []
    for piece in pieces:
        so_far += len(piece)
        if so_far > MAX_TEXT_BYTES:
            raise DocumentError(
                DocumentProblem.TOO_LARGE,
                name,
                f"its text is more than {format_size(MAX_TEXT_BYTES)} (about a million tokens, more than any context)",
            )
        out.append(piece)
    return out


def _too_large(name: str, n_bytes: int, limit: int) -> DocumentError:
    return DocumentError(
        DocumentProblem.TOO_LARGE,
        name,
        f"it is {format_size(n_bytes)} and Tandem reads documents up to {format_size(limit)}"
        + (" (about a million tokens, more than any context)" if limit == MAX_TEXT_BYTES else ""),
    )


def _os_reason(e: OSError) -> str:
    if isinstance(e, PermissionError):
        return "permission denied"
    return f"it cannot be read ({e.strerror or type(e).__name__})"


# -- what the model sees --------------------------------------------------------------------------


def fence_for(text: str) -> str:
    """A Markdown fence longer than any run of backticks in the text."""
    longest = max(map(len, re.findall("`+", text)), default=0)
    return "`" * max(3, longest + 1)


def document_block(document: Document) -> str:
    """One document as message text: its name, then its text in a fence (source code with its
    language, so a reply that copies it opens the same fence and drafts from the first line)."""
    fence = fence_for(document.text)
    return f"{prompt_name(document.name)}:\n{fence}{document.language}\n{document.text}\n{fence}"


# Characters a file name cannot bring into the prompt: line breaks and other controls (a name on
# one line cannot open or close a fence, nor start a turn of its own), bidirectional overrides.
_NAME_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069`]")
MAX_PROMPT_NAME = 200  # characters of a file name the model is shown


def prompt_name(name: str) -> str:
    """A file name as the model is shown it: on one line, without backticks or control characters,
    at most MAX_PROMPT_NAME characters (its text is still tokenized as text: engine.chat)."""
    return " ".join(_NAME_CONTROLS.sub(" ", name).split())[:MAX_PROMPT_NAME] or "document"


def with_documents(message: str, documents: list[Document] | tuple[Document, ...]) -> str:
    """The user's message as the model sees it: the documents first, then what was asked."""
    if not documents:
        return message
    blocks = "\n\n".join(document_block(d) for d in documents)
    return f"{blocks}\n\n{message}" if message.strip() else blocks


# -- fitting the context --------------------------------------------------------------------------

CTX_STEP = 1024  # a context offered is rounded up to this
KV_MEMORY_SHARE = 0.5  # of the memory free now, what a larger context's cache may take


def kv_bytes_per_token(metadata: dict[str, Any], architecture: str) -> int:
    """What one token of context costs in llama.cpp's KV cache (F16 keys and values, every layer),
    from a GGUF header, a head of embedding / heads where it does not say (as llama.cpp reads
    it); 0 where it has no attention heads (Mamba, RWKV keep a small fixed state instead)."""

    def number(key: str) -> int:
        value = metadata.get(f"{architecture}.{key}")
        if isinstance(value, list | tuple):  # per-layer head counts: the largest
            value = max(value) if value else 0
        return int(value) if isinstance(value, int | float) else 0

    n_layers, n_head = number("block_count"), number("attention.head_count")
    if not n_layers or not n_head:
        return 0
    n_head_kv = number("attention.head_count_kv") or n_head
    head = number("embedding_length") // n_head
    key = number("attention.key_length") or head
    value = number("attention.value_length") or head
    return 2 * n_layers * n_head_kv * (key + value)


def fit_context(
    n_prompt: int,
    n_reply: int,
    n_ctx: int,
    n_ctx_train: int | None,
    kv_per_token: int,
    free_bytes: int | None = None,
) -> ContextFit:
    """The fit of a prompt, and where it does not fit, the smallest larger context (a multiple of
    CTX_STEP) that the model was trained for and whose cache takes at most half the free memory."""
    if n_prompt + n_reply <= n_ctx:
        return ContextFit(n_prompt, n_reply, n_ctx)
    free = available_ram_bytes() if free_bytes is None else free_bytes
    limit = n_ctx_train or 0
    if kv_per_token > 0 and free > 0:
        by_memory = int(free * KV_MEMORY_SHARE) // kv_per_token
        limit = min(limit, by_memory) if limit else by_memory
    limit = limit // CTX_STEP * CTX_STEP if limit >= CTX_STEP else limit
    wanted = -(-(n_prompt + n_reply) // CTX_STEP) * CTX_STEP
    if n_ctx_train:
        wanted = min(wanted, n_ctx_train)
    offer = wanted if n_prompt + n_reply <= wanted <= limit else 0
    return ContextFit(n_prompt, n_reply, n_ctx, offer, offer * kv_per_token, limit, free)


def model_fit(info: GGUFInfo, n_ctx: int, n_prompt: int, n_reply: int) -> ContextFit:
    """fit_context for a model at a context of n_ctx: its trained context and what a token of its
    cache costs, from its header."""
    kv_per_token = kv_bytes_per_token(info.metadata, info.architecture)
    return fit_context(n_prompt, n_reply, n_ctx, info.context_length, kv_per_token)


def check_fits(
    info: GGUFInfo, n_ctx: int, n_prompt: int, n_reply: int, in_window: bool = False, n_dropped: int = 0
) -> None:
    """Said before anything is sent (`tandem generate --attach`, a window's message with documents):
    a prompt and its reply that do not fit the context are refused with the numbers, and a larger
    context where memory allows (never a silently cut document)."""
    fit = model_fit(info, n_ctx, n_prompt, n_reply)
    if not fit.fits:
        raise ContextTooSmallError(fit, in_window, n_dropped)


def context_remedy(fit: ContextFit, in_window: bool = False) -> str:
    """What a person can do where a prompt does not fit: a larger context within memory, or less."""
    if fit.n_ctx_offer:
        how = (
            f"set the context to {fit.n_ctx_offer} tokens in Settings"
            if in_window
            else f"run again with --ctx {fit.n_ctx_offer}"
        )
        return (
            f"{how} (its cache takes about {format_size(fit.offer_bytes)}; "
            f"{format_size(fit.free_bytes)} of memory is free)"
        )
    if fit.n_ctx_limit:
        return (
            f"this model and this machine's free memory allow a context of at most {fit.n_ctx_limit:,}: "
            "attach less, or ask for a shorter reply"
        )
    return "attach less, or ask for a shorter reply"


class ContextTooSmallError(TandemError):
    """The conversation and its documents do not fit the context: said before anything is sent."""

    kind = ErrorKind.PROMPT_TOO_LONG

    def __init__(self, fit: ContextFit, in_window: bool = False, n_dropped: int = 0) -> None:
        self.fit = dataclasses.replace(fit, n_dropped=n_dropped)
        left_out = f" (with the {n_dropped} oldest messages left out)" if n_dropped else ""
        super().__init__(
            f"the message and its documents need {fit.n_needed:,} tokens{left_out} ({fit.n_prompt:,} to "
            f"read and {fit.n_reply:,} for the reply) and the context holds {fit.n_ctx:,}: "
            + context_remedy(fit, in_window)
        )
