"""The README's commands still work: its runnable blocks run against the emulator, every command and
option it names exists, and the report screenshot it shows is a real PNG.

A fenced block whose info string is `sh runnable` is run line by line (in one temporary directory,
so a later line sees what an earlier one wrote), each line in a shell of its own with the venv's
`prober` first on PATH. A line exits 0 unless its comment says `exit N`. `RUN_ID` is filled in with
the id of the latest run a line before it reported ("run id ..."), as a reader would copy it.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import prober

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SCREENSHOT = ROOT / "docs" / "report-screenshot.png"

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
EXPECTED_EXIT = re.compile(r"#.*\bexit (\d+)\b")
RUN_ID = re.compile(r"\brun id ([0-9a-f]{6,})\b")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z-]*)")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block."""
    return [(info.strip(), body) for info, body in FENCE.findall(text)]


def runnable_lines(text: str) -> list[str]:
    return [line.strip() for info, body in fenced_blocks(text) if info == "sh runnable"
            for line in body.splitlines() if line.strip() and not line.strip().startswith("#")]


def expected_exit(line: str) -> int:
    found = EXPECTED_EXIT.search(line)
    return int(found.group(1)) if found else 0


@pytest.mark.unit
def test_the_runnable_marker_and_exit_comments_are_read_as_documented():
    text = "```sh\nmake demo\n```\n\n```sh runnable\n# a comment\nprober runs\nprober run -s x   # exit 2\n```\n"
    assert runnable_lines(text) == ["prober runs", "prober run -s x   # exit 2"]
    assert [expected_exit(line) for line in runnable_lines(text)] == [0, 2]


@pytest.mark.emulator
def test_every_runnable_readme_line_exits_as_documented(tmp_path):
    lines = runnable_lines(README.read_text())
    assert len(lines) >= 5, "the README has lost its runnable blocks"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PROBER_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PROBER_DB", None)
    work = tmp_path / "work"
    work.mkdir()
    run_id = None
    for line in lines:
        command = line
        if "RUN_ID" in command:
            assert run_id is not None, f"{line!r} needs a run that an earlier line reported"
            command = command.replace("RUN_ID", run_id)
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == expected_exit(line), f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, line
        run_id = next(iter(RUN_ID.findall(done.stderr + done.stdout)[-1:]), run_id)


def _commands_named(text: str) -> list[tuple[tuple[str, ...], set[str]]]:
    """Every `prober ...` the README names, in inline code or a fenced shell line: the subcommand
    paths it covers (`prober local install / start` covers two) and the options it uses. A code span
    that starts with `--` continues the command before it (`prober compare A B` / `--target A`)."""
    prose = FENCE.sub("", text)
    # one list of spans per line: a `--...` span continues only a command on its own line
    lines = [INLINE_CODE.findall(line) for line in prose.splitlines()]
    lines += [[line] for info, body in fenced_blocks(text) if info.startswith("sh") for line in body.splitlines()]
    named: list[tuple[tuple[str, ...], set[str]]] = []
    for spans in lines:
        first_of_line = len(named)
        for span in spans:
            _name(span, named, continues=len(named) > first_of_line)
    return named


def _name(span: str, named: list[tuple[tuple[str, ...], set[str]]], continues: bool) -> None:
    span = span.split("#", 1)[0].strip().removeprefix(".venv/bin/").removeprefix("PROBER_WEBHOOK_SECRET=... ")
    if span.lstrip("[").startswith("--"):
        if continues:
            named[-1][1].update(OPTION.findall(span))
        return
    if not span.startswith("prober "):
        return
    path: list[str] = []
    for word in span.split()[1:]:
        if not re.fullmatch(r"[a-z][a-z_]*", word):
            break
        path.append(word)
    paths = [tuple(path)] if path else []
    # `prober local install [--rebuild] / start / stop`: the words after each slash are siblings
    for sibling in re.findall(r"/ ([a-z]+)", span):
        if path and sibling not in path:
            paths.append((*path[:-1], sibling))
    for one in paths:
        named.append((one, set(OPTION.findall(span))))

@pytest.mark.unit
def test_every_command_and_option_the_readme_names_exists(tmp_path):
    named = _commands_named(README.read_text())
    assert len(named) >= 20, "the README's commands were not found"
    helps: dict[tuple[str, ...], str] = {}
    options_of: dict[tuple[str, ...], set[str]] = {}
    for path, options in named:
        # `prober show RUN`: only the leading words that are subcommands form the path
        while path and path not in helps:
            result = prober(*path, "--help", cwd=tmp_path)
            if result.returncode == 0:
                helps[path] = result.stdout
                break
            path = path[:-1]
        assert path, f"no such command in the README: {named}"
        options_of.setdefault(path, set()).update(options)
    # the options of a command, or of a sibling named beside it (`local start [--port P]`)
    everything_local = "".join(text for path, text in helps.items() if path[:1] == ("local",))
    missing = []
    for path, options in options_of.items():
        text = helps[path] + (everything_local if path[:1] == ("local",) else "")
        missing += [f"prober {' '.join(path)} {option}" for option in sorted(options)
                    if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text)]
    assert missing == []


@pytest.mark.unit
def test_the_readme_screenshot_is_a_real_png_of_the_report():
    assert "](docs/report-screenshot.png)" in README.read_text()
    data = SCREENSHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    # a page a reader can read (tests/reports/test_site.py takes it at 1200 wide), not a thumbnail or a
    # blank: a screenshot of an empty page compresses to a few kilobytes
    assert width >= 800 and height >= 600, (width, height)
    assert 30_000 < len(data) < 3_000_000, len(data)


@pytest.mark.unit
def test_the_readme_names_the_distribution_not_the_taken_name():
    text = README.read_text()
    assert re.findall(r"pip install '?prober\b", text) == []
    assert "pip install llm-prober" in text

