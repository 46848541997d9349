"""The program's own options: `--version`, and `-h` as `--help` for the app and every command."""

from __future__ import annotations

import importlib.metadata

import pytest

from tests.support.cli import prober

# `prober local status --port 1` connects to a closed port.
pytestmark = pytest.mark.emulator


def test_version_is_the_installed_distributions(tmp_path):
    result = prober("--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"prober {importlib.metadata.version('llm-prober')}\n"


@pytest.mark.parametrize("command", [[], ["run"], ["export"], ["local"], ["local", "start"]])
def test_dash_h_is_help(tmp_path, command):
    short, long = prober(*command, "-h", cwd=tmp_path), prober(*command, "--help", cwd=tmp_path)
    assert short.returncode == long.returncode == 0, short.stderr + long.stderr
    assert short.stdout == long.stdout
    assert short.stdout.startswith(f"Usage: python -m prober {' '.join(command)}".rstrip())
    assert "-h, --help" in short.stdout


def test_usage_errors_exit_2_with_the_help_hint(tmp_path):
    unknown = prober("run", "--suite", "latency", "--no-such-option", cwd=tmp_path)
    assert unknown.returncode == 2
    assert "No such option" in unknown.stderr and "Try 'python -m prober run -h' for help." in unknown.stderr
    assert "Traceback" not in unknown.stderr
    missing = prober("show", cwd=tmp_path)
    assert missing.returncode == 2 and "Missing argument" in missing.stderr and "Traceback" not in missing.stderr


def test_a_command_exit_code_passes_through(tmp_path):
    # `local status` raises typer.Exit(1) when nothing listens: the code must reach the shell as is
    result = prober("local", "status", "--port", "1", cwd=tmp_path)
    assert result.returncode == 1 and result.stdout.strip() == "not running (port 1)"
