"""Render Tandem's icon (resources/tandem.svg, the one the window shows) to every size.

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/linux/render_icons.py

Writes the freedesktop icons (a copy of the SVG as hicolor/scalable/apps/tandem.svg, and the
PNGs hicolor/NxN/apps/tandem.png), packaging/windows/tandem.ico and
packaging/macos/tandem.icns. ICO and ICNS are written here by hand, as containers of PNG images,
so they do not depend on which Qt image plugins are installed. The results are committed; run
this again only after changing the SVG.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

PACKAGING = Path(__file__).resolve().parent.parent
ICONS = PACKAGING / "linux" / "icons" / "hicolor"
SVG = PACKAGING.parent / "resources" / "tandem.svg"
PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS element types that hold PNG data, by pixel size.
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09", 1024: b"ic10"}


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {SVG}")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def ico(images: dict[int, bytes]) -> bytes:
    """A Windows .ico whose entries are PNG images (Windows Vista and later read them)."""
    header = struct.pack("<HHH", 0, 1, len(images))
    offset = 6 + 16 * len(images)
    entries, blobs = b"", b""
    for size, png in sorted(images.items()):
        dim = 0 if size >= 256 else size  # 0 means 256 in an ICO directory entry
        entries += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(png), offset)
        blobs += png
        offset += len(png)
    return header + entries + blobs


def icns(images: dict[int, bytes]) -> bytes:
    body = b"".join(ICNS_TYPES[s] + struct.pack(">I", 8 + len(p)) + p for s, p in sorted(images.items()))
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841 (keeps Qt up)
    (ICONS / "scalable" / "apps" / "tandem.svg").write_bytes(SVG.read_bytes())
    pngs = {size: render_png(size) for size in sorted(set(PNG_SIZES) | set(ICO_SIZES) | {1024})}
    for size in PNG_SIZES:
        out = ICONS / f"{size}x{size}" / "apps" / "tandem.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(pngs[size])
    (PACKAGING / "windows" / "tandem.ico").write_bytes(ico({s: pngs[s] for s in ICO_SIZES}))
    (PACKAGING / "macos" / "tandem.icns").write_bytes(icns({s: pngs[s] for s in ICNS_TYPES}))
    print(f"wrote {len(PNG_SIZES)} PNGs under {ICONS}, tandem.ico, tandem.icns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
