"""Request shapes: how long each request's prompt and answer are, and when a replayed trace sends it.

A shape is drawn per request index from a seed, so request i of a level has the same lengths in
every level of a run and in every run with the same seed (and the drawn lengths are stored with
each sample, so a run can be replayed). Lengths are `fixed`, `uniform` (inclusive bounds) or
`normal` (rounded, clipped to [min, max]), or drawn with replacement from a dataset file.

Files are JSONL, one request per line. A dataset line gives the lengths or the prompt itself:

    {"input_tokens": 512, "output_tokens": 128}
    {"prompt": "Summarize ...", "output_tokens": 64}      (output_tokens optional with a prompt)

A trace line adds the arrival time. Three layouts are read, the first key found wins:

    prober      {"timestamp_ms": 0, "input_tokens": 512, "output_tokens": 128}
    Mooncake    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [...]}
                (timestamp in ms since the first request)
    Azure       TIMESTAMP,ContextTokens,GeneratedTokens   (AzurePublicDataset's LLM inference
                traces: CSV, TIMESTAMP a wall-clock time "2023-11-16 18:15:46.6805900")

Every error names the file and the line, as a ConfigError (exit code 2), before any request.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from prober.core.errors import ConfigError
from prober.probes.base import ProbeParams
from prober.suites.datasets import json_lines, read_lines

# The keys a line may name each quantity with, in the order they are looked for.
_INPUT_KEYS = ("input_tokens", "input_length", "ContextTokens")
_OUTPUT_KEYS = ("output_tokens", "output_length", "GeneratedTokens")
_TIMESTAMP_MS_KEYS = ("timestamp_ms", "timestamp")
_AZURE_TIMESTAMP = "TIMESTAMP"


class LengthShape(BaseModel):
    """A length distribution, as a suite file gives it: { kind = "normal", mean = 512, std = 128 }."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["fixed", "uniform", "normal"] = "fixed"
    value: int | None = Field(None, ge=0, description="fixed: the length")
    low: int | None = Field(None, ge=0, description="uniform: the shortest length (inclusive)")
    high: int | None = Field(None, ge=0, description="uniform: the longest length (inclusive)")
    mean: float | None = Field(None, ge=0, description="normal: the mean")
    std: float | None = Field(None, ge=0, description="normal: the standard deviation")
    min: int = Field(1, ge=0, description="normal: draws below are raised to this")
    max: int | None = Field(None, ge=0, description="normal: draws above are lowered to this")

    @model_validator(mode="after")
    def _complete(self) -> LengthShape:
        needed = {"fixed": ("value",), "uniform": ("low", "high"), "normal": ("mean", "std")}[self.kind]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"a {self.kind} length needs {' and '.join(missing)}")
        if self.kind == "uniform" and self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"uniform length: low ({self.low}) is above high ({self.high})")
        if self.max is not None and self.min > self.max:
            raise ValueError(f"normal length: min ({self.min}) is above max ({self.max})")
        return self

    def draw(self, rng: np.random.Generator, count: int) -> list[int]:
        if self.kind == "fixed":
            assert self.value is not None            # the validator made sure
            return [self.value] * count
        if self.kind == "uniform":
            assert self.low is not None and self.high is not None
            return [int(v) for v in rng.integers(self.low, self.high, count, endpoint=True)]
        assert self.mean is not None and self.std is not None
        drawn = np.clip(np.rint(rng.normal(self.mean, self.std, count)), self.min, self.max)
        return [int(v) for v in drawn]


@dataclass(frozen=True, slots=True)
class RequestShape:
    """One request's lengths; `prompt` set when a dataset gave the text itself (its length in
    tokens then None unless the line gave it: the endpoint's usage counts it)."""

    input_tokens: int | None
    output_tokens: int
    prompt: str | None = None
    source: str = "drawn"          # "drawn", or "FILE:LINE" for a dataset or trace line

    def as_extra(self) -> dict[str, Any]:
        """What a sample stores of its shape, enough to send the same request again."""
        record: dict[str, Any] = {"output_tokens": self.output_tokens, "source": self.source}
        if self.input_tokens is not None:       # absent, not 0, when only the prompt is known
            record["input_tokens"] = self.input_tokens
        if self.prompt is not None:
            record["prompt_chars"] = len(self.prompt)
        return record


@dataclass(frozen=True)
class DatasetRow:
    """A dataset line: lengths, or a prompt whose answer length may be left to the output shape."""

    input_tokens: int | None
    output_tokens: int | None
    prompt: str | None
    source: str


@dataclass(frozen=True)
class TraceRequest:
    """A replayed request: sent `offset_s` after the replay starts, with the trace's lengths."""

    offset_s: float
    input_tokens: int
    output_tokens: int
    source: str


class ShapeSampler:
    """Request i's shape from (seed, i): the same index gets the same shape however many are
    drawn, and in whatever order. Shapes are drawn a block of indices at a time, from a generator
    seeded by (seed, block), so that a request costs the client next to nothing at send time."""

    BLOCK = 256

    def __init__(self, *, input_shape: LengthShape, output_shape: LengthShape,
                 dataset: list[DatasetRow] | None = None, seed: int = 0) -> None:
        self.input_shape, self.output_shape = input_shape, output_shape
        self.dataset, self.seed = dataset, seed
        self._blocks: dict[int, list[RequestShape]] = {}

    def shape(self, index: int) -> RequestShape:
        block, offset = divmod(index, self.BLOCK)
        shapes = self._blocks.get(block)
        if shapes is None:
            shapes = self._blocks[block] = self._draw_block(block)
        return shapes[offset]

    def _draw_block(self, block: int) -> list[RequestShape]:
        rng = np.random.default_rng([self.seed, block])
        if not self.dataset:
            return [RequestShape(i, o) for i, o in zip(self.input_shape.draw(rng, self.BLOCK),
                                                       self.output_shape.draw(rng, self.BLOCK), strict=True)]
        picks = rng.integers(len(self.dataset), size=self.BLOCK)
        outputs = self.output_shape.draw(rng, self.BLOCK)
        shapes = []
        for pick, drawn_output in zip(picks, outputs, strict=True):
            row = self.dataset[int(pick)]
            output = row.output_tokens if row.output_tokens is not None else drawn_output
            shapes.append(RequestShape(row.input_tokens, output, prompt=row.prompt, source=row.source))
        return shapes


def _records(path: str | os.PathLike[str], what: str) -> list[tuple[str, dict[str, Any]]]:
    """(where, object) per non-blank line of a JSONL file, or per row of an Azure-layout CSV."""
    path, lines = read_lines(path, what)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise ConfigError(f"{path}: the {what} file has no requests")
    if not first.lstrip().startswith("{"):
        return _csv_records(path, lines)
    records = []
    for where, raw in json_lines(path, lines):
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: each line must be a JSON object")
        records.append((where, raw))
    return records


def _csv_records(path: Path, lines: list[str]) -> list[tuple[str, dict[str, Any]]]:
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    header = [name.strip() for name in reader.fieldnames or []]
    if _AZURE_TIMESTAMP not in header:
        raise ConfigError(f"{path}: line 1: neither a JSON object nor the Azure trace header "
                          f"TIMESTAMP,ContextTokens,GeneratedTokens")
    reader.fieldnames = header
    records = []
    for row in reader:
        where = f"{path}: line {reader.line_num}"
        record: dict[str, Any] = {_AZURE_TIMESTAMP: row.get(_AZURE_TIMESTAMP)}
        for key in (*_INPUT_KEYS, *_OUTPUT_KEYS):
            if key in row:
                record[key] = _csv_int(row[key], where, key)
        records.append((where, record))
    return records


def _csv_int(value: str | None, where: str, key: str) -> int:
    try:
        return int((value or "").strip())
    except ValueError:
        raise ConfigError(f"{where}: {key}: must be a whole number of tokens, not {value!r}") from None


def _count(raw: dict[str, Any], keys: tuple[str, ...], where: str, *, required: bool) -> int | None:
    for key in keys:
        if key in raw:
            value = raw[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{where}: {key}: must be a whole number of tokens, 0 or more")
            return value
    if required:
        raise ConfigError(f"{where}: no {' / '.join(keys)}")
    return None


def load_dataset(path: str | os.PathLike[str]) -> list[DatasetRow]:
    """The rows of a request-shape dataset, in file order."""
    rows = []
    for where, raw in _records(path, "dataset"):
        prompt = raw.get("prompt")
        if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
            raise ConfigError(f"{where}: prompt: must be a non-empty string")
        output = _count(raw, _OUTPUT_KEYS, where, required=prompt is None)
        inputs = _count(raw, _INPUT_KEYS, where, required=prompt is None)
        rows.append(DatasetRow(inputs, output, prompt, source=_source(where)))
    return rows


def load_trace(path: str | os.PathLike[str], time_scale: float = 1.0) -> list[TraceRequest]:
    """A trace's requests in arrival order, the first at offset 0 and every gap times `time_scale`
    (0.5 replays it twice as fast)."""
    if not time_scale > 0 or not math.isfinite(time_scale):
        raise ConfigError(f"time_scale must be a positive number, not {time_scale!r}")
    stamped = []
    for where, raw in _records(path, "trace"):
        stamped.append((_timestamp_ms(raw, where), _count(raw, _INPUT_KEYS, where, required=True),
                        _count(raw, _OUTPUT_KEYS, where, required=True), _source(where)))
    stamped.sort(key=lambda item: item[0])             # stable: simultaneous arrivals keep file order
    origin = stamped[0][0]
    return [TraceRequest(offset_s=(ms - origin) / 1000 * time_scale, input_tokens=inputs or 0,
                         output_tokens=outputs or 0, source=source)
            for ms, inputs, outputs, source in stamped]


def _timestamp_ms(raw: dict[str, Any], where: str) -> float:
    if _AZURE_TIMESTAMP in raw:
        text = raw[_AZURE_TIMESTAMP]
        try:
            stamp = dt.datetime.fromisoformat(str(text).strip())
        except ValueError:
            raise ConfigError(f"{where}: TIMESTAMP: not a date and time: {text!r}") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=dt.UTC)
        return stamp.timestamp() * 1000
    for key in _TIMESTAMP_MS_KEYS:
        if key in raw:
            value = raw[key]
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ConfigError(f"{where}: {key}: must be a number of milliseconds")
            return float(value)
    raise ConfigError(f"{where}: no timestamp_ms / timestamp / TIMESTAMP")


def _source(where: str) -> str:
    """'FILE:LINE' from 'FILE: line N', short enough to store with every sample."""
    path, _, line = where.rpartition(": line ")
    return f"{Path(path).name}:{line}"


class RequestShapeParams(ProbeParams):
    """The shape parameters a probe's own parameters inherit (the latency suite's)."""

    input_shape: LengthShape | None = Field(None, description="prompt lengths in tokens; unset: every "
                                            "prompt input_tokens long")
    output_shape: LengthShape | None = Field(None, description="answer lengths (max_tokens) in tokens; "
                                             "unset: max_tokens")
    shapes_file: str | None = Field(None, description="JSONL of {input_tokens, output_tokens} or {prompt, "
                                    "output_tokens?}, drawn with replacement (prober/probes/shapes.py); a relative "
                                    "path is read next to the suite file")
    shape_seed: int = Field(0, description="seed of the drawn lengths: the same seed, the same requests")
    trace_file: str | None = Field(None, description="arrival = \"trace\": JSONL of {timestamp_ms, input_tokens, "
                                   "output_tokens}, Mooncake's or Azure's layout (prober/probes/shapes.py)")
    time_scale: float = Field(1.0, gt=0, description="trace replay: the trace's gaps are multiplied by "
                              "this (0.5 replays it twice as fast)")
    _dataset: list[DatasetRow] | None = PrivateAttr(None)
    _trace: list[TraceRequest] | None = PrivateAttr(None)

    @field_validator("shapes_file", "trace_file")
    @classmethod
    def _next_to_the_suite_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        # As for schema_order's dataset: a suite file and its data move together.
        context = info.context or {}
        if value is None or "suite_dir" not in context or info.field_name in context.get("from_command_line", ()):
            return value
        path = Path(value).expanduser()
        return str(path if path.is_absolute() else Path(context["suite_dir"]) / path)

    @model_validator(mode="after")
    def _read_files(self) -> RequestShapeParams:
        # A broken file is a configuration error, found before any request is sent.
        self._dataset = load_dataset(self.shapes_file) if self.shapes_file is not None else None
        self._trace = load_trace(self.trace_file, self.time_scale) if self.trace_file is not None else None
        return self

    def shape_sampler(self, input_tokens: int, max_tokens: int) -> ShapeSampler:
        """The sampler of these parameters; `input_tokens` and `max_tokens` are the fixed lengths
        used where no shape is given."""
        return ShapeSampler(input_shape=self.input_shape or LengthShape(value=input_tokens),
                            output_shape=self.output_shape or LengthShape(value=max_tokens),
                            dataset=self._dataset, seed=self.shape_seed)

    def trace(self) -> list[TraceRequest] | None:
        return self._trace
