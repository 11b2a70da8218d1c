"""Packed documents are bounded by what they unpack to, not only by their size on disk (review 5,
F3: a 760 kB .docx became a 300-million-character attachment in 9.5 s and 1.1 GB).

A .docx is refused from its zip directory before anything is inflated (app/library/unpacked.py);
a PDF's streams are inflated at most so far; the text either gives is held to the text limit.
"""

from __future__ import annotations

import io
import os
import resource
import time
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from documents_files import write_docx

from app.library.documents import MAX_TEXT_BYTES, DocumentError, DocumentProblem, read_document
from app.library.unpacked import MAX_UNPACKED_XML_BYTES

HEAD = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
)
TAIL = b"</w:body></w:document>"


def docx_with_body(path: Path, paragraphs: int, text: bytes | Callable[[], bytes] | None = None) -> Path:
    """A real .docx (python-docx's own package) whose document.xml is `paragraphs` paragraphs of
    `text` (1,000 'a' by default: a bomb, packing about 1000:1; a callable: each its own), written
    streaming."""
    template = write_docx(path.with_suffix(".template.docx"), ["x"])
    made = text if callable(text) else (lambda: text or b"a" * 1000)
    with zipfile.ZipFile(template) as source, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in source.infolist():
            if item.filename == "word/document.xml":
                with out.open(item.filename, "w", force_zip64=True) as f:
                    f.write(HEAD)
                    for _ in range(paragraphs):
                        f.write(b"<w:p><w:r><w:t>" + made() + b"</w:t></w:r></w:p>")
                    f.write(TAIL)
            else:
                out.writestr(item, source.read(item.filename))
    return path


def refused(path: Path) -> tuple[DocumentError, float, float]:
    """The refusal, the seconds it took and what it added to the peak memory (MB)."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(DocumentError) as e:
        read_document(path)
    took = time.monotonic() - started
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return e.value, took, grew


def test_a_docx_bomb_is_refused_from_its_directory(tmp_path: Path) -> None:
    path = docx_with_body(tmp_path / "bomb.docx", 300_000)  # 300 MB of XML (review 5's file)
    assert path.stat().st_size < 2 * 1024 * 1024
    error, took, grew = refused(path)
    print(f"\n.docx bomb ({path.stat().st_size:,} bytes -> 300 MB): refused in {took:.3f} s, +{grew:.0f} MB")
    assert error.problem == DocumentProblem.TOO_LARGE
    assert "unpacks" in str(error) and "\n" not in str(error)
    assert took < 5  # under 1 s alone; a generous bound on a shared machine
    assert grew < 100


def test_a_part_packed_like_a_bomb_is_refused_under_the_xml_limit(tmp_path: Path) -> None:
    paragraphs = MAX_UNPACKED_XML_BYTES // 2 // 1040  # 16 MB of XML, packed about 1000:1
    error, _took, _grew = refused(docx_with_body(tmp_path / "dense.docx", paragraphs))
    assert error.problem == DocumentProblem.TOO_LARGE
    assert "times larger than it is packed" in str(error)


def test_docx_text_is_held_to_the_text_limit(tmp_path: Path) -> None:
    # Text that packs like text (hex: about 2:1), within every unpacked limit, but more of it
    # than a text file may hold: read until the limit, then refused (accepted whole before).
    n = MAX_TEXT_BYTES // 4000 + 50
    path = docx_with_body(tmp_path / "long.docx", n, lambda: os.urandom(2000).hex().encode())
    error, _took, _grew = refused(path)
    assert error.problem == DocumentProblem.TOO_LARGE
    assert "its text is more than" in str(error)


def test_a_docx_within_the_limits_still_reads(tmp_path: Path) -> None:
    path = docx_with_body(tmp_path / "fine.docx", 200, b"plain words " * 20)
    document = read_document(path)
    assert document.text.count("plain words") == 200 * 20


def write_pdf_bomb(path: Path, text_mb: int) -> Path:
    """A real PDF (pypdf) whose one page shows `text_mb` MB of text, its content stream
    FlateDecode-compressed (about 1000:1), written without holding the text."""
    from pypdf import PdfWriter
    from pypdf.generic import DictionaryObject, EncodedStreamObject, NameObject

    packer = zlib.compressobj(9)
    packed = io.BytesIO()
    packed.write(packer.compress(b"BT /F1 11 Tf 14 TL 72 740 Td "))
    line = b"(" + b"a" * 1000 + b") Tj T* "
    for _ in range(text_mb * 1024):
        packed.write(packer.compress(line))
    packed.write(packer.compress(b"ET") + packer.flush())
    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    page[NameObject("/Resources")] = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})}
    )
    stream = EncodedStreamObject()
    stream._data = packed.getvalue()
    stream[NameObject("/Filter")] = NameObject("/FlateDecode")
    page[NameObject("/Contents")] = writer._add_object(stream)
    with open(path, "wb") as f:
        writer.write(f)
    return path


def test_a_pdf_with_a_huge_text_stream_is_refused(tmp_path: Path) -> None:
    path = write_pdf_bomb(tmp_path / "bomb.pdf", 40)  # within pypdf's own 75 MB stream limit
    assert path.stat().st_size < 1024 * 1024
    error, took, grew = refused(path)
    print(
        f"\nPDF bomb ({path.stat().st_size:,} bytes -> 40 MB of text): refused in {took:.3f} s, +{grew:.0f} MB"
    )
    assert error.problem == DocumentProblem.TOO_LARGE
    assert "\n" not in str(error)
    assert took < 5
    assert grew < 100
