"""How much a packed document unpacks to, checked before it is parsed (decompression bombs): a
.docx by its zip directory, a PDF by its streams and the instructions of each page.

A .docx is a zip: python-docx inflates every part into memory and lxml parses its XML, so a
760 kB file whose document.xml is 300 MB of paragraphs became a 300-million-character attachment
(review 5, F3), and DEFLATE's ~1000:1 puts tens of GB within the 64 MB packed limit. The zip's
directory says what each part unpacks to (ZipInfo.file_size) without inflating anything; a part
that lies about it is caught as it is read (zipfile checks the size it said). The limits:

- MAX_UNPACKED_BYTES, every part together: python-docx holds all of them (pictures included, which
  do not shrink when zipped: a real 64 MB .docx unpacks to little more than 64 MB), so twice the
  packed limit.
- MAX_UNPACKED_XML_BYTES, the XML parts lxml parses (a tree costs several times its text): 32 MB,
  eight times the 4 MB of text a document may give (WordprocessingML spends 3-8 bytes of markup
  per byte of text).
- MAX_RATIO, one part's unpacked size over its packed size, for parts over RATIO_GRACE_BYTES:
  100:1, Apache POI's default (ZipSecureFile's minimum inflate ratio 0.01). Repetitive XML packs
  to 10-30:1; a bomb packs near DEFLATE's 1000:1.

No Qt, no engine.
"""

from __future__ import annotations

import contextlib
import io
import zipfile
from collections.abc import Iterator
from typing import Any

MAX_UNPACKED_BYTES = 128 * 1024 * 1024
MAX_UNPACKED_XML_BYTES = 32 * 1024 * 1024
MAX_RATIO = 100
RATIO_GRACE_BYTES = 1024 * 1024


def zip_problem(data: bytes) -> str | None:
    """Why a zip (a .docx) must not be unpacked, in words for a sentence ("it unpacks to ..."), or
    None where its directory says it is within the limits. A zip that cannot be read is None:
    the parser then says it is damaged."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            parts = z.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        return None
    total = sum(p.file_size for p in parts)
    xml = sum(p.file_size for p in parts if p.filename.lower().endswith((".xml", ".rels")))
    if total > MAX_UNPACKED_BYTES:
        return f"it unpacks to {_mb(total)}, more than the {_mb(MAX_UNPACKED_BYTES)} Tandem unpacks"
    if xml > MAX_UNPACKED_XML_BYTES:
        return (
            f"its text unpacks to {_mb(xml)} of XML, more than the {_mb(MAX_UNPACKED_XML_BYTES)} Tandem reads"
        )
    for p in parts:
        if p.file_size > RATIO_GRACE_BYTES and p.file_size > MAX_RATIO * max(p.compress_size, 1):
            return (
                f"its part {p.filename[:80]} unpacks {p.file_size // max(p.compress_size, 1):,} times "
                f"larger than it is packed (a decompression bomb; documents pack at most {MAX_RATIO}:1)"
            )
    return None


def _mb(n_bytes: int) -> str:
    return f"{n_bytes / 1024 / 1024:,.0f} MB"


# A PDF's streams are inflated by pypdf as they are read; it stops at 75 MB a stream by default. Here
# at MAX_PDF_STREAM_BYTES (pypdf's configuration, since pypdf 7). And the
# text of a page is extracted only where its drawing instructions (its content streams and the
# forms it draws) are within MAX_PDF_PAGE_BYTES: a full page of small text takes 5-50 kB of them,
# and pypdf's extraction grows faster than the page (a page of 40 MB had not finished in 10
# minutes). 2 MB is 40 such pages in one; a drawing that dense holds little text.
MAX_PDF_STREAM_BYTES = 8 * 1024 * 1024
MAX_PDF_PAGE_BYTES = 2 * 1024 * 1024


@contextlib.contextmanager
def pdf_limits() -> Iterator[None]:
    """While in this, pypdf inflates no stream past MAX_PDF_STREAM_BYTES (LimitReachedError)."""
    from pypdf import apply_configuration

    n = MAX_PDF_STREAM_BYTES
    with apply_configuration(
        zlib_maximum_output_length=n,
        lzw_maximum_output_length=n,
        run_length_maximum_output_length=n,
        array_based_stream_maximum_output_length=n,
    ):
        yield


def pdf_page_problem(page: Any) -> str | None:
    """Why a page's text must not be extracted (its drawing instructions past MAX_PDF_PAGE_BYTES),
    in words for a sentence, or None."""
    total = 0
    contents = page.get_contents()
    if contents is not None:
        total += len(contents.get_data())
    resources = page.get("/Resources")
    forms = resources.get_object().get("/XObject") if resources is not None else None
    for ref in forms.get_object().values() if forms is not None else ():
        form = ref.get_object()
        if form.get("/Subtype") == "/Form":
            total += len(form.get_data())
        if total > MAX_PDF_PAGE_BYTES:
            break
    if total > MAX_PDF_PAGE_BYTES:
        return (
            f"a page of it holds more than {_mb(MAX_PDF_PAGE_BYTES)} of text and drawing instructions, "
            "more than Tandem reads from a page"
        )
    return None
