"""Shared fixtures and the test tiers. Infrastructure fixtures live in tests/support/ and are
imported here so that every test module can use them by name.

Every test carries exactly one tier marker (registered in pyproject.toml):
  unit      no network sockets, loopback included (enforced below)
  emulator  talks to the in-repo emulator or other servers the test starts in Python
  real      talks to a llama-server from the shared cache
  infra     needs a system service: PostgreSQL, Alertmanager, Chromium, the forward proxy
`make test-fast` runs `unit or emulator`; `make test` runs all four.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from pathlib import Path

import pytest

from tests.support import writer_fork_server
from tests.support.alertmanager import alertmanager_url  # noqa: F401
from tests.support.event_loops import run_on  # noqa: F401
from tests.support.llama import llama_servers  # noqa: F401
from tests.support.postgres import postgres_url  # noqa: F401
from tests.support.timing import retry_summary_lines, take_retries

TIERS = ("unit", "emulator", "real", "infra")


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist starts its workers, which then share it
def pytest_sessionstart(session: pytest.Session) -> None:
    """Every sample writer of the session comes from one fork server with the SDK types preloaded,
    started by the session's first process from the environment before any test changed it
    (tests/support/writer_fork_server.py)."""
    writer_fork_server.start_or_share()


def pytest_collection_finish(session: pytest.Session) -> None:
    writer_fork_server.wait_until_ready()


def pytest_sessionfinish(session: pytest.Session) -> None:
    writer_fork_server.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test without a tier (or with two) would silently fall out of `make test-fast` or run in
    the wrong one: refuse to run until each test says which it is. So would a timing test whose
    file does not name the mark (TIMING_MARK)."""
    wrong = []
    hidden = []
    for item in items:
        tiers = sorted({marker.name for marker in item.iter_markers() if marker.name in TIERS})
        if len(tiers) != 1:
            wrong.append(f"  {item.nodeid}: {', '.join(tiers) or 'no tier marker'}")
        if item.get_closest_marker("timing") is not None and not _names_timing(item.path):
            hidden.append(f"  {item.nodeid}")
    _shared_fixture_users_first(items)
    if wrong:
        raise pytest.UsageError(
            f"every test needs exactly one tier marker of {', '.join(TIERS)} (see tests/conftest.py); "
            f"{len(wrong)} do not:\n" + "\n".join(wrong))
    if hidden:
        raise pytest.UsageError(
            "a timing test's file must name timing_sensitive or pytest.mark.timing, or `make test-fast` "
            f"misses it (the Makefile's TIMING_FILES); {len(hidden)} do not:\n" + "\n".join(hidden))


# What the Makefile's TIMING_FILES looks for: `make test-fast` runs the timing tests from the files
# that hold it, so a timing test marked elsewhere (a conftest, say) would run in neither of its runs.
TIMING_MARK = re.compile(r"timing_sensitive|mark\.timing")


@functools.cache
def _names_timing(path: Path) -> bool:
    return TIMING_MARK.search(path.read_text(encoding="utf-8")) is not None


def _shared_fixture_users_first(items: list[pytest.Item]) -> None:
    """The tests that share one of our session-scoped fixtures (the report store: about 12 s of
    CPU to build) move to the front, side by side. pytest-xdist hands each worker a contiguous
    run of tests to start with (`load` and `worksteal` alike), so one worker builds the fixture
    once; spread over the workers, each built its own. (`--dist loadgroup` would say this with a
    mark, but pytest-xdist 3.8 groups by an attribute pytest 9.2 no longer reads.)"""
    def shared(item: pytest.Item) -> str:
        info = getattr(item, "_fixtureinfo", None)
        for name in sorted(item.fixturenames):
            definitions = info.name2fixturedefs.get(name, ()) if info is not None else ()
            # Ours only: pytest's own (tmp_path_factory) are session-scoped and cheap.
            if any(definition.scope == "session" and definition.func.__module__.startswith("tests.")
                   for definition in definitions):
                return name
        return ""

    keys = {id(item): shared(item) for item in items}
    # Stable: within one fixture's users, and among the rest, the collection order stays.
    items.sort(key=lambda item: (keys[id(item)] == "", keys[id(item)]))


class UnitTestOpenedSocket(Exception):
    """Not an OSError, so that code under test which handles connection errors cannot absorb it."""


NO_SOCKETS_SITE = Path(__file__).parent / "support" / "no_sockets"


@pytest.fixture(autouse=True)
def _unit_tests_open_no_sockets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                                tmp_path_factory: pytest.TempPathFactory):
    """A `unit` test that connects or binds a network socket (loopback too) fails, so the marker
    cannot lie; so do Python child processes it starts (a `prober run` against the emulator, say),
    through tests/support/no_sockets/sitecustomize.py. Every attempt is also remembered and failed
    on teardown, in case the code under test swallows the error. A Unix-domain socket is allowed:
    it reaches no network, only another process on this machine, as a pipe does (multiprocessing's
    fork server, which starts the sample writer, takes requests on one)."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    attempts: list[str] = []
    child_log = tmp_path_factory.mktemp("sockets") / "attempts.log"
    monkeypatch.setenv("PROBER_TESTS_SOCKET_LOG", str(child_log))
    python_path = [str(NO_SOCKETS_SITE), os.environ.get("PYTHONPATH")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, python_path)))

    def refuse(operation: str):
        allowed = getattr(socket.socket, operation)

        def refused(sock: socket.socket, address, *args, **kwargs):
            if sock.family == socket.AF_UNIX:
                return allowed(sock, address, *args, **kwargs)
            attempts.append(f"{operation} {address!r}")
            raise UnitTestOpenedSocket(f"a unit test may not {operation} a socket ({address!r}): "
                                       "mark it `emulator`, `real` or `infra`")
        return refused

    for operation in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, operation, refuse(operation))
    yield
    if child_log.exists():
        attempts += child_log.read_text(encoding="utf-8").splitlines()
    if attempts:
        pytest.fail(f"unit test opened sockets (mark it `emulator`, `real` or `infra`): {'; '.join(attempts)}",
                    pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A timing test's failed attempts travel on its report (a pytest-xdist worker sends reports,
    not module state, to the process that prints the summary)."""
    outcome = yield
    if call.when == "call" and (retries := take_retries()):
        outcome.get_result().user_properties.append(("timing_retries", retries))


_reported_retries: list[tuple[str, int, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "timing_retries":
            _reported_retries.extend(tuple(retry) for retry in value)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    lines = retry_summary_lines(_reported_retries)
    if lines:
        terminalreporter.section("timing tests retried", sep="=", yellow=True, bold=True)
        for line in lines:
            terminalreporter.line(line)
