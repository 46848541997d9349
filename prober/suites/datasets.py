"""Labelled datasets in JSONL: one item per line, {"id", "input", "label", "choices"?}.

`input` is what the model is asked (sent as the user message, verbatim), `label` the one right
answer, `choices` (optional) the closed set of answers, which becomes the answer field's enum. The
shipped schema-order dataset lives next to the suite files (data/schema_order.jsonl, written by
scripts/make_schema_order_dataset.py); users point a suite at their own file in the same format.
Every error names the file and the line.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

from prober.core.errors import ConfigError

SHIPPED_SCHEMA_ORDER = Path(__file__).parent / "data" / "schema_order.jsonl"


@dataclass(frozen=True)
class LabelledItem:
    id: str
    input: str
    label: str
    choices: tuple[str, ...] | None = None


def _item(raw: object, where: str) -> LabelledItem:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: each line must be a JSON object")
    unknown = set(raw) - {"id", "input", "label", "choices"}
    if unknown:
        raise ConfigError(f"{where}: {min(unknown)}: unknown key (expected id, input, label, choices)")
    for key in ("id", "input", "label"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ConfigError(f"{where}: {key}: must be a non-empty string")
    choices = raw.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
            raise ConfigError(f"{where}: choices: must be a non-empty list of strings")
        if raw["label"] not in choices:
            raise ConfigError(f"{where}: label {raw['label']!r} is not one of its choices")
        choices = tuple(choices)
    return LabelledItem(id=raw["id"], input=raw["input"], label=raw["label"], choices=choices)


def read_lines(path: str | os.PathLike[str], what: str = "dataset") -> tuple[Path, list[str]]:
    """A data file's path and lines; a missing or unreadable file is a ConfigError naming it."""
    path = Path(path).expanduser()
    try:
        return path, path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc}") from None


def json_lines(path: Path, lines: list[str]) -> list[tuple[str, object]]:
    """("FILE: line N", the parsed value) per non-blank line; a line that is not JSON is a
    ConfigError naming it."""
    parsed = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}: line {number}"
        try:
            parsed.append((where, json.loads(line)))
        except ValueError as exc:
            raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    return parsed


def load_labelled_jsonl(path: str | os.PathLike[str]) -> list[LabelledItem]:
    """The items of a JSONL dataset, in file order; blank lines are skipped."""
    path, lines = read_lines(path)
    items: list[LabelledItem] = []
    seen: set[str] = set()
    for where, raw in json_lines(path, lines):
        item = _item(raw, where)
        if item.id in seen:
            raise ConfigError(f"{where}: id {item.id!r} used twice")
        seen.add(item.id)
        items.append(item)
    if not items:
        raise ConfigError(f"{path}: the dataset has no items")
    return items


@functools.lru_cache(maxsize=8)
def items_by_input(path: str) -> dict[str, LabelledItem]:
    """A dataset indexed by its input text (the emulator recognises an item by its user message)."""
    return {item.input: item for item in load_labelled_jsonl(path)}
