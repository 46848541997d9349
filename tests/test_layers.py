"""The layers' import arrows point down (docs/architecture.md): every module of the packages is
parsed with `ast` and each import it makes, at the top or inside a function, is held against the
rules below. A violation fails with the file, line and rule."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prober", "probes", "store", "reports", "suites")

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
    # arrow: the probe registry (prober/core) returns `type[Probe]` without importing probes/.
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


COMMAND_LAYER = ("prober.cli", "prober.commands")


def _rule_broken(importer: str, imported: str) -> str | None:
    """The rule `importer` breaks by importing `imported`, or None."""
    if _within(importer, "prober.core") and not _within(imported, "prober.core"):
        return "prober/core imports nothing else of the project"
    if _within(importer, "store") and not _within(imported, "store", "prober.core"):
        return "store/ imports only prober.core"
    # A probe talks to the runner through the ProbeContext protocol it defines itself (probes/base.py),
    # so it needs no adapter; suites.datasets is the shipped labelled data schema_order reads.
    if _within(importer, "probes") and not _within(imported, "probes", "prober.core", "suites.datasets"):
        return "probes/ import only prober.core (and suites.datasets)"
    if _within(importer, "suites") and not _within(imported, "suites", "probes", "prober.core"):
        return "suites/ import only probes/ and prober.core"
    if _within(importer, "reports") and _within(imported, "probes", "prober.alerting", "prober.runner",
                                                *COMMAND_LAYER):
        return "reports/ never import probes/, prober.alerting, the runner or the command layer"
    if _within(importer, "prober.alerting") and _within(imported, "reports", "prober.runner", *COMMAND_LAYER):
        return "prober/alerting never imports the runner, the command layer or reports/"
    if _within(imported, "prober.runner") and not _within(importer, "prober.runner", *COMMAND_LAYER):
        return "only the command layer (prober/cli.py, prober/commands/) imports the runner"
    if _within(imported, "prober.commands") and not _within(importer, *COMMAND_LAYER):
        return "only prober/cli.py imports prober/commands/"
    return None


def _violations(modules: dict[str, Path]) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {imported}: {rule}"
            for importer, path in sorted(modules.items())
            for line, imported in _imports(path, modules)
            if (rule := _rule_broken(importer, imported))]


def test_every_import_points_down_the_layers():
    modules = _project_modules()
    assert {"prober.core.records", "prober.alerting.alerts", "prober.runner", "store.store"} <= set(modules)
    violations = _violations(modules)
    assert not violations, "imports against the layering (docs/architecture.md):\n" + "\n".join(violations)


def test_the_rules_catch_the_arrows_they_forbid():
    modules = _project_modules()
    assert _rule_broken("store.rows", "prober.runner") == "store/ imports only prober.core"
    assert _rule_broken("reports.collect", "prober.alerting.slo") is not None
    assert _rule_broken("prober.alerting.drill", "prober.runner") is not None
    assert _rule_broken("prober.session", "prober.runner") is not None
    assert _rule_broken("prober.commands.run", "prober.runner") is None
    assert _rule_broken("probes.latency", "prober.targets.adapter") is not None
    assert _rule_broken("prober.core.stats", "prober.emulator") is not None
    assert _imports(modules["prober.runner"], modules)   # the walk sees imports at all
    assert ("probes.base" not in {name for _, name in _imports(modules["prober.core.probe_registry"], modules)})
