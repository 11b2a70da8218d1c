"""tandem:// links: how each desktop is told that Tandem opens them (no Qt here).

The hub's "Use this model" opens `tandem://open_from_hf?model=OWNER/REPO&file=FILE`; the desktop
starts Tandem with that link, which `app.gui` hands to the window (or to the window already
running), and the pair doctor checks the file (app.library.pair_doctor.parse_open_url).

- Linux: packaging/linux/tandem-url-handler.desktop (MimeType=x-scheme-handler/tandem), installed
  by packaging/linux/install.sh and made the handler with xdg-mime.
- macOS: the app bundle declares the scheme in its Info.plist (CFBundleURLTypes: macos_url_types,
  which packaging/tandem.spec puts in Tandem.app); macOS then sends the link as an Apple event,
  which Qt delivers as a QFileOpenEvent (app.gui installs the filter that opens it).
- Windows: a one-folder bundle has no installer, so the window registers the scheme for the
  user who starts it (HKEY_CURRENT_USER\\Software\\Classes\\tandem, no administrator rights) when
  no working registration exists; `tandem links register|unregister|reg-file` does it by hand.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import TandemError

SCHEME = "tandem"
BUNDLE_ID = "org.tandem.Tandem"  # the spec's bundle_identifier
WINDOWS_KEY = r"Software\Classes\tandem"  # under HKEY_CURRENT_USER: this user only
UNREGISTERED_MARK = "links-unregistered"  # in the data folder: `tandem links unregister` was asked


def macos_url_types() -> list[dict[str, Any]]:
    """Info.plist's CFBundleURLTypes: Tandem.app opens tandem:// links."""
    return [
        {
            "CFBundleURLName": f"{BUNDLE_ID}.link",
            "CFBundleTypeRole": "Viewer",
            "CFBundleURLSchemes": [SCHEME],
        }
    ]


@dataclass(frozen=True)
class RegistryValue:
    key: str  # under HKEY_CURRENT_USER
    name: str  # "" is the key's default value
    data: str


def windows_entries(exe: str) -> list[RegistryValue]:
    """The values that make `exe` the handler of tandem:// for this user (Microsoft's
    "Registering an Application to a URI Scheme": a "URL Protocol" value marks the key)."""
    return [
        RegistryValue(WINDOWS_KEY, "", "URL:Tandem link"),
        RegistryValue(WINDOWS_KEY, "URL Protocol", ""),
        RegistryValue(WINDOWS_KEY + r"\DefaultIcon", "", f'"{exe}",0'),
        RegistryValue(WINDOWS_KEY + r"\shell\open\command", "", f'"{exe}" "%1"'),  # the link: one argument
    ]


def _reg_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def windows_reg_file(exe: str) -> str:
    """The same entries as a .reg file (double-click it, or `reg import FILE`), lines joined by
    CRLF; write it as UTF-16 with a BOM, as regedit writes version 5.00 files."""
    lines = ["Windows Registry Editor Version 5.00"]
    key = ""
    for value in windows_entries(exe):
        if value.key != key:
            key = value.key
            lines += ["", f"[HKEY_CURRENT_USER\\{key}]"]
        lines.append(f"{'@' if not value.name else _reg_string(value.name)}={_reg_string(value.data)}")
    return "\r\n".join(lines) + "\r\n"


def this_program() -> str | None:
    """The executable a link should start: the bundle's tandem.exe; None when running from
    Python (a venv's python.exe would need the module too: register a bundle, not a venv)."""
    return sys.executable if getattr(sys, "frozen", False) else None


def _winreg() -> Any:
    if sys.platform != "win32":
        raise TandemError(
            "registering tandem:// in the registry is for Windows; on Linux packaging/linux/install.sh "
            "registers it, on macOS Tandem.app declares it"
        )
    import winreg

    return winreg


def windows_registered_command() -> str | None:
    """The command registered for tandem:// for this user, or None."""
    winreg = _winreg()
    try:
        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, WINDOWS_KEY + r"\shell\open\command") as key:
            value, _type = winreg.QueryValueEx(key, "")
    except OSError:
        return None
    return str(value)


def register_windows(exe: str) -> None:
    winreg = _winreg()
    for value in windows_entries(exe):
        with winreg.CreateKeyEx(winreg.HKEY_CURRENT_USER, value.key, 0, winreg.KEY_SET_VALUE) as key:
            winreg.SetValueEx(key, value.name, 0, winreg.REG_SZ, value.data)


def unregister_windows() -> None:
    winreg = _winreg()
    for sub in (r"\shell\open\command", r"\shell\open", r"\shell", r"\DefaultIcon", ""):
        with contextlib.suppress(FileNotFoundError):
            winreg.DeleteKey(winreg.HKEY_CURRENT_USER, WINDOWS_KEY + sub)


def registered_program(command: str | None) -> str | None:
    """The program of a registered command ('"C:\\x\\tandem.exe" "%1"' -> C:\\x\\tandem.exe)."""
    if not command:
        return None
    command = command.strip()
    if command.startswith('"'):
        end = command.find('"', 1)
        return command[1:end] if end > 0 else None
    return command.split(" ", 1)[0]


def needs_registering(command: str | None, exe: str, is_unregistered: bool) -> bool:
    """At the window's start on Windows: register when nothing works for tandem:// (no handler,
    or its program is gone: a bundle moved or deleted) and the user did not unregister. Another
    Tandem that still exists keeps the links."""
    if is_unregistered:
        return False
    program = registered_program(command)
    return program is None or (program != exe and not Path(program).is_file())


def register_at_start(home: Path) -> bool:
    """The window's start on Windows, in a bundle: register tandem:// for this user where
    needs_registering says so. True when it registered. Elsewhere: nothing (False)."""
    exe = this_program()
    if sys.platform != "win32" or exe is None:
        return False
    if not needs_registering(windows_registered_command(), exe, (home / UNREGISTERED_MARK).exists()):
        return False
    register_windows(exe)
    return True
