"""Real documents written by the tests: PDFs with and without a text layer, encrypted, and .docx."""

from __future__ import annotations

from pathlib import Path


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def write_pdf(
    path: Path, pages: list[list[str]], password: str | None = None, image_only: bool = False
) -> Path:
    """A real PDF: each page's lines set in Helvetica (a text layer), or, with image_only, each page
    a picture and no text at all (what a scanner writes). password: encrypted (RC4-128)."""
    from pypdf import PdfWriter
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject, NumberObject, StreamObject

    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    font_ref = writer._add_object(font)
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        if image_only:
            image = StreamObject()
            image._data = bytes(range(0, 256, 4)) * 4  # 16 x 16 grey pixels
            image.update(
                {
                    NameObject("/Type"): NameObject("/XObject"),
                    NameObject("/Subtype"): NameObject("/Image"),
                    NameObject("/Width"): NumberObject(16),
                    NameObject("/Height"): NumberObject(16),
                    NameObject("/ColorSpace"): NameObject("/DeviceGray"),
                    NameObject("/BitsPerComponent"): NumberObject(8),
                }
            )
            resources = {
                NameObject("/XObject"): DictionaryObject({NameObject("/Im1"): writer._add_object(image)})
            }
            content = "q 400 0 0 400 100 300 cm /Im1 Do Q"
        else:
            resources = {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})}
            shown = " ".join(f"({_escape(line)}) Tj T*" for line in lines)
            content = f"BT /F1 11 Tf 14 TL 72 740 Td {shown} ET"
        page[NameObject("/Resources")] = DictionaryObject(resources)
        stream = StreamObject()
        stream._data = content.encode("latin-1")
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/MediaBox")] = ArrayObject(
            [NumberObject(0), NumberObject(0), NumberObject(612), NumberObject(792)]
        )
    if password is not None:
        writer.encrypt(user_password=password, owner_password=password + "-owner", algorithm="RC4-128")
    with open(path, "wb") as f:
        writer.write(f)
    return path


def write_docx(path: Path, paragraphs: list[str], table: list[list[str]] | None = None) -> Path:
    import docx

    document = docx.Document()
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    if table:
        t = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, cell in enumerate(row):
                t.cell(r, c).text = cell
    document.save(str(path))
    return path
