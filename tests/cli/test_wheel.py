"""The distribution as a user installs it: the sdist and the wheel built, the wheel installed (not
editable) into a fresh venv, and `prober` run from there.

The editable install of development hides what only the built wheel shows: a module or a data file
that the sdist or the wheel leaves out, a second top-level package that merges with another
distribution's (`store/`, `reports/`) and is deleted with it, an import that a user's own package
in the working directory shadows. So the build runs from a copy of the tracked files, the wheel is
built from the unpacked sdist (what pip does with an sdist), and the installed `prober` runs from a
directory that holds its own `store/` and `reports/` packages, with no path back to this checkout.

The build needs no network (the environment's setuptools, no build isolation); the fresh venv takes
the runtime dependencies from the package index at the versions of requirements/ci.lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import prober
from tests.support.lock import lock_pins
from tests.support.tree import ROOT, tracked_files
from tests.support.writer_fork_server import ENV as WRITER_FORK_SERVER_ENV

pytestmark = pytest.mark.emulator

DIST_NAME = "llm-prober"
DIST_INFO = f"llm_prober-{prober.__version__}.dist-info"
# A run of seconds: two levels of six requests of four tokens.
TINY_LATENCY = ("-p", "levels=[1, 2]", "-p", "requests_per_level=6", "-p", "warmup=0", "-p", "max_tokens=4",
                "-p", "input_tokens=16")
# What a user's own packages in the working directory do if prober ever imports them instead of its
# own: fail loudly, naming themselves.
_SHADOW = 'raise ImportError("the working directory\'s own {name!r} package was imported")\n'


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def prober(self) -> Path:
        return self.venv / "bin" / "prober"


def _run(args: list[str | Path], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run a command with an environment that points at neither this checkout nor the test
    session's writer fork server; fail with its output when it fails."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONPATH", "VIRTUAL_ENV", WRITER_FORK_SERVER_ENV, "PROBER_DB", "PROBER_CONFIG")}
    env.update(NO_COLOR="1", COLUMNS="200")
    done = subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def _pip(python: Path, *args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """This environment's pip acting on `python`'s environment (pip --python), so the fresh venv
    needs no pip of its own."""
    return _run([sys.executable, "-m", "pip", "--python", python, "--quiet", *args], cwd, timeout)


def _build_wheel(project: Path, out: Path) -> Path:
    """`pip wheel` without build isolation or an index: the environment's setuptools builds it."""
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", out, project], project)
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("wheel")
    # A copy of the tracked files: a build writes build/ and *.egg-info into its source tree, and an
    # untracked file in the checkout must not reach the distribution.
    source = base / "source"
    for name in tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    # The sdist through setuptools' PEP 517 hook, as `python -m build --sdist --no-isolation` calls it.
    (base / "sdist").mkdir()
    done = _run([sys.executable, "-c", "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))",
                 base / "sdist"], source)
    sdist = base / "sdist" / done.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as archive:
        archive.extractall(base / "unpacked", filter="data")
    (unpacked,) = (base / "unpacked").iterdir()
    wheel = _build_wheel(unpacked, base / "dist")

    venv = base / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], base)
    constraints = base / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in lock_pins().items()))
    # --no-compile: byte-compiling all of SciPy and NumPy at install time would be most of the
    # install's CPU; the commands compile what they import.
    _pip(venv / "bin" / "python", "install", "--no-compile", "--constraint", constraints, wheel, cwd=base)
    return Built(sdist, wheel, venv)


def _user_directory(tmp_path: Path) -> Path:
    """A working directory with the user's own `store/` and `reports/` packages in it."""
    work = tmp_path / "work"
    for package, modules in (("store", ("__init__",)), ("reports", ("__init__", "collect"))):
        (work / package).mkdir(parents=True)
        for module in modules:
            (work / package / f"{module}.py").write_text(_SHADOW.format(name=f"{package}.{module}"))
    return work


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_ships_prober_and_nothing_else_at_the_top_level(built):
    names = _wheel_names(built.wheel)
    assert {name.split("/", 1)[0] for name in names} == {"prober", DIST_INFO}
    with zipfile.ZipFile(built.wheel) as archive:
        record = archive.read(f"{DIST_INFO}/RECORD").decode()
        metadata = archive.read(f"{DIST_INFO}/METADATA").decode()
        top_level = archive.read(f"{DIST_INFO}/top_level.txt").decode()
    recorded = {line.split(",", 1)[0].split("/", 1)[0] for line in record.splitlines() if line}
    assert recorded == {"prober", DIST_INFO}
    assert top_level.split() == ["prober"]
    assert f"Name: {DIST_NAME}\n" in metadata


def test_the_sdist_holds_every_file_the_wheel_needs(built):
    with tarfile.open(built.sdist) as archive:
        in_sdist = {member.name.split("/", 1)[1] for member in archive.getmembers() if member.isfile()}
    package = [name for name in tracked_files() if name.startswith("prober/")]
    assert set(package) <= in_sdist, sorted(set(package) - in_sdist)
    assert {"pyproject.toml", "README.md"} <= in_sdist
    # The wheel was built from the unpacked sdist: it holds every tracked file of the package, the
    # suite files, templates and data included.
    in_wheel = {name for name in _wheel_names(built.wheel) if name.startswith("prober/")}
    assert set(package) == in_wheel, (sorted(set(package) - in_wheel), sorted(in_wheel - set(package)))
    assert any(name.startswith("prober/suites/") and name.endswith(".toml") for name in in_wheel)
    assert any(name.startswith("prober/reports/templates/") for name in in_wheel)


def test_the_installed_wheel_runs_beside_the_users_own_store_and_reports_packages(built, tmp_path):
    work = _user_directory(tmp_path)
    where = _run([built.python, "-c", "import prober; print(prober.__file__)"], work).stdout.strip()
    assert Path(where).is_relative_to(built.venv), where          # the wheel's files, not this checkout
    assert _run([built.prober, "--version"], work).stdout.strip() == f"prober {prober.__version__}"
    listed = _run([built.prober, "suites"], work).stdout
    assert "latency" in listed and "caching" in listed, listed
    # python -m puts the working directory first on sys.path: its store/ and reports/ must stay unused
    assert _run([built.python, "-m", "prober", "suites"], work).stdout == listed
    ran = _run([built.prober, "run", "--suite", "latency", "--target", "emulator", *TINY_LATENCY], work)
    assert "12 samples stored in sqlite:///prober.db" in ran.stderr, ran.stderr     # the run's log lines
    report = _run([built.python, "-m", "prober", "report", "--out", "site"], work)
    assert (work / "site" / "index.html").is_file(), report.stdout


def test_a_distribution_that_ships_a_top_level_store_package_installs_and_leaves_without_harm(built, tmp_path):
    squatter = tmp_path / "squatter"
    for package in ("store", "reports"):
        (squatter / package).mkdir(parents=True)
        (squatter / package / "__init__.py").write_text(f"OWNER = 'someone-elses-{package}'\n")
    (squatter / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "someone-elses-store"\nversion = "1.0"\n\n'
        '[tool.setuptools]\npackages = ["store", "reports"]\n')
    wheel = _build_wheel(squatter, tmp_path / "dist")
    _pip(built.python, "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    owner = _run([built.python, "-c", "import store; print(store.OWNER)"], tmp_path).stdout.strip()
    assert owner == "someone-elses-store"                               # it really is installed beside
    ran = _run([built.prober, "run", "--suite", "latency", "--target", "emulator", *TINY_LATENCY], tmp_path)
    assert "12 samples stored" in ran.stderr, ran.stderr

    _pip(built.python, "uninstall", "--yes", "someone-elses-store", cwd=tmp_path)
    gone = subprocess.run([built.python, "-c", "import store"], capture_output=True, text=True, cwd=tmp_path)
    assert gone.returncode != 0 and "ModuleNotFoundError" in gone.stderr
    # Uninstalling it took none of prober's files: the command starts, and the store reads the run back.
    assert _run([built.prober, "--version"], tmp_path).stdout.strip() == f"prober {prober.__version__}"
    listed = _run([built.prober, "runs"], tmp_path).stdout
    assert "latency" in listed and "complete" in listed, listed
