"""The layers' import arrows point down (docs/architecture.md): every module of the packages is
parsed with `ast` and each import it makes, at the top or inside a function, is held against the
rules below. A violation fails with the file, line and rule."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prober", "probes", "store", "reports", "suites")

# Today's arrows from reports/ into probes/: the charts and examples the penalty and schema-order
# probes will declare themselves (issue 14, item 1). Each must still exist, so that this list
# shrinks as they go.
KNOWN_REPORTS_TO_PROBES = {
    ("reports.examples", "probes.penalty"),
    ("reports.examples", "probes.schema_order"),
    ("reports.plots", "probes.penalty"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _project_modules() -> dict[str, Path]:
    return {_module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, module) of every project module `path` imports; `from a import b` counts as a.b when
    b is a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
        if (importer, imported) not in KNOWN_REPORTS_TO_PROBES:
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


def test_the_known_reports_to_probes_arrows_still_exist():
    modules = _project_modules()
    edges = {(importer, imported) for importer, path in modules.items() for _, imported in _imports(path, modules)}
    gone = KNOWN_REPORTS_TO_PROBES - edges
    assert not gone, f"no longer imported, remove from KNOWN_REPORTS_TO_PROBES: {sorted(gone)}"


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
