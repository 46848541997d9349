"""Installs that fit: `pip install llm-prober` (no extras) runs SQLite stores, both protocols, reports
and CSV export; PostgreSQL and Parquet without their extra stop with one line naming the extra;
the CI lock file pins everything the test extra asks for.

"Not installed" is made real for every process of the command (the sample writer is a child
process): a sitecustomize on PYTHONPATH makes importing psycopg, pyarrow or pandas raise
ModuleNotFoundError, as in an environment that never had them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from tests.support.cli import prober
from tests.support.lock import lock_pins

# Each test starts prober as a child process, and some of those open sockets (the emulator, a
# closed PostgreSQL port).
pytestmark = pytest.mark.emulator

ROOT = Path(__file__).resolve().parents[2]
EXTRA_MODULES = ("psycopg", "pyarrow", "pandas")

_SITECUSTOMIZE = '''
import sys

ABSENT = {absent!r}


class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NotInstalled())
'''


def _without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """Environment for a `prober` subprocess in which `modules` cannot be imported."""
    # A directory per set of modules: rewriting one sitecustomize.py for the next set within the
    # same second, at the same size ("psycopg" and "pyarrow"), let Python run the first set's
    # cached bytecode wherever bytecode is written.
    site = tmp_path / f"absent-site-{'-'.join(sorted(modules))}"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(absent=set(modules)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))


def _one_error_line(result) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_blocker_really_hides_the_modules(tmp_path):
    for module in EXTRA_MODULES:
        probe = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                               env=_without(tmp_path, module), cwd=tmp_path)
        assert probe.returncode == 1 and f"No module named '{module}'" in probe.stderr, probe.stderr
        assert subprocess.run([sys.executable, "-c", f"import {module}"], cwd=tmp_path).returncode == 0


@pytest.mark.parametrize("url", ["postgresql://prober@127.0.0.1:1/prober",
                                 "postgresql+psycopg://prober:hunter2@127.0.0.1:1/prober",
                                 "postgres://prober@127.0.0.1:1/prober"])
def test_postgresql_without_the_extra_names_it(tmp_path, url):
    result = prober("runs", "--db", url, cwd=tmp_path, env=_without(tmp_path, "psycopg"))
    assert result.returncode == 2, result.stderr
    assert _one_error_line(result) == ("error: PostgreSQL stores need the postgres extra: "
                                       "pip install 'llm-prober[postgres]'")
    # with the driver present the same command gets as far as connecting (nothing listens on port 1)
    installed = prober("runs", "--db", url, cwd=tmp_path)
    assert installed.returncode == 2 and "cannot open the database" in _one_error_line(installed)


def test_parquet_without_the_extra_names_it_and_writes_nothing(tmp_path):
    out = tmp_path / "export"
    db = f"sqlite:///{tmp_path}/p.db"
    result = prober("export", "--format", "parquet", "--out", str(out), "--db", db, cwd=tmp_path,
                    env=_without(tmp_path, "pyarrow"))
    assert result.returncode == 2, result.stderr
    assert _one_error_line(result) == "error: Parquet export needs the parquet extra: pip install 'llm-prober[parquet]'"
    assert not out.exists()


def test_the_core_runs_stores_reports_and_exports_csv_without_any_extra(tmp_path):
    env = _without(tmp_path, *EXTRA_MODULES)
    db = f"sqlite:///{tmp_path}/p.db"
    for protocol in ("openai", "anthropic"):
        config = tmp_path / f"{protocol}.toml"
        config.write_text(f'[store]\nurl = "{db}"\n\n[runner]\nprogress = false\n\n'
                          f'[targets.emulated]\nprotocol = "{protocol}"\nmodel = "emulator-1"\n'
                          f'[targets.emulated.emulator]\n')
        run = prober("run", "--suite", "latency", "--target", "emulated", "--config", str(config),
                     "--param", "levels=[1]", "--param", "requests_per_level=3", "--param", "warmup=0",
                     "--param", "max_tokens=4", cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stdout + run.stderr
        assert re.search(r"\d+ samples stored in sqlite:///", run.stderr), run.stderr

    report = prober("report", "--format", "html", "--out", str(tmp_path / "site"), "--db", db, cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr
    assert Path(report.stdout.strip().splitlines()[-1]).is_file()

    export = prober("export", "--format", "csv", "--out", str(tmp_path / "csv"), "--db", db, cwd=tmp_path, env=env)
    assert export.returncode == 0, export.stderr
    samples = (tmp_path / "csv" / "samples.csv").read_text().splitlines()
    assert samples[0].startswith("id,") and len(samples) == 1 + 2 * 3


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(text).name for text in requirements}


def test_the_base_install_leaves_the_extras_out():
    project = _pyproject()["project"]
    assert _names(project["dependencies"]).isdisjoint(EXTRA_MODULES)
    extras = project["optional-dependencies"]
    assert _names(extras["postgres"]) == {"psycopg"} and _names(extras["parquet"]) == {"pyarrow"}
    test_extras = {extra for text in extras["test"] if Requirement(text).name == project["name"]
                   for extra in Requirement(text).extras}
    assert test_extras == {"postgres", "parquet"}


def _test_requirements() -> list[Requirement]:
    """What `pip install llm-prober[test]` asks for directly: the base, the test extra and the extras it names."""
    project = _pyproject()["project"]
    wanted, todo, seen = list(project["dependencies"]), ["test"], set()
    while todo:
        extra = todo.pop()
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if requirement.name == project["name"]:
                todo.extend(requirement.extras - seen)
            else:
                wanted.append(text)
    return [Requirement(text) for text in wanted]


def test_the_ci_lock_pins_every_requirement_of_the_test_extra():
    pins = lock_pins()
    linux_311 = {"python_version": "3.11", "sys_platform": "linux", "platform_machine": "x86_64"}
    for requirement in _test_requirements():
        if requirement.marker is not None and not Marker(str(requirement.marker)).evaluate(linux_311):
            continue
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{name} is not in requirements/ci.lock: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (name, pins[name])
    assert "psycopg-binary" in pins   # psycopg[binary]: the driver without a system libpq
