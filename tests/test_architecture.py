"""Import contracts, read from the source with `ast` (every import, also those inside functions).

The rules, and why:
- `engine/` is the speculative decoder and its models: pure Python over llama.cpp. It imports
  no Qt (PySide6, shiboken6) and nothing from `app/` or `ui/`, so the CLI, `tandem serve`, the
  worker process and benchmarks can use it without a display, and the papers' loop reads alone.
- `ui/` is widgets. It knows the engine only through the values that cross the worker's pipe:
  `engine.events` (TextPiece, Stats, Finished, DraftingState), `engine.errors` (error kinds,
  PairRefusal, Failure, the exception types it catches) and `engine.config` (SamplingParams,
  defaults). Everything else (loading models, GGUF parsing, pairing, RPC) goes through `app/`.
  The few places that still reach further are listed in UI_ENGINE_DEBT with the reason; a new
  one fails this test, and one that is gone must be taken off the list.
- In `app/`, only the Qt side of the engine host and the window's entry points import Qt
  (APP_QT_MODULES); the command line (`generate`, `serve`, `models`, `bench`, `rpc-server`)
  and the worker process start without Qt, checked also by importing them in a fresh process.
- Every third-party package imported by `app/`, `engine/` or `ui/` is declared in
  pyproject.toml (a dependency, or the `model` extra for the embedded model).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QT = ("PySide6", "shiboken6")
UI_ENGINE_ALLOWED = {"engine.events", "engine.errors", "engine.config"}
UI_ENGINE_DEBT = {
    # module: (engine modules it may still import, why)
    "ui/models_page.py": (
        {"engine.gguf_info"},
        "reads an imported file's header; belongs in the model library",
    ),
    "ui/settings_dialog.py": (
        {"engine.chat", "engine.rpc"},
        "chat sampling defaults and RPC address validation; belong in app/settings.py",
    ),
}
# The window's side of app/: the Qt controller, the window's entry, and tools that drive the window.
APP_QT_MODULES = ("app/controller.py", "app/gui.py", "app/bench_gui.py", "app/screenshot*.py")
FIRST_PARTY = {"app", "engine", "ui", "tests"}


def imports(path: Path, package: str | None = None) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in a file; `from . import x` resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            if module in ("app", "engine", "ui"):  # `from engine import events`
                found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def top(module: str) -> str:
    return module.split(".")[0]


def test_the_reader_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    # The contract is only as good as its reader: check it on a file written to break it.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def f():\n    from PySide6.QtCore import QObject\n    from . import events\n    import app.cli\n"
    )
    found = {m for _, m in imports(probe, package="engine")}
    assert found == {"PySide6.QtCore", "engine", "engine.events", "app.cli"}
    bad = [m for _, m in imports(probe, package="engine") if top(m) in (*QT, "app", "ui")]
    assert bad == ["PySide6.QtCore", "app.cli"]


def test_engine_imports_no_qt_and_nothing_from_app_or_ui() -> None:
    bad = [
        f"{rel(p)}:{line}: {m}"
        for p in sources("engine")
        for line, m in imports(p)
        if top(m) in (*QT, "app", "ui")
    ]
    assert not bad, "engine/ must stay free of Qt, app/ and ui/:\n" + "\n".join(bad)


def test_ui_knows_the_engine_only_through_its_values() -> None:
    bad = []
    used_debt: dict[str, set[str]] = {}
    for p in sources("ui"):
        debt, _why = UI_ENGINE_DEBT.get(rel(p), (set(), ""))
        for line, m in imports(p):
            if top(m) != "engine" or m in UI_ENGINE_ALLOWED:
                continue
            if m in debt:
                used_debt.setdefault(rel(p), set()).add(m)
            else:
                bad.append(f"{rel(p)}:{line}: {m}")
    assert not bad, "ui/ may import only engine.events, engine.errors and engine.config:\n" + "\n".join(bad)
    stale = {f: sorted(mods - used_debt.get(f, set())) for f, (mods, _) in UI_ENGINE_DEBT.items()}
    assert not any(stale.values()), f"no longer imported, take them off UI_ENGINE_DEBT: {stale}"


def test_only_the_window_side_of_app_imports_qt() -> None:
    bad = [
        f"{rel(p)}:{line}: {m}"
        for p in sources("app")
        if not any(fnmatch.fnmatch(rel(p), pattern) for pattern in APP_QT_MODULES)
        for line, m in imports(p)
        if top(m) in (*QT, "ui")
    ]
    assert not bad, "only " + ", ".join(sorted(APP_QT_MODULES)) + " may import Qt or ui/:\n" + "\n".join(bad)


def test_the_command_line_and_the_worker_start_without_qt() -> None:
    code = (
        "import sys\n"
        "import app.cli, app.cli_models, app.serve, app.remote, app.bench, app.rpc_server, app.worker\n"
        "import app.main, app.model_spec, app.cli_base\n"
        "app.cli.build_parser()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'ui'))\n"
        "print(loaded)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"].get("model", [])]
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}


def test_every_imported_third_party_package_is_declared() -> None:
    declared = _declared()
    providers = importlib.metadata.packages_distributions()
    missing = []
    for folder in ("app", "engine", "ui"):
        for p in sources(folder):
            for line, m in imports(p):
                name = top(m)
                if not name or name in FIRST_PARTY or name in sys.stdlib_module_names or name == "__future__":
                    continue
                dists = {d.lower().replace("_", "-") for d in providers.get(name, [])}
                if not dists & declared:
                    missing.append(f"{rel(p)}:{line}: {m} (from {sorted(dists) or 'nothing installed'})")
    assert not missing, "imported but not declared in pyproject.toml:\n" + "\n".join(missing)
