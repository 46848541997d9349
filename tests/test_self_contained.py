"""The repository stands on its own: nothing in it reads or cites a file outside it, and every
repository path that a doc or a Python comment names exists.

A clean clone is all CI and a new maintainer have. A path into the author's machine (a workspace
folder, a home directory) or a citation of design notes that were never committed works only where
it was written; a path that a file move left behind sends the reader to nothing. Both are found by
reading the tracked tree, so the tests need no network and run in a second.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.support.tree import ROOT, tracked_files

pytestmark = pytest.mark.unit

# Absolute paths into somebody's machine rather than into the system or a deployment: /usr/bin/time,
# /etc/prober/prober.toml (the Kubernetes mount) and /data (the image's volume) are part of the
# documented setup; a workspace or a home directory is not. The look-behind keeps URL paths
# (https://host/home/...) and relative paths (a/work/b) out.
_OUTSIDE_ROOTS = ("work", "workspace", "home", "Users", "root", "mnt", "media", "scratch")
_ABSOLUTE_OUTSIDE = re.compile(r"(?<![\w.:/~-])/(?:" + "|".join(_OUTSIDE_ROOTS) + r")/")
# The design notes and the reference sheets that stayed outside the repository, and the way to
# reach them from a worktree.
_OUTSIDE_CITATIONS = {
    "a parent folder's shared material": re.compile(r"\.\./shared\b|\bshared/reference\b"),
    "design notes that are not in the repository": re.compile(r"\bDESIGN\.md\b"),
    "a reference sheet that is not in the repository": re.compile(r"(?<![\w/.-])reference/[\w.-]+\.md\b"),
}


def _text(name: str) -> str | None:
    """The file's text, None for a binary file."""
    try:
        return (ROOT / name).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(name: str, text: str) -> Iterator[str]:
    """`file:line: what` for every absolute path into a machine and every outside citation."""
    for number, line in enumerate(text.splitlines(), 1):
        for match in _ABSOLUTE_OUTSIDE.finditer(line):
            yield f"{name}:{number}: absolute path {line[match.start():].split()[0]!r}"
        for what, pattern in _OUTSIDE_CITATIONS.items():
            for match in pattern.finditer(line):
                yield f"{name}:{number}: {what} ({match.group(0)!r})"


# --- which repository paths a text names -----------------------------------------------------------

# Suffixes of the files the repository holds: a path-like word ending in one of these is a file's
# name even outside the known folders (a probe module cited by its folder from before the package move).
_SUFFIXES = (".py", ".md", ".toml", ".sh", ".yaml", ".yml", ".json", ".jsonl", ".lock", ".sse", ".http", ".j2")
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+")
_PATH = re.compile(r"(?<![\w./~$<{-])(?:\.{1,2}/)*[\w.*-]+(?:/[\w.*-]*)+(?:/\.\.\.)?(?:::\w+)?")
# What a doc names that is not a repository file although it looks like one: files a command writes
# in the user's directory, paths on a server or in an image, and module-relative names of other
# projects. Listed by exact text so that a new stale path is never excused by accident.
_NOT_REPOSITORY_PATHS = frozenset()


@cache
def top_level_folders() -> frozenset[str]:
    return frozenset(name.split("/", 1)[0] for name in tracked_files() if "/" in name)


def _is_repository_path(word: str) -> bool:
    first = word.split("/", 1)[0]
    return first in top_level_folders() or word.endswith(_SUFFIXES)


def cited_paths(text: str) -> Iterator[str]:
    """Every word of `text` that names a repository path: it holds a `/` and either starts with a
    top-level folder of the repository or ends with the suffix of a file kind it holds."""
    text = _URL.sub(" ", text)
    for match in _PATH.finditer(text):
        word = match.group(0).split("::", 1)[0]
        if word.endswith("/..."):          # examples/scenarios/...: the folder
            word = word[: -len("/...")]
        word = word.rstrip(".")            # the sentence's full stop
        while word.startswith("./"):      # ./examples/external-probe is ours; ./prober.toml the user's
            word = word[len("./"):]
        if "/" not in word or word.startswith("/") or word in _NOT_REPOSITORY_PATHS:
            continue
        if _is_repository_path(word):
            yield word


def _exists(word: str, cited_from: Path) -> bool:
    """Whether the path exists relative to the repository root or to the citing file's folder (a
    folder's README names its own files); a glob must match something, and a module's path with a
    name after the dot (prober/reports/collect.anchors, as the code cites a function) needs the
    module to define that name."""
    for base in (ROOT, cited_from.parent):
        if "*" in word:
            if next(base.glob(word), None) is not None:
                return True
        elif (base / word).exists() or _names_a_definition(base / word):
            return True
    return False


def _names_a_definition(path: Path) -> bool:
    module, dot, name = path.name.partition(".")
    source = path.with_name(module + ".py")
    return bool(dot) and name.isidentifier() and source.is_file() and re.search(
        rf"^\s*(?:async def|def|class) {name}\b|^{name}\b.*=", source.read_text(), re.MULTILINE) is not None


def python_comments_and_docstrings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and each module, class and function docstring."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None and node.body:
                first = node.body[0].lineno
                for offset, line in enumerate(docstring.splitlines()):
                    yield first + offset, line


# Files whose whole-line `#` comments are prose too (a trailing `#` may sit inside a value).
_HASH_COMMENTED = (".toml", ".yaml", ".yml", ".sh", "Makefile", "Dockerfile")


def prose_lines(name: str, text: str) -> Iterator[tuple[int, str]]:
    """The lines of a file that are prose about the repository: all of a Markdown file, the comments
    and docstrings of a Python file, the whole-line comments of configuration files and scripts."""
    if name.endswith(".md"):
        yield from enumerate(text.splitlines(), 1)
    elif name.endswith(".py"):
        yield from python_comments_and_docstrings(text)
    elif name.endswith(_HASH_COMMENTED) or Path(name).name in _HASH_COMMENTED:
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#"):
                yield number, line


def missing_citations(name: str, text: str) -> Iterator[str]:
    for number, line in prose_lines(name, text):
        for word in cited_paths(line):
            if not _exists(word, ROOT / name):
                yield f"{name}:{number}: {word}"


# --- the extractor itself --------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "expected"), [
    ("the runner (prober/run/runner.py) starts it", ["prober/run/runner.py"]),
    ("see `docs/operations.md`, and tests/support/timing.py.", ["docs/operations.md", "tests/support/timing.py"]),
    ("examples/scenarios/... hold the scenarios", ["examples/scenarios"]),
    ("tests/cli/test_wheel.py::test_the_wheel_runs names one test", ["tests/cli/test_wheel.py"]),
    ("a stale probes/latency.py from before the move", ["probes/latency.py"]),
    ("globs count too: prober/suites/*.toml", ["prober/suites/*.toml"]),
    # not repository paths: URLs, absolute paths, words with a slash, module names, placeholders
    ("https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md", []),
    ("/etc/prober/prober.toml and ~/.cache/prober/local", []),
    ("input/output, ms/token and p50/p99", []),
    ("prober.run.runner and $PROBER_CACHE_DIR/llama.cpp/<version>/bin", []),
])
def test_the_extractor_finds_repository_paths_and_only_those(line, expected):
    assert list(cited_paths(line)) == expected


def test_the_extractor_reads_python_comments_and_docstrings_only():
    source = ('"""Module doc naming docs/a.md."""\n'
              'X = "prober/not/a/citation.py"   # but this names tests/b.py\n'
              'def f():\n    """Names\n    scripts/c.sh too."""\n')
    assert [(n, list(cited_paths(t))) for n, t in python_comments_and_docstrings(source) if list(cited_paths(t))] \
        == [(2, ["tests/b.py"]), (1, ["docs/a.md"]), (5, ["scripts/c.sh"])]


def test_the_patterns_find_what_they_are_for():
    # Written in pieces, so that the tree test does not find them in this file.
    text = ("read /" + "work/shared/notes.txt and ../" + "shared/ref" + "erence/a.md,\n"
            "as DESIGN" + ".md says; see ref" + "erence/hosted-apis.md\n"
            "https://example.com/home/x and /etc/prober/prober.toml are fine\n")
    found = list(outside_references("x.md", text))
    assert [line.split(":")[1] for line in found] == ["1", "1", "2", "2"], found


# --- the tree ----------------------------------------------------------------------------------------

def test_no_file_reads_or_cites_a_path_outside_the_repository():
    found = [problem for name in tracked_files() if (text := _text(name)) is not None
             for problem in outside_references(name, text)]
    assert found == [], "outside the repository:\n" + "\n".join(found)


def test_every_repository_path_a_doc_or_a_comment_names_exists():
    found = [problem for name in tracked_files() if (text := _text(name)) is not None
             for problem in missing_citations(name, text)]
    assert found == [], "cited paths that do not exist:\n" + "\n".join(found)
