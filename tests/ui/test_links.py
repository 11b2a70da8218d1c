"""tandem:// links on macOS and Windows (app/library/links.py): what the bundle declares and registers,
checked here as content; the registry and the Apple event themselves are not reachable on this
Linux machine (nothing here was run on Windows or macOS). Linux's desktop entry is in
test_packaging.py."""

from __future__ import annotations

import ast
import plistlib
import shlex
from pathlib import Path

import pytest

from app import paths
from app.cli.cli import main as cli_main
from app.library import links
from app.library.pair_doctor import parse_open_url

ROOT = Path(__file__).resolve().parents[2]
LINK = "tandem://open_from_hf?model=Qwen/Qwen3-0.6B-GGUF&file=Qwen3-0.6B-Q8_0.gguf"
EXE = r"C:\Users\Ann Lee\Apps\tandem\tandem.exe"


# --- macOS: Info.plist ---------------------------------------------------------------------------


def test_the_app_bundle_declares_the_tandem_scheme() -> None:
    plist = plistlib.loads(plistlib.dumps({"CFBundleURLTypes": links.macos_url_types()}))
    [url_type] = plist["CFBundleURLTypes"]
    assert url_type["CFBundleURLSchemes"] == ["tandem"]
    assert (
        url_type["CFBundleURLName"] == "org.tandem.Tandem.link" and url_type["CFBundleTypeRole"] == "Viewer"
    )


def _bundle_info_plist() -> ast.Dict:
    tree = ast.parse((ROOT / "packaging" / "tandem.spec").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "BUNDLE":
            [plist] = [k.value for k in node.keywords if k.arg == "info_plist"]
            assert isinstance(plist, ast.Dict)
            return plist
    raise AssertionError("the spec builds no BUNDLE")


def test_the_spec_puts_the_scheme_in_tandem_app() -> None:
    plist = _bundle_info_plist()
    keys = [k.value for k in plist.keys if isinstance(k, ast.Constant)]
    value = plist.values[keys.index("CFBundleURLTypes")]
    assert isinstance(value, ast.Call) and ast.unparse(value) == "macos_url_types()"
    spec = ast.parse((ROOT / "packaging" / "tandem.spec").read_text(encoding="utf-8"))
    bundle_id = [
        k.value.value
        for node in ast.walk(spec)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "BUNDLE"
        for k in node.keywords
        if k.arg == "bundle_identifier" and isinstance(k.value, ast.Constant)
    ]
    assert bundle_id == [links.BUNDLE_ID]


def test_a_link_sent_as_an_open_event_is_taken(qapp) -> None:  # type: ignore[no-untyped-def]
    from PySide6.QtCore import QEvent, QUrl
    from PySide6.QtGui import QFileOpenEvent

    from app.gui import desktop_link

    assert desktop_link(QFileOpenEvent(QUrl(LINK))) == LINK
    assert desktop_link(QFileOpenEvent(QUrl.fromLocalFile("/tmp/notes.txt"))) is None
    assert desktop_link(QEvent(QEvent.Type.Show)) is None
    assert parse_open_url(LINK).filename == "Qwen3-0.6B-Q8_0.gguf"


# --- Windows: the per-user registry keys ----------------------------------------------------------


def test_the_registry_entries_make_the_exe_the_handler() -> None:
    values = {(v.key, v.name): v.data for v in links.windows_entries(EXE)}
    assert values[(r"Software\Classes\tandem", "URL Protocol")] == ""
    assert values[(r"Software\Classes\tandem", "")] == "URL:Tandem link"
    command = values[(r"Software\Classes\tandem\shell\open\command", "")]
    assert command == f'"{EXE}" "%1"'
    # What Windows runs: the program, then the link as one argument (its & and = stay inside).
    argv = [a.strip('"') for a in shlex.split(command.replace("%1", LINK), posix=False)]
    assert argv == [EXE, LINK]
    from app.gui import parse_args

    assert parse_args(argv[1:]).link == LINK
    assert parse_open_url(argv[1]).repo_id == "Qwen/Qwen3-0.6B-GGUF"


def test_the_reg_file_has_the_same_entries_escaped() -> None:
    text = links.windows_reg_file(EXE)
    assert text.startswith(
        "Windows Registry Editor Version 5.00\r\n\r\n[HKEY_CURRENT_USER\\Software\\Classes\\tandem]"
    )
    assert "\n" not in text.replace("\r\n", "")
    lines = text.split("\r\n")
    assert '@="URL:Tandem link"' in lines and '"URL Protocol"=""' in lines
    assert "[HKEY_CURRENT_USER\\Software\\Classes\\tandem\\shell\\open\\command]" in lines
    assert '@="\\"C:\\\\Users\\\\Ann Lee\\\\Apps\\\\tandem\\\\tandem.exe\\" \\"%1\\""' in lines


def test_tandem_links_reg_file_writes_it_for_regedit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tandem-links.reg"
    assert cli_main(["links", "reg-file", str(out), "--exe", "/opt/tandem/tandem"]) == 0
    data = out.read_bytes()
    assert data[:2] == b"\xff\xfe"  # UTF-16 LE with a BOM, as regedit writes version 5.00 files
    assert data[2:].decode("utf-16-le") == links.windows_reg_file("/opt/tandem/tandem")
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["links", "register"], "runs from Python, not from a bundle"),
        (["links", "reg-file", "x.reg"], "give --exe"),
        (["links", "reg-file", "x.reg", "--exe", "tandem.exe"], "full path of tandem.exe"),
        (["links", "unregister"], "is for Windows; on Linux packaging/linux/install.sh"),
    ],
)
def test_links_bad_input_is_one_sentence(
    argv: list[str],
    fragment: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and fragment in err[-1] and "Traceback" not in "\n".join(err)
    assert not (paths.home() / links.UNREGISTERED_MARK).exists()


def test_the_window_registers_only_where_nothing_works(tmp_path: Path) -> None:
    other = tmp_path / "other" / "tandem.exe"
    other.parent.mkdir()
    other.write_bytes(b"MZ")
    assert links.needs_registering(None, EXE, is_unregistered=False)
    assert links.needs_registering(r'"C:\gone\tandem.exe" "%1"', EXE, is_unregistered=False)  # moved
    assert not links.needs_registering(f'"{EXE}" "%1"', EXE, is_unregistered=False)
    assert not links.needs_registering(f'"{other}" "%1"', EXE, is_unregistered=False)  # another, still there
    assert not links.needs_registering(None, EXE, is_unregistered=True)  # the user said no
    assert links.registered_program(f'"{EXE}" "%1"') == EXE
    # Not Windows, or not a bundle: the window's start registers nothing.
    assert links.register_at_start(tmp_path) is False
