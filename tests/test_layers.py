"""The layers' import arrows point down (docs/architecture.md): every module of the packages is
parsed with `ast` and each import it makes, at the top or inside a function, is held against the
rules below. A violation fails with the file, line and rule."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prober",)

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every project module `path` imports; `from a import b` counts as a.b when
    b is a module."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    # An import under `if TYPE_CHECKING:` names a type for annotations and never runs, so it draws no
    # arrow: the probe registry (prober/core) returns `type[Probe]` without importing prober/probes/.
    type_only = {id(inner) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                 for inner in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                     for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in PACKAGES]
    return found


def _within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


# The layers are folders of the one `prober` package (docs/architecture.md): each rule names a folder
# and what it may (or must never) import.
COMMAND_LAYER = ("prober.commands", "prober.__main__")
RUN_SHELL = ("prober.run",)


def _rule_broken(importer: str, imported: str) -> str | None:
    """The rule `importer` breaks by importing `imported`, or None."""
    if _within(importer, "prober.core") and not _within(imported, "prober.core"):
        return "prober/core imports nothing else of the project"
    if _within(importer, "prober.store") and not _within(imported, "prober.store", "prober.core"):
        return "prober/store/ imports only prober.core"
    # A probe talks to the runner through the ProbeContext protocol it defines itself (prober/probes/base.py),
    # so it needs no adapter; prober.suites.datasets is the shipped labelled data schema_order reads.
    if _within(importer, "prober.probes") and not _within(imported, "prober.probes", "prober.core",
                                                          "prober.suites.datasets"):
        return "prober/probes/ import only prober.core (and prober.suites.datasets)"
    if _within(importer, "prober.suites") and not _within(imported, "prober.suites", "prober.probes", "prober.core"):
        return "prober/suites/ import only prober/probes/ and prober.core"
    if _within(importer, "prober.targets") and not _within(imported, "prober.targets", "prober.core"):
        return "prober/targets/ (adapters and transport) import only prober.core"
    if _within(importer, "prober.reports") and _within(imported, "prober.probes", "prober.alerting", *RUN_SHELL,
                                                       *COMMAND_LAYER):
        return "prober/reports/ never import prober/probes/, prober/alerting/, the run shell or the command layer"
    if _within(importer, "prober.alerting") and _within(imported, "prober.reports", *RUN_SHELL, *COMMAND_LAYER):
        return "prober/alerting never imports the run shell, the command layer or prober/reports/"
    if _within(importer, *RUN_SHELL) and _within(imported, "prober.alerting", "prober.reports", *COMMAND_LAYER):
        return "prober/run/ never imports prober/alerting/, prober/reports/ or the command layer"
    if _within(importer, "prober.local", "prober.emulator") and _within(imported, *RUN_SHELL, *COMMAND_LAYER,
                                                                         "prober.alerting", "prober.reports"):
        return "prober/local/ and prober/emulator/ never import the run shell, alerting, reports or commands"
    if _within(imported, "prober.run.runner") and not _within(importer, "prober.run.runner", *COMMAND_LAYER):
        return "only the command layer (prober/commands/) imports the runner"
    if _within(imported, *COMMAND_LAYER) and not _within(importer, *COMMAND_LAYER):
        return "nothing outside prober/commands/ imports the command layer"
    return None


def _violations(modules: dict[str, Path]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {imported}: {rule}"
            for importer, path in sorted(modules.items())
            for line, imported in _imports(path, modules)
            if (rule := _rule_broken(importer, imported))]


def test_every_import_points_down_the_layers():
    modules = _project_modules()
    assert {"prober.core.records", "prober.alerting.alerts", "prober.run.runner", "prober.store.store"} <= set(modules)
    violations = _violations(modules)
    assert not violations, "imports against the layering (docs/architecture.md):\n" + "\n".join(violations)


def test_the_rules_catch_the_arrows_they_forbid():
    modules = _project_modules()
    assert _rule_broken("prober.store.rows", "prober.run.runner") == "prober/store/ imports only prober.core"
    assert _rule_broken("prober.reports.collect", "prober.alerting.slo") is not None
    assert _rule_broken("prober.alerting.drill", "prober.run.runner") is not None
    assert _rule_broken("prober.run.session", "prober.run.runner") is not None
    assert _rule_broken("prober.commands.run", "prober.run.runner") is None
    assert _rule_broken("prober.run.session", "prober.commands.cli") is not None
    assert _rule_broken("prober.targets.openai", "prober.store.store") is not None
    assert _rule_broken("prober.probes.latency", "prober.targets.adapter") is not None
    assert _rule_broken("prober.core.stats", "prober.emulator") is not None
    assert _imports(modules["prober.run.runner"], modules)   # the walk sees imports at all
    assert ("prober.probes.base" not in {name for _, name in _imports(modules["prober.core.probe_registry"], modules)})


# The database drivers stay behind the store: callers catch the store's own errors
# (prober/store/errors.py), so that nothing else depends on how the store talks to its database.
DATABASE_LIBRARIES = ("sqlalchemy", "psycopg", "psycopg2")


def _library_imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level name) of every import of a database library in `path`: type-only ones too,
    since a driver's type in a signature outside the store is the same leak."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name.split(".")[0]) for name in names if name.split(".")[0] in DATABASE_LIBRARIES]
    return found


def _library_rule_broken(importer: str) -> str | None:
    if _within(importer, "prober.store"):
        return None
    return "only prober/store/ imports sqlalchemy or psycopg (others catch prober.store's errors)"


def test_only_the_store_imports_the_database_libraries():
    modules = _project_modules()
    violations = [f"{path.relative_to(ROOT)}:{line} imports {library}: {rule}"
                  for importer, path in sorted(modules.items())
                  for line, library in _library_imports(path)
                  if (rule := _library_rule_broken(importer))]
    assert not violations, "database libraries imported outside prober/store/:\n" + "\n".join(violations)
    # The walk sees the store's own imports, and the rule forbids the same import elsewhere.
    assert ("sqlalchemy" in {library for _, library in _library_imports(modules["prober.store.store"])})
    assert _library_rule_broken("prober.store.engine") is None
    assert _library_rule_broken("prober.commands.failures") is not None
    assert _library_rule_broken("prober.run.store_access") is not None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each import cycle among modules (Tarjan's strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_round_a_cycle():
    # Every import that runs counts, deferred ones inside functions too: a deferral hides a cycle from
    # the interpreter, not from the reader. A package's __init__ importing its own submodules is how a
    # package re-exports; those arrows are left out.
    modules = _project_modules()
    graph = {name: {imported for _, imported in _imports(path, modules) if imported in modules
                    and imported != name and not (path.name == "__init__.py" and _within(imported, name))}
             for name, path in modules.items()}
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]   # the check finds one
    assert _cycles(graph) == [], "modules that import each other at load time"


# docs/architecture.md lists every file of prober/ under its folder, so that a reader can find any.
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def _architecture_sections() -> dict[str, list[str]]:
    """Per folder bullet of the page's "Every file" section ("- `prober/run/`: ..."), the names it
    gives in backticks."""
    listing = ARCHITECTURE.read_text(encoding="utf-8").split("## Every file", 1)[1]
    sections = {}
    for bullet in listing.split("\n- "):
        if match := re.match(r"\s*`(prober/(?:[a-z_]+/)?)`:", bullet):
            sections[match.group(1)] = re.findall(r"`([^`]+)`", bullet[match.end():])
    return sections


def _unlisted(files: list[str], sections: dict[str, list[str]]) -> list[str]:
    missing = []
    for path in files:
        folder = max((key for key in sections if path.startswith(key)), key=len, default=None)
        rest = path[len(folder):] if folder else path
        if folder != "prober/" and rest == "__init__.py":
            continue                      # "every package folder also has its __init__.py"
        # a name is relative to its folder, or a whole repository path (as the cited-path test wants)
        if folder is None or not any(fnmatch(rest, name) or fnmatch(path, name) for name in sections[folder]):
            missing.append(path)
    return missing


def test_the_architecture_page_names_every_file_and_only_files_that_exist():
    files = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "prober").rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts)
    sections = _architecture_sections()
    assert {"prober/", "prober/run/", "prober/store/", "prober/core/"} <= set(sections)
    assert _unlisted(files, sections) == [], "files of prober/ that docs/architecture.md does not name"
    named = set(re.findall(r"`(prober/[\w/.*-]+)`", ARCHITECTURE.read_text(encoding="utf-8")))
    assert [name for name in sorted(named) if not list(ROOT.glob(name))] == [], "paths that do not exist"
    # The check sees a file missing from its folder's list.
    assert _unlisted(["prober/run/new_module.py", "prober/run/__init__.py"], sections) == ["prober/run/new_module.py"]
