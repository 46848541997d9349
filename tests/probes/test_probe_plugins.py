"""Probes as plugins: every probe is found through the `prober.probes` entry-point group, the
built-ins too; a package installed for real (pip, into a directory on PYTHONPATH) adds a probe that
`prober run` runs against the emulator and `prober report` draws from its own declarations; a
broken or clashing plugin is one line and exit 2 naming its distribution; and prober/reports/ imports no
probe, so the declarations are the only way in."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import pytest

from prober.core import probe_registry as registry
from prober.core.probe_registry import GROUP, probe_class, probe_names
from prober.store import Store
from tests.support.cli import prober
from tests.support.history import share

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "external-probe"

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(300)]


# --- prober/reports/ renders declarations, it imports no probe ---------------------------------------------

def _module_level_imports(tree: ast.Module) -> list[str]:
    """Modules imported when the module is imported: its top-level statements, including those
    under a top-level if/try (not TYPE_CHECKING-only ones, which never run), never function bodies."""
    found: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append(node.module)
            elif isinstance(node, ast.If) and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)

    visit(tree.body)
    return found


def _imports_probes(source: str) -> list[str]:
    return [m for m in _module_level_imports(ast.parse(source))
            if m == "prober.probes" or m.startswith("prober.probes.")]


def test_reports_import_no_probe_at_module_level():
    # The check itself sees an import of a probe module, at the top or under a top-level try.
    assert _imports_probes("from prober.probes.penalty import NO_OP\n") == ["prober.probes.penalty"]
    guarded = "try:\n    import prober.probes.latency\nexcept ImportError:\n    pass\n"
    assert _imports_probes(guarded) == ["prober.probes.latency"]
    assert _imports_probes("def f():\n    from prober.probes import base\n") == []
    offenders = {path.name: found for path in sorted((ROOT / "prober" / "reports").rglob("*.py"))
                 if (found := _imports_probes(path.read_text()))}
    assert offenders == {}, f"prober/reports/ must find probes through prober.core.probe_registry: {offenders}"


# --- the built-ins come through the entry-point group ----------------------------------------------

def _probe_classes_in(path: Path) -> list[str]:
    """`name = "..."` of each class in a module that subclasses Probe."""
    names = []
    for node in ast.parse(path.read_text()).body:
        # `class XProbe(Probe[XParams])`: the base is Probe, subscripted with the parameter model
        bases = [b.value if isinstance(b, ast.Subscript) else b for b in getattr(node, "bases", [])]
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "Probe" for b in bases):
            for statement in node.body:
                targets = (statement.targets if isinstance(statement, ast.Assign)
                           else [statement.target] if isinstance(statement, ast.AnnAssign) else [])
                if ([t.id for t in targets if isinstance(t, ast.Name)] == ["name"]
                        and isinstance(getattr(statement, "value", None), ast.Constant)):
                    names.append(statement.value.value)
    return names


def test_every_builtin_probe_is_registered_in_pyproject_and_installed_metadata():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][GROUP]
    in_modules = sorted(name for path in (ROOT / "prober" / "probes").glob("*.py") for name in _probe_classes_in(path))
    assert in_modules == sorted(declared), "a probe class in prober/probes/ without its pyproject entry point, or back"
    installed = {ep.name: ep.value for ep in distribution(project["name"]).entry_points if ep.group == GROUP}
    assert installed == declared, "stale metadata: re-run pip install -e '.[test]'"
    assert set(declared) <= set(probe_names())
    for name in declared:
        assert probe_class(name).name == name


def test_a_probe_that_is_not_installed_has_no_declarations():
    assert probe_class("a_probe_from_the_future") is None


# --- third-party probes, installed for real --------------------------------------------------------

def _pip_install(source: Path, target: Path) -> None:
    """`pip install --no-deps` of a project directory into `target`, built from a copy (a build
    writes into the source tree) with the environment's setuptools, so nothing is downloaded."""
    copy = target.parent / f"{source.name}-src"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(copy)], check=True, capture_output=True, timeout=240)


def _config(tmp_path: Path, protocol: str = "openai") -> Path:
    config = tmp_path / "prober.toml"
    config.write_text(f'suite_paths = ["{EXAMPLE / "suites"}", "{tmp_path / "suites"}"]\n\n'
                      f'[store]\nurl = "sqlite:///{tmp_path / "p.db"}"\n\n[runner]\nprogress = false\n\n'
                      f'[targets.emulator]\nprotocol = "{protocol}"\nmodel = "emulator-1"\nemulator = {{ }}\n')
    return config


@pytest.fixture(scope="module")
def example_site(tmp_path_factory) -> Path:
    """examples/external-probe installed with pip into a directory of its own."""
    site = tmp_path_factory.mktemp("example") / "site"
    _pip_install(EXAMPLE, site)
    assert (site / "toolcall_probe" / "probe.py").is_file()
    return site


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_the_external_probe_example_installs_runs_and_renders_from_its_declarations(tmp_path, protocol,
                                                                                     example_site):
    config = _config(tmp_path, protocol)
    env = {"PYTHONPATH": str(example_site)}

    run = prober("run", "--suite", "tool_calls", "--target", "emulator", "--config", str(config),
                 cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    # Answers cut after 6 tokens: the forced tool is still called, its arguments are broken JSON.
    cut = prober("run", "--suite", "tool_calls", "--target", "emulator", "--config", str(config),
                 "--param", "max_tokens=6", cwd=tmp_path, env=env)
    assert cut.returncode == 0, cut.stdout + cut.stderr

    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        cut_run, full_run = store.list_runs(limit=2)
        for summary, valid in ((full_run, 1.0), (cut_run, 0.0)):
            samples = store.samples(summary["id"])
            assert {s["probe"] for s in samples} == {"tool_call"} and len(samples) == 36
            assert all(s["tool_calls"][0]["name"] == "get_weather" for s in samples)
            metrics = {(m["name"], m["labels"].get("tools")): m for m in store.metrics(summary["id"])}
            for tools in (1, 4, 16):
                assert metrics[("tool_call_rate", tools)]["value"] == 1.0
                assert metrics[("arguments_valid_rate", tools)]["value"] == valid
                assert metrics[("arguments_valid_rate", tools)]["n"] == 12

    out = tmp_path / "report"
    report = prober("report", "--config", str(config), "--format", "json", "--out", str(out), cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stdout + report.stderr
    [section] = json.loads(next(out.glob("*.json")).read_text())["sections"]
    [probe] = section["probes"]
    assert probe["probe"] == "tool_call"
    versus, trend = probe["plots"]
    assert versus["title"].startswith("Forced tool called") and versus["x_kind"] == "log2"
    assert {s["label"] for s in versus["series"]} == {"tool_call_rate", "arguments_valid_rate"}
    assert [p["x"] for p in versus["series"][0]["points"]] == [1, 4, 16]
    assert trend["title"] == "Valid tool arguments over time" and len(trend["series"][0]["points"]) == 2
    assert probe["examples"] and all(e["why"] == "arguments are not JSON" for e in probe["examples"])

    # Without the package the stored runs still render, as any probe's metrics do, with no charts.
    bare = prober("report", "--config", str(config), "--format", "json", "--out", str(tmp_path / "bare"),
                  cwd=tmp_path)
    assert bare.returncode == 0, bare.stderr
    [section] = json.loads(next((tmp_path / "bare").glob("*.json")).read_text())["sections"]
    assert section["probes"][0]["plots"] == [] and section["probes"][0]["metrics"]


def _plugin(tmp_path: Path, dist: str, probe: str, module_source: str) -> Path:
    """A one-module distribution `dist` registering `probe` as `<module>:Plugin`, installed into
    its own directory, which is returned."""
    module = dist.replace("-", "_")
    source = tmp_path / f"{dist}-project"
    source.mkdir()
    (source / f"{module}.py").write_text(module_source)
    (source / "pyproject.toml").write_text(
        f'[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{dist}"\nversion = "1.0"\n\n[project.entry-points."{GROUP}"]\n'
        f'{probe} = "{module}:Plugin"\n\n[tool.setuptools]\npy-modules = ["{module}"]\n')
    site = tmp_path / f"{dist}-site"
    _pip_install(source, site)
    return site


def test_a_plugin_that_fails_to_import_is_one_line_naming_its_distribution(tmp_path):
    site = _plugin(tmp_path, "broken-probe", "broken", "import a_module_nobody_installed\n")
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "uses_broken.toml").write_text('[[probes]]\nprobe = "broken"\n')
    run = prober("run", "--suite", "uses_broken", "--target", "emulator", "--config", str(_config(tmp_path)),
                 cwd=tmp_path, env={"PYTHONPATH": str(site)})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "probe 'broken' from broken-probe 1.0 failed to load (broken_probe:Plugin): ModuleNotFoundError" \
        in run.stderr
    if (tmp_path / "p.db").exists():
        with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
            assert store.list_runs() == []


def test_two_distributions_claiming_one_probe_name_is_one_line_naming_both(tmp_path):
    site = _plugin(tmp_path, "latency-impostor", "latency", "class Plugin:\n    name = 'latency'\n")
    run = prober("run", "--suite", "latency", "--target", "emulator", "--config", str(_config(tmp_path)),
                 cwd=tmp_path, env={"PYTHONPATH": str(site)})
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "probe 'latency' is registered twice" in run.stderr
    assert "latency-impostor 1.0 (latency_impostor:Plugin)" in run.stderr
    assert "llm-prober 0.1.0 (prober.probes.latency:LatencyProbe)" in run.stderr


def test_the_example_probe_judges_tool_calls_by_its_schema(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from toolcall_probe.probe import argument_problems, call_problems

    assert argument_problems({"city": "Lisbon", "unit": "celsius", "days": 3}) == []
    assert argument_problems({"city": "Lisbon", "unit": "kelvin", "days": True, "wind": 1}) == [
        "undeclared 'wind'", "'unit' is not one of ['celsius', 'fahrenheit']", "'days' is not of type integer"]
    assert argument_problems({"unit": "celsius"}) == ["missing 'city'"]
    assert argument_problems(["Lisbon"]) == ["arguments are not a JSON object"]
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "x", "unit": "celsius"}}
    assert call_problems({"tool_calls": [call]}) == ([], [])
    assert call_problems({"tool_calls": []}) == (["no tool call"], [])
    assert call_problems({"tool_calls": [{**call, "name": "lookup_0"}]}) == (
        ["called 'lookup_0' instead of 'get_weather'"], [])
    assert call_problems({"tool_calls": [call, call]}) == (["2 calls (get_weather, get_weather)"], [])
    assert call_problems({"tool_calls": [{**call, "id": None}]}) == (["the call has no id"], [])
    assert call_problems({"tool_calls": [{**call, "input": '{"ci', "parse_error": True}]}) == (
        [], ["arguments are not JSON"])


@pytest.fixture
def example_installed(example_site, monkeypatch):
    """The example importable in this process, the registry reading the entry points afresh."""
    caches = (registry._entries, registry.probe_class, registry.metric_family)
    monkeypatch.syspath_prepend(str(example_site))
    for cache in caches:
        cache.cache_clear()
    yield
    monkeypatch.undo()
    for cache in caches:
        cache.cache_clear()


def test_drift_judges_a_plugin_probe_by_its_declared_families(example_installed):
    from prober.alerting.drift import bad_direction
    from prober.alerting.run_values import run_values

    assert "tool_call" in probe_names()
    rows = [{"probe": "tool_call", "labels": {"tools": tools}, **share(name, hits, 12)}
            for tools in (1, 4) for name, hits in (("tool_call_rate", 12), ("arguments_valid_rate", 9),
                                                   ("error_rate", 0))]
    values = run_values(rows)
    # The numbers of tools are pooled (pooled_labels), into one family per quantity and run.
    assert sorted(values) == [("proportion", "tool_call", name, "{}")
                              for name in ("arguments_valid_rate", "error_rate", "tool_call_rate")]
    assert values[("proportion", "tool_call", "arguments_valid_rate", "{}")][0].n == 24
    assert bad_direction("tool_call", "arguments_valid_rate") == -1 and bad_direction("tool_call", "error_rate") == 1
