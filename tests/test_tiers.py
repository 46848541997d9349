"""The tiers and the timing retry, checked on small test files run by a child pytest with this
repository's own hooks (tests/conftest.py): a test without exactly one tier is refused at
collection, a `unit` test that opens a socket (itself or through a child process) fails, and a
retried timing test is listed in the summary with its failed attempt's message. And `make
test-fast`'s driver (scripts/test_fast.py): the rest at niceness 19 beside the timing tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# The child sessions are separate processes; their tests open sockets on purpose.
pytestmark = pytest.mark.emulator

REPO = Path(__file__).resolve().parents[1]
# The project's own markers (tiers and `timing`), so the child refuses what the project refuses.
MARKERS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
INI = "[pytest]\naddopts = --strict-markers -p no:cacheprovider\nmarkers =\n" + "".join(
    f"    {marker}\n" for marker in MARKERS)
CONFTEST = ("from tests.conftest import _unit_tests_open_no_sockets, pytest_collection_modifyitems, "
            "pytest_runtest_makereport, pytest_runtest_logreport, pytest_terminal_summary\n")


@pytest.fixture
def child(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    return pytester


def test_a_test_without_exactly_one_tier_is_refused_at_collection(child):
    child.makepyfile(test_some="""
        import pytest

        def test_untiered():
            pass

        @pytest.mark.unit
        @pytest.mark.emulator
        def test_two_tiers():
            pass

        @pytest.mark.unit
        def test_fine():
            pass
    """)
    result = child.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*every test needs exactly one tier marker*2 do not*",
                                 "*test_some.py::test_untiered: no tier marker",
                                 "*test_some.py::test_two_tiers: emulator, unit"])
    assert "test_fine" not in result.stderr.str()


def test_a_timing_test_whose_file_does_not_name_the_mark_is_refused_at_collection(child):
    # `make test-fast` runs the timing tests from the files that name the mark (TIMING_FILES);
    # this one is marked through a name that does not say so, and would run in neither run.
    child.makepyfile(test_some="""
        import pytest

        SLOW = getattr(pytest.mark, "tim" + "ing")

        @pytest.mark.emulator
        @SLOW
        def test_hidden():
            pass
    """)
    result = child.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a timing test's file must name timing_sensitive*1 do not*",
                                 "*test_some.py::test_hidden"])


def test_an_unregistered_marker_is_an_error(child):
    child.makepyfile(test_some="""
        import pytest

        @pytest.mark.fast
        def test_typo():
            pass
    """)
    assert child.runpytest_subprocess().ret != pytest.ExitCode.OK


def test_a_unit_test_that_opens_a_socket_fails_even_when_it_swallows_the_error(child):
    child.makepyfile(test_some="""
        import socket
        import subprocess
        import sys
        import pytest

        def _listen():
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen()
            return server

        @pytest.mark.unit
        def test_binds():
            _listen()

        @pytest.mark.unit
        def test_swallows():
            try:
                socket.create_connection(("127.0.0.1", 9), timeout=1)
            except Exception:
                pass

        @pytest.mark.unit
        def test_through_a_child():
            subprocess.run([sys.executable, "-c",
                            "import socket; socket.create_connection(('127.0.0.1', 9), timeout=1)"])

        @pytest.mark.unit
        def test_no_sockets():
            assert sum(range(10)) == 45

        @pytest.mark.emulator
        def test_emulator_may():
            server = _listen()
            socket.create_connection(server.getsockname(), timeout=1).close()
    """)
    result = child.runpytest_subprocess("-rA")
    # the calls of test_swallows and test_through_a_child pass: their teardown fails them
    result.assert_outcomes(passed=4, failed=1, errors=3)
    result.stdout.fnmatch_lines_random([
        "FAILED test_some.py::test_binds*UnitTestOpenedSocket*",
        "ERROR test_some.py::test_binds*unit test opened sockets*",
        "ERROR test_some.py::test_swallows*unit test opened sockets*",
        "ERROR test_some.py::test_through_a_child*unit test opened sockets*",
        "PASSED test_some.py::test_no_sockets",
        "PASSED test_some.py::test_emulator_may",
    ])


@pytest.mark.parametrize("workers", [None, "2"], ids=["one-process", "xdist-workers"])
def test_a_retried_timing_test_is_reported_and_retried_once_only(child, workers):
    child.makepyfile(test_some="""
        import pytest
        from tests.support.timing import timing_sensitive

        attempts = {"flaky": 0, "broken": 0}

        @pytest.mark.unit
        @timing_sensitive
        def test_flaky():
            attempts["flaky"] += 1
            assert attempts["flaky"] > 1, "late by 7.5 ms"

        @pytest.mark.unit
        @timing_sensitive
        def test_broken():
            attempts["broken"] += 1
            assert attempts["broken"] > 2, f"late by 40 ms (attempt {attempts['broken']})"
    """)
    # Under pytest-xdist (`make test-fast`) the attempts happen in a worker and must still reach the summary.
    result = child.runpytest_subprocess("-rA", *(["-n", workers] if workers else []))
    result.assert_outcomes(passed=1, failed=1)
    summary = result.stdout.str().split("timing tests retried")[1]
    assert "test_some.py::test_flaky: attempt 1 failed: late by 7.5 ms" in summary
    assert "test_some.py::test_broken: attempt 1 failed: late by 40 ms (attempt 1)" in summary
    assert "attempt 2" not in summary.split("short test summary")[0]   # two attempts in all
    # and in the test's own output
    result.stdout.fnmatch_lines(["*Captured stderr call*", "timing retry: attempt 1 of 2 failed*late by 7.5 ms*"])


@pytest.mark.parametrize("timed_fails", [False, True], ids=["all-pass", "timing-fails"])
def test_make_test_fast_runs_the_timing_tests_beside_the_rest_at_a_higher_priority(child, tmp_path, timed_fails):
    # scripts/test_fast.py: the rest at niceness 19, the timing tests at the caller's priority; a
    # failure in either run is the whole run's status, and the timing tests' output follows the rest's.
    seen = tmp_path / "niceness"
    seen.mkdir()
    child.makepyfile(test_some=f"""
        import os
        import pathlib
        import pytest
        from tests.support.timing import timing_sensitive

        SEEN = pathlib.Path({str(seen)!r})

        @pytest.mark.unit
        def test_rest():
            (SEEN / "rest").write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))

        @pytest.mark.unit
        @timing_sensitive
        def test_timed():
            (SEEN / "timed").write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
            assert not {timed_fails}, "late by 9 ms"
    """)
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "test_fast.py"), "1", "unit or emulator",
                           "test_some.py"], cwd=child.path, capture_output=True, text=True, timeout=120)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert (int((seen / "rest").read_text()), int((seen / "timed").read_text())) == (min(19, own + 19), own)
    assert done.returncode == (1 if timed_fails else 0), done.stdout + done.stderr
    rest, timing = done.stdout.split("timing tests (unit or emulator and timing)")
    assert "1 passed" in rest and "test_timed" not in rest
    assert ("1 failed" if timed_fails else "1 passed") in timing
    if timed_fails:
        assert "attempt 1 failed: late by 9 ms" in timing


def test_make_test_fast_without_its_arguments_is_one_line_and_exit_2():
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "test_fast.py")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().startswith("usage: test_fast.py WORKERS MARKS")
    assert len(done.stderr.strip().splitlines()) == 1
