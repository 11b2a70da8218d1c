"""Import contracts, read from the source with `ast` (every import, also those inside functions).

The rules, and why:
- `engine/` is the speculative decoder and its models: pure Python over llama.cpp. It imports
  no Qt (PySide6, shiboken6) and nothing from `app/`, `ui/`, `tests/` or `tools/`, so the CLI,
  `tandem serve`, the worker process and benchmarks can use it without a display, and the
  papers' loop reads alone.
- `ui/` is widgets. It knows the engine only through the values that cross the worker's pipe:
  `engine.events` (TextPiece, Stats, Finished, DraftingState), `engine.errors` (error kinds,
  PairRefusal, Failure, the exception types it catches) and `engine.config` (SamplingParams,
  defaults). Everything else (loading models, GGUF parsing, pairing, RPC) goes through `app/`.
  The few places that still reach further are listed in UI_ENGINE_DEBT with the reason; a new
  one fails this test, and one that is gone must be taken off the list.
- `app/` is in rooms (ROOMS): `app/library` (catalog, machine, local models, downloads, the
  default model, the model resolver), `app/host` (the engine's worker process, its remote
  stand-in and its client of OpenAI-compatible servers, the reply buffer, the Qt controller),
  `app/api` (the OpenAI-compatible server), `app/cli` (the command line). Each room imports no Qt
  and nothing from `ui/`, `tests/` or `tools/` (the one exception: the Qt controller,
  app/host/controller.py), and none imports a room above it: the library nothing of
  host/api/cli, host nothing of api or the command line, api nothing of the command line.
  At app/ top level stay only the entry points and the shared state (APP_TOP). `ui/` imports
  nothing from the command line. The command line and the worker process start without Qt,
  checked also by importing them in a fresh process.
- Every third-party package imported by `app/`, `engine/` or `ui/` is declared in
  pyproject.toml (a dependency, or the `model` extra for the embedded model).
- No import circles among the project's modules (`app/`, `engine/`, `ui/`, `tools/`), counting
  imports inside functions too (a function-local import hides a circle, it does not cut it).
  Imports under `if TYPE_CHECKING:` do not count there (they never run), and form no circle
  either (test_no_circles_even_among_the_imports_for_type_checking). A circle means two modules
  are one job split in two, or one of them holds what both need: move that into a third.
- No module of `app/`, `engine/` or `ui/` is over MAX_LINES lines of code without saying why at
  its top (a "Why this file is long:" paragraph in its docstring): a long module is usually
  several jobs, and one that is not says what keeps it whole. Docstrings do not count (a module
  is not made shorter by saying less about it). The few being split on other branches are listed
  in SIZE_DEBT with the reason; one that shrinks must be taken off, and so must the paragraph of
  a module back within the bound (a waiver is earned by a module that needs it).
- No class is over MAX_CLASS_LINES lines of code, MAX_METHODS methods or MAX_FIELDS fields (what
  a newcomer must hold in mind at once), but those in CLASS_WAIVERS, each with its reason; one
  that comes within the bounds must be taken off.
- No relay signals: a Qt signal of ours that is only fed by another signal of ours (connected to
  re-emit it, `child.x.connect(self.x)`, or by `getattr`) is a hop with no logic; connect the
  listener to the source. A relay that is earned (a fan-in of children that come and go, the
  one signal of several children) says so on its declaration line ("relays ...: why").
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

ROOT = Path(__file__).resolve().parents[2]
QT = ("PySide6", "shiboken6")
UI_ENGINE_ALLOWED = {"engine.events", "engine.errors", "engine.config"}
UI_ENGINE_DEBT = {
    # module: (engine modules it may still import, why)
    "ui/settings/settings_dialog.py": (
        {"engine.chat", "engine.rpc"},
        "chat sampling defaults and RPC address validation; belong in app/settings.py",
    ),
}
# The window's side of app/: the Qt controller and the window's entry.
APP_QT_MODULES = ("app/host/controller.py", "app/gui.py")
# What stays at app/ top level: the entry points (main: `python -m app.main`, gui: the window's)
# and the state every room shares (paths, settings, the conversation store and the document it keeps
# with a message).
APP_TOP = {"__init__.py", "main.py", "gui.py", "paths.py", "settings.py", "store.py", "document.py"}
NEVER = (*QT, "ui", "tests", "tools")
# room: what it must not import (a top-level package, or a dotted prefix such as app.cli)
ROOMS = {
    "app/library": (*NEVER, "app.host", "app.api", "app.cli"),
    "app/host": (*NEVER, "app.api", "app.cli"),
    "app/api": (*NEVER, "app.cli"),
    "app/cli": NEVER,
}
FIRST_PARTY = {"app", "engine", "ui", "tests", "tools"}
MAX_LINES = 500
LONG_REASON = "Why this file is long:"
# What app/store.py (below the rooms: every room may keep its state there) may still import from a
# room, and why; a new arrow up fails, one that is gone must be taken off.
STORE_DEBT: dict[str, str] = {}
MAX_CLASS_LINES, MAX_METHODS, MAX_FIELDS = 400, 40, 30
CLASS_WAIVERS = {
    # module:Class: why it may be larger (being split on another branch, or one job by nature)
    "ui/main_window.py:MainWindow": "the frame and its wiring: the pages follow their presenters and "
    "the helpers take what they use (issue 49); its menus, toolbar, keys and the welcome's wiring are still its own",
    "ui/chat/chat_view.py:ChatView": "the chat page: its messages and their pages, the live reply, the "
    "message box and its attachments (the empty chat's suggestions are ui/chat/empty_chat.py's)",
    "ui/models/pair_doctor_panel.py:PairDoctorPanel": "the pair doctor's form, the report it draws from "
    "app/library/pair_doctor.report_parts and the hub checks and downloads it starts: to be split by job",
    "app/settings.py:Settings": "one field per setting a user can change: the settings file, flat on purpose",
}
# A waived class may not grow back: at most these (lines of code, methods, fields), lowered as it
# shrinks (MainWindow was 747 lines and 82 methods before issue 49 moved the pages' jobs out, 601
# and 61 before the welcome panel showed and shrank itself).
CLASS_CEILINGS = {
    "ui/main_window.py:MainWindow": (546, 47, 28),
    "ui/chat/chat_view.py:ChatView": (521, 45, 26),
}
SIZE_DEBT = {
    # module: why it is long without saying so at its top (being changed on another branch)
    "ui/main_window.py": "the conversation and reply handlers are to move to their rooms (export/import, presets and the welcome's downloads have)",
}


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


def runtime_imports(path: Path, package: str, typing_too: bool = False) -> list[tuple[str, ...]]:
    """Every import that can run (not those under `if TYPE_CHECKING:`, unless `typing_too`), each
    as the dotted names it may mean: `from a.b import c` is a.b.c where that is a module, else a.b."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    typing_only = (
        set()
        if typing_too
        else {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for node in ast.walk(stmt)
        }
    )
    found: list[tuple[str, ...]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.extend((alias.name,) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.extend((f"{module}.{alias.name}", module) for alias in node.names)
    return found


def module_graph(root: Path, folders: tuple[str, ...], typing_too: bool = False) -> dict[str, set[str]]:
    """module -> the project's modules it imports (`from pkg import mod` is an edge to pkg.mod);
    `typing_too`: imports under `if TYPE_CHECKING:` count as well."""
    files: dict[str, Path] = {}
    for folder in folders:
        for p in sorted((root / folder).rglob("*.py")):
            parts = p.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {}
    for name, p in files.items():
        package = name if p.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for meanings in runtime_imports(p, package, typing_too):
            m = next((m for m in meanings if m in files), meanings[-1])
            while m and m not in files:  # `import a.b.c` of a package a.b.c: its __init__
                m = m.rpartition(".")[0]
            if m and m != name:
                edges.add(m)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def sources(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def top(module: str) -> str:
    return module.split(".")[0]


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


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
    assert [m for _, m in imports(probe, package="app.library") if within(m, ROOMS["app/library"])] == [
        "PySide6.QtCore",
        "app.cli",
    ]
    assert not within("app.client", ("app.cli",))  # a prefix is a whole dotted name


def test_engine_imports_no_qt_and_nothing_from_app_or_ui() -> None:
    bad = [
        f"{rel(p)}:{line}: {m}"
        for p in sources("engine")
        for line, m in imports(p)
        if top(m) in (*QT, "app", "ui", "tests", "tools")
    ]
    assert not bad, "engine/ must stay free of Qt, app/, ui/, tests/ and tools/:\n" + "\n".join(bad)


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


def test_app_is_in_rooms_and_each_room_imports_only_what_is_below_it() -> None:
    top_level = {p.name for p in (ROOT / "app").glob("*.py")}
    assert top_level == APP_TOP, f"app/ top level holds only {sorted(APP_TOP)}; put the rest in a room"
    rooms = {rel(p) for p in (ROOT / "app").iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(ROOMS), f"a new room of app/ needs its rules in ROOMS: {sorted(rooms)}"
    bad = [
        f"{rel(p)}:{line}: {m}"
        for room, never in ROOMS.items()
        for p in sources(room)
        for line, m in imports(p)
        if within(m, never) and not (rel(p) in APP_QT_MODULES and top(m) in QT)
    ]
    assert not bad, "imports across the rooms of app/ (see ROOMS):\n" + "\n".join(bad)


def test_only_the_window_side_of_app_imports_qt_and_ui_not_the_command_line() -> None:
    bad = [
        f"{rel(p)}:{line}: {m}"
        for p in sources("app")
        if not any(fnmatch.fnmatch(rel(p), pattern) for pattern in APP_QT_MODULES)
        for line, m in imports(p)
        if top(m) in (*QT, "ui")
    ]
    assert not bad, "only " + ", ".join(sorted(APP_QT_MODULES)) + " may import Qt or ui/:\n" + "\n".join(bad)
    bad = [
        f"{rel(p)}:{line}: {m}" for p in sources("ui") for line, m in imports(p) if within(m, ("app.cli",))
    ]
    assert not bad, "ui/ uses app/library, app/host and app/api, not the command line:\n" + "\n".join(bad)


def test_the_command_line_and_the_worker_start_without_qt() -> None:
    code = (
        "import sys\n"
        "import app.cli.cli, app.cli.cli_models, app.cli.serve, app.cli.remote, app.cli.bench\n"
        "import app.cli.rpc_server, app.cli.cli_base, app.cli.options, app.cli.generate\n"
        "import app.api.serve, app.api.requests, app.api.responses, app.api.engine_bridge\n"
        "import app.api.connections, app.api.endpoints\n"
        "import app.host.worker, app.host.remote_worker, app.host.remote_client, app.host.reply\n"
        "import app.library.catalog, app.library.downloads, app.library.default_model, app.library.model_spec\n"
        "import app.main, app.settings, app.store\n"
        "app.cli.cli.build_parser()\n"
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


def test_the_circle_finder_finds_a_circle_through_a_function_level_import() -> None:
    graph = {"ui.theme": {"ui.markdown_view"}, "ui.markdown_view": {"ui.code_highlight"},
             "ui.code_highlight": {"ui.theme"}, "ui.about": {"ui.theme"}}  # fmt: skip
    assert circles(graph) == [["ui.code_highlight", "ui.markdown_view", "ui.theme"]]


def test_the_circle_finder_sees_circles_hidden_in_functions_and_not_type_only_ones(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("def g():\n    import pkg.a\n")
    (pkg / "d.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.e import E\n"
    )
    (pkg / "e.py").write_text("from pkg import d\n")
    graph = module_graph(tmp_path, ("pkg",))
    assert graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == set()
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert circles(module_graph(tmp_path, ("pkg",), typing_too=True)) == [
        ["pkg.a", "pkg.b", "pkg.c"],
        ["pkg.d", "pkg.e"],
    ]


def test_no_import_circles_among_the_projects_modules() -> None:
    """A module in a circle cannot be read, tested or changed alone (ui/qt/theme.py and
    ui/chat/markdown_view.py were one: the theme pushed colours into the renderer; app/cli/cli.py
    was both the dispatcher and the helpers its subcommands imported back)."""
    found = circles(module_graph(ROOT, ("app", "engine", "ui", "tools")))
    assert not found, "import circles (move what both sides need into a third module):\n" + "\n".join(
        " -> ".join(group) for group in found
    )


def test_no_circles_even_among_the_imports_for_type_checking() -> None:
    """A circle that only the type checker follows is still two modules that know each other
    (ui/main_window.py and ui/shortcuts.py were one: the shortcuts reached into 14 members of
    the window; now the window hands them their handlers)."""
    found = circles(module_graph(ROOT, ("app", "engine", "ui", "tools"), typing_too=True))
    assert not found, "import circles through TYPE_CHECKING imports:\n" + "\n".join(
        " -> ".join(group) for group in found
    )


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers of every docstring in a parsed module (its own, its classes', its functions')."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def code_lines(path: Path) -> int:
    """A module's lines, its docstrings left out."""
    text = path.read_text(encoding="utf-8")
    return len(text.splitlines()) - len(docstring_lines(ast.parse(text)))


def test_a_long_module_says_why_at_its_top() -> None:
    long = {
        rel(p): n
        for folder in ("app", "engine", "ui")
        for p in sources(folder)
        if (n := code_lines(p)) > MAX_LINES
    }
    bad = [
        f"{f}: {n} lines"
        for f, n in sorted(long.items())
        if f not in SIZE_DEBT and LONG_REASON not in _docstring(ROOT / f)
    ]
    assert not bad, (
        f"over {MAX_LINES} lines of code: split it, or say at its top why it is one job "
        f"(a {LONG_REASON!r} paragraph in the module docstring):\n" + "\n".join(bad)
    )
    stale = sorted(f for f in SIZE_DEBT if f not in long)
    assert not stale, f"no longer over {MAX_LINES} lines, take them off SIZE_DEBT: {stale}"
    unearned = sorted(
        rel(p)
        for folder in ("app", "engine", "ui")
        for p in sources(folder)
        if rel(p) not in long and LONG_REASON in _docstring(p)
    )
    assert not unearned, (
        f"{MAX_LINES} lines of code or fewer: take the {LONG_REASON!r} paragraph off: {unearned}"
    )


def relay_signals(path: Path) -> list[tuple[int, str]]:
    """(line, Class.signal) for each signal of a class that is only fed by another signal of ours
    (`x.s.connect(self.t)` where s is a signal some class of the project declares, and the class
    never emits t itself) or by `getattr`, without "relays" in a comment on its declaration line."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    ours = _project_signals()
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        declared = {
            target.id: stmt.lineno
            for stmt in cls.body
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
            and getattr(stmt.value.func, "id", None) == "Signal"
            for target in stmt.targets
            if isinstance(target, ast.Name)
        }  # fmt: skip
        emitted, fed = set(), set()
        for node in ast.walk(cls):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "emit" and _is_self_attribute(node.func.value):
                emitted.add(node.func.value.attr)  # type: ignore[attr-defined]
            if node.func.attr == "connect" and node.args:
                target = node.args[0]
                if _is_self_attribute(target) and target.attr in declared:  # type: ignore[attr-defined]
                    source_signal = node.func.value
                    if (
                        isinstance(source_signal, ast.Attribute)
                        and source_signal.attr in ours
                        or isinstance(source_signal, ast.Call)
                    ):
                        fed.add(target.attr)  # type: ignore[attr-defined]
                if isinstance(target, ast.Call) and getattr(target.func, "id", None) == "getattr":
                    found.append((node.lineno, f"{cls.name}: a getattr relay"))
        for name in sorted(fed - emitted):
            line = declared[name]
            if "relays" not in lines[line - 1].partition("#")[2]:
                found.append((line, f"{cls.name}.{name}"))
    return found


def _is_self_attribute(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _project_signals() -> set[str]:
    """The names of every signal a class of the project declares (Qt's own, `clicked`..., are not ours)."""
    names = set()
    for folder in ("app", "ui"):
        for p in sources(folder):
            text = p.read_text(encoding="utf-8")
            names.update(re.findall(r"^\s+(\w+) = Signal\(", text, re.M))
    return names


def test_the_relay_finder_finds_a_forwarded_signal_and_not_an_own_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "class A(QObject):\n"
        "    reply_ended = Signal(object)\n"
        "    notice_changed = Signal(str)  # relays each child's: they come and go\n"
        "    message_added = Signal(object)\n"
        "    tint_toggled = Signal(bool)\n"
        "    def __init__(self, r):\n"
        "        r.reply_ended.connect(self.reply_ended)\n"
        "        r.notice_changed.connect(self.notice_changed)\n"
        "        r.message_added.connect(self.message_added)\n"
        "        self.check.toggled.connect(self.tint_toggled)\n"
        "        getattr(r, 'x').connect(getattr(self, 'x'))\n"
        "    def add(self):\n"
        "        self.message_added.emit(1)\n"
    )
    assert relay_signals(probe) == [(11, "A: a getattr relay"), (2, "A.reply_ended")]


def test_no_signal_is_a_relay_without_a_reason() -> None:
    bad = [
        f"{rel(p)}:{line}: {name}"
        for folder in ("app", "ui")
        for p in sources(folder)
        for line, name in relay_signals(p)
    ]
    assert not bad, (
        "signals fed only by another signal (connect the listener to the source, or say on the "
        "declaration why the relay is earned: '# relays ...: why'):\n" + "\n".join(bad)
    )


def class_size(cls: ast.ClassDef, docstrings: set[int]) -> tuple[int, int, int]:
    """(lines of code, methods, fields) of a class: fields are its annotated names (a dataclass's)
    and every `self.x` a method assigns."""
    methods = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    fields = {
        n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    for node in (n for m in methods for n in ast.walk(m)):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        fields.update(
            e.attr
            for t in targets
            for e in ast.walk(t)
            if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"
        )
    lines = sum(1 for n in range(cls.lineno, (cls.end_lineno or cls.lineno) + 1) if n not in docstrings)
    return lines, len(methods), len(fields)


def classes(path: Path) -> list[tuple[str, tuple[int, int, int]]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = docstring_lines(tree)
    return [(n.name, class_size(n, docstrings)) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]


def test_a_class_is_measured_by_its_code_methods_and_fields(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""A module."""\n'
        "class A:\n"
        '    """Two\n    lines."""\n'
        "    size: int = 0\n"
        "    def __init__(self):\n"
        '        """One line."""\n'
        "        self.a = self.b = 1\n"
        "        self.size += 1\n"
        "    def f(self):\n"
        "        self.c: int = 2\n"
        "        other.d = 3\n"
    )
    assert code_lines(probe) == 12 - 4
    assert classes(probe) == [("A", (11 - 3, 2, 4))]  # size, a, b, c; not other.d


def test_no_class_is_too_big_to_hold_in_mind_but_those_with_a_reason() -> None:
    sizes = {
        f"{rel(p)}:{name}": size
        for folder in ("app", "engine", "ui")
        for p in sources(folder)
        for name, size in classes(p)
    }
    over = {
        k: v for k, v in sizes.items() if v[0] > MAX_CLASS_LINES or v[1] > MAX_METHODS or v[2] > MAX_FIELDS
    }
    bad = [
        f"{k}: {v[0]} lines, {v[1]} methods, {v[2]} fields"
        for k, v in sorted(over.items())
        if k not in CLASS_WAIVERS
    ]
    assert not bad, (
        f"a class over {MAX_CLASS_LINES} lines of code, {MAX_METHODS} methods or {MAX_FIELDS} fields: "
        "split it by job, or give the reason in CLASS_WAIVERS:\n" + "\n".join(bad)
    )
    stale = sorted(k for k in CLASS_WAIVERS if k not in over)
    assert not stale, f"within the bounds now (or gone), take them off CLASS_WAIVERS: {stale}"
    grown = [
        f"{k}: {sizes[k]} (lines, methods, fields), at most {ceiling}"
        for k, ceiling in sorted(CLASS_CEILINGS.items())
        if any(n > most for n, most in zip(sizes[k], ceiling, strict=True))
    ]
    assert not grown, "a waived class grew past its ceiling (CLASS_CEILINGS): split it instead\n" + "\n".join(
        grown
    )
    assert set(CLASS_CEILINGS) <= set(CLASS_WAIVERS), "a ceiling is for a waived class"


def test_the_store_imports_no_room_above_it_but_its_listed_debt() -> None:
    """app/store.py sits below the rooms (each keeps its state there): an import of a room runs
    back up (it imported the reply buffer, app/host/reply.py, for ReplyText: now engine.events';
    and the document reader, app/library/documents.py, for Document: now app/document.py)."""
    rooms = tuple(r.replace("/", ".") for r in ROOMS)
    found = {m for _, m in imports(ROOT / "app" / "store.py") if within(m, rooms)}
    assert found <= set(STORE_DEBT), (
        f"app/store.py imports a room above it: {sorted(found - set(STORE_DEBT))}"
    )
    assert set(STORE_DEBT) <= found, (
        f"no longer imported, take them off STORE_DEBT: {sorted(set(STORE_DEBT) - found)}"
    )
