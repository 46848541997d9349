"""Penalty: how frequency, presence and repetition penalties corrupt structured output.

A repetition penalty pushes hardest on exactly the tokens a grammar must repeat: quotes, braces,
commas, field names. Additive penalties grow with the count, so corruption starts deep in a long
array and worsens with length (`user_id` -> `userId`, `"` -> `'`, an object that never closes);
under constrained decoding the same push turns into arrays that close early, dropped optional
fields and drifting values, with 100% parse success. Gateways, framework defaults and copied chat
presets inject such penalties without anyone noticing.

The task: a JSON object `{"records": [...]}` of n user records with fixed fields (user_id,
user_name, user_email, created_at, is_active, and score, which may be null: the optional field), from
a shipped prompt with a one-record example. Modes: `unconstrained` (the prompt alone),
`json_object`, `json_schema` (strict) and `tool` (a forced tool call with the schema as its input
schema). On the Anthropic protocol `json_schema` is sent as `tool` (labelled so) and `json_object`,
which it has no equivalent for, is skipped (`skipped{mode, reason}`).

The grid, per mode, n_records and temperature: an explicit baseline with every penalty at its no-op
value (frequency 0, presence 0, repetition 1.0), an `omitted` baseline with no penalty field at all,
then one penalty varied at a time. Penalties are sent on every protocol: an endpoint that refuses
a field (the hosted Anthropic API: 400) has it dropped and recorded by the adapter, which is itself
a finding (`penalty_unsupported`). The OpenAI Responses API has no penalty parameter at all: a target
on it is skipped with one line in the run's output, and nothing is sent. The repetition penalty goes
out under each name in `repetition_penalty_fields` (vLLM and SGLang read `repetition_penalty`,
llama.cpp `repeat_penalty`). Requests are interleaved round by round, so slow drift of the endpoint
hits every cell alike.

Metrics, per cell (labels mode, n_records, penalty: its name, "none" for the explicit baseline or
"omitted"; penalty_value: None for the baselines; temperature); every rate has a Wilson 95% interval:
- `parse_rate`, `key_drift_rate` (renamed or unexpected keys), `premature_stop_rate` (a stop with
  fewer records than asked or a structure left open; a cut by max_tokens is `truncation_rate`),
  `quote_substitution_rate`, `corruption_rate` (anything wrong that truncation does not explain,
  see prober/probes/penalty_analysis.py), in constrained modes `dropped_optional_rate` and
  `value_drift_rate`; `error_rate` over all requests; the rest over the requests that succeeded;
- `first_corruption_index`: mean index of the record where the first corruption falls (the
  records intact before it), over the corrupted answers; `records_delivered`: mean closed records
  per request;
- `baseline_match_rate` (omitted and penalty cells): share of answers byte-identical to one of the
  explicit baseline's;
- `penalty_effect` (penalty cells): corruption rate minus the explicit baseline's, with Newcombe's
  interval; its Fisher exact two-sided p-value is the separate metric `penalty_effect_p` with the
  same labels (p-values are values, not labels, so each series keeps one identity across runs).

Checks (value 1 flagged, 0 not, None when there is too little to tell):
- `penalties_applied_when_omitted` (labels mode, n_records, temperature): the omitted baseline
  against the explicit one, beyond the endpoint's own divergence. Each answer's agreement is its
  longest common prefix with an explicit baseline answer (the explicit ones are measured against
  the others, leaving themselves out). Flagged when every omitted answer agrees less than every
  explicit answer does: under no injection that happens with probability 1 / C(m + k, k) for m
  explicit and k omitted answers, so it is only judged where that is at most `check_alpha`.
- `penalty_ignored` (the strongest value of each penalty in the grid): the penalty changed nothing
  at all, i.e. more than half of its answers are byte-identical to an explicit baseline answer.
  Judged only where the baseline reproduces itself (at least half its answers equal another of
  its answers): repeated baselines, never one, because llama-server's default slots are
  nondeterministic even for sequential requests. Cells whose penalty the endpoint refused are
  left to `penalty_unsupported`.
- `penalty_unsupported` (label penalty): the endpoint refused the field (under every name it was
  sent as) on the requests that carried it; `rejected_param_requests{param}` counts refusals.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from prober.core import stats
from prober.core.declarations import Chart, MetricFamily, NotableSample
from prober.core.records import ChatRequest, Metric, SampleRow
from prober.probes.base import ERROR_RATE, MetricCollector, Probe, ProbeContext, ProbeParams
from prober.probes.divergence import common_prefix_length
from prober.probes.penalty_analysis import CONSTRAINED_MODES, PenaltyAnalysis, analyse_records

# (field, type as the prompt states it, JSON schema); the last one may be null: the optional field.
FIELDS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("user_id", "integer, 1 for the first record and counting up", {"type": "integer"}),
    ("user_name", "string", {"type": "string"}),
    ("user_email", "string", {"type": "string"}),
    ("created_at", "ISO 8601 date-time string", {"type": "string"}),
    ("is_active", "boolean", {"type": "boolean"}),
    ("score", "number from 0 to 100, or null when unknown", {"type": ["number", "null"]}),
)
FIELD_NAMES = tuple(name for name, _, _ in FIELDS)
OPTIONAL_FIELDS = ("score",)
TOOL_NAME = "save_records"
NO_OP = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
Mode = Literal["unconstrained", "json_object", "json_schema", "tool"]

# One record, not a whole answer: a small model shown a complete array copies it and stops.
_EXAMPLE = json.dumps({"user_id": 1, "user_name": "alice", "user_email": "alice@example.com",
                       "created_at": "2024-03-01T09:30:00Z", "is_active": True, "score": 87.5})


def records_prompt(n_records: int) -> str:
    """The shipped prompt. Its first line is what the emulator recognises the task by."""
    fields = ", ".join(f'"{name}" ({kind})' for name, kind, _ in FIELDS)
    return (f"Generate {n_records} user records as JSON.\n"
            f'Reply with only a JSON object of the form {{"records": [...]}} whose "records" array holds '
            f"exactly {n_records} objects, with no other text.\n"
            f"Each object has these fields, in this order: {fields}.\n"
            f"Example of one record:\n{_EXAMPLE}")


def records_schema() -> dict[str, Any]:
    """Strict-mode compatible: every field required, the optional one nullable."""
    item = {"type": "object", "properties": {name: schema for name, _, schema in FIELDS},
            "required": list(FIELD_NAMES), "additionalProperties": False}
    return {"type": "object", "properties": {"records": {"type": "array", "items": item}},
            "required": ["records"], "additionalProperties": False}


def default_penalties() -> dict[str, list[float]]:
    return {"frequency_penalty": [0.3, 1.0], "presence_penalty": [0.5, 1.5], "repetition_penalty": [1.1, 1.3]}


class PenaltyParams(ProbeParams):
    modes: list[Mode] = Field(default_factory=lambda: list[Mode](["unconstrained", "json_object", "json_schema"]))
    n_records: list[int] = Field(default_factory=lambda: [10, 40, 100])
    temperatures: list[float] = Field(default_factory=lambda: [0.0, 0.2])
    penalties: dict[str, list[float]] = Field(default_factory=default_penalties,
                                              description="penalty -> values tried, one penalty at a time")
    repeats: int = Field(3, ge=1, description="requests per penalty cell")
    baseline_repeats: int = Field(4, ge=2, description="requests per baseline cell (explicit and omitted)")
    max_tokens: int | None = Field(None, ge=1, description="None: 64 + 64 per record")
    seed: int | None = Field(1234, description="sent where the protocol takes a seed (OpenAI)")
    concurrency: int = Field(1, ge=1, description="requests in flight; 1 keeps batching out of the outputs")
    repetition_penalty_fields: list[str] = Field(
        default_factory=lambda: ["repetition_penalty", "repeat_penalty"], min_length=1,
        description="wire names the repetition penalty is sent under")
    check_alpha: float = Field(0.05, gt=0, lt=1, description="false-alarm bound of the injection check")

    @field_validator("n_records")
    @classmethod
    def _positive(cls, values: list[int]) -> list[int]:
        if not values or any(v < 1 for v in values):
            raise ValueError("n_records must be a non-empty list of positive integers")
        return sorted(set(values))

    @field_validator("temperatures")
    @classmethod
    def _temperatures(cls, values: list[float]) -> list[float]:
        if not values or any(v < 0 for v in values):
            raise ValueError("temperatures must be a non-empty list of values >= 0")
        return sorted(set(values))

    @field_validator("penalties")
    @classmethod
    def _known_penalties(cls, penalties: dict[str, list[float]]) -> dict[str, list[float]]:
        for name, values in penalties.items():
            if name not in NO_OP:
                raise ValueError(f"unknown penalty {name!r} (known: {', '.join(NO_OP)})")
            if not values:
                raise ValueError(f"penalty {name!r} needs at least one value")
        return {name: sorted(set(values)) for name, values in penalties.items()}

    @model_validator(mode="after")
    def _modes(self) -> PenaltyParams:
        if not self.modes:
            raise ValueError("modes must not be empty")
        return self

    def max_tokens_for(self, n_records: int) -> int:
        return self.max_tokens if self.max_tokens is not None else 64 + 64 * n_records


@dataclass(frozen=True)
class Cell:
    mode: str
    n_records: int
    temperature: float
    penalty: str                    # a penalty's name, "none" (explicit no-ops) or "omitted"
    penalty_value: float | None

    @property
    def labels(self) -> dict[str, Any]:
        return {"mode": self.mode, "n_records": self.n_records, "penalty": self.penalty,
                "penalty_value": self.penalty_value, "temperature": self.temperature}


# Protocols whose API takes none of the penalties, and why: the probe skips their targets.
NO_PENALTIES = {"openai-responses": "the OpenAI Responses API takes no frequency, presence or repetition "
                                    "penalty (ResponseCreateParams)"}


def wire_mode(mode: str, protocol: str) -> str | None:
    """The mode as sent on a protocol; None when the protocol cannot express it."""
    if protocol == "anthropic":
        return {"json_schema": "tool", "json_object": None}.get(mode, mode)
    return mode


def grid(params: PenaltyParams, protocol: str) -> list[tuple[Cell, int]]:
    """(cell, repeats) for every cell the probe sends, baselines first."""
    modes = list(dict.fromkeys(m for m in (wire_mode(mode, protocol) for mode in params.modes) if m))
    cells = []
    for mode in modes:
        for n in params.n_records:
            for temperature in params.temperatures:
                cells.append((Cell(mode, n, temperature, "none", None), params.baseline_repeats))
                cells.append((Cell(mode, n, temperature, "omitted", None), params.baseline_repeats))
                for name, values in params.penalties.items():
                    cells += [(Cell(mode, n, temperature, name, value), params.repeats) for value in values]
    return cells


def interleaved(cells: list[tuple[Cell, int]]) -> list[Cell]:
    """Round r sends the r-th request of every cell that has one."""
    rounds = max((repeats for _, repeats in cells), default=0)
    return [cell for r in range(rounds) for cell, repeats in cells if r < repeats]


def penalty_fields(name: str, params: PenaltyParams) -> list[str]:
    return list(params.repetition_penalty_fields) if name == "repetition_penalty" else [name]


def build_request(cell: Cell, params: PenaltyParams, protocol: str) -> ChatRequest:
    sampling: dict[str, Any] = {"temperature": cell.temperature}
    if protocol == "openai" and params.seed is not None:
        sampling["seed"] = params.seed
    if cell.penalty != "omitted":
        for name, no_op in NO_OP.items():
            value = cell.penalty_value if name == cell.penalty else no_op
            for wire in penalty_fields(name, params):
                sampling[wire] = value
    request = ChatRequest(messages=[{"role": "user", "content": records_prompt(cell.n_records)}],
                          max_tokens=params.max_tokens_for(cell.n_records), stream=True, sampling=sampling)
    if cell.mode == "json_object":
        request.json_object = True
    elif cell.mode == "json_schema":
        request.json_schema = {"name": "records", "schema": records_schema(), "strict": True}
    elif cell.mode == "tool":
        request.tools = [{"name": TOOL_NAME, "description": "Store the generated user records.",
                          "input_schema": records_schema()}]
        request.tool_choice = {"type": "tool", "name": TOOL_NAME}
    return request


def answer_text(row: SampleRow) -> str:
    """What the model answered: the forced tool call's input JSON in tool mode, else the text."""
    if (row.get("labels") or {}).get("mode") == "tool":
        for call in row.get("tool_calls") or []:
            if call.get("name") == TOOL_NAME:
                value = call.get("input")
                return value if isinstance(value, str) else json.dumps(value)
    return row.get("output_text") or ""


def analyse_row(row: SampleRow) -> PenaltyAnalysis:
    labels = row["labels"]
    return analyse_records(answer_text(row), int(labels["n_records"]), FIELD_NAMES, OPTIONAL_FIELDS,
                           row.get("finish_reason"), labels["mode"])


def injection_check(explicit: Sequence[str], omitted: Sequence[str], alpha: float) -> int | None:
    """1 when every omitted answer agrees with the explicit baseline less than every explicit answer
    agrees with the other explicit ones (longest common prefix); None when the counts are too small
    for that to be rare (probability 1 / C(m + k, k) without injection) under `alpha`."""
    m, k = len(explicit), len(omitted)
    if m < 2 or k < 1 or 1 / math.comb(m + k, k) > alpha:
        return None
    explicit_agreement = [max(common_prefix_length(a, b) for j, b in enumerate(explicit) if j != i)
                          for i, a in enumerate(explicit)]
    omitted_agreement = [max(common_prefix_length(a, b) for b in explicit) for a in omitted]
    return int(max(omitted_agreement) < min(explicit_agreement))


def ignored_check(explicit: Sequence[str], penalised: Sequence[str]) -> int | None:
    """1 when more than half of the penalised answers equal an explicit baseline answer byte for
    byte; None unless the baseline reproduces itself (half its answers equal another of its own)."""
    if len(explicit) < 2 or not penalised:
        return None
    reproduced = sum(1 for i, a in enumerate(explicit) if any(a == b for j, b in enumerate(explicit) if j != i))
    if 2 * reproduced < len(explicit):
        return None
    baseline = set(explicit)
    return int(2 * sum(1 for a in penalised if a in baseline) > len(penalised))


class PenaltyProbe(Probe[PenaltyParams]):
    name = "penalty"
    timing = "none"
    version = 1
    metric_names = frozenset({
        "skipped", "error_rate", "parse_rate", "key_drift_rate", "premature_stop_rate", "truncation_rate",
        "quote_substitution_rate", "corruption_rate", "dropped_optional_rate", "value_drift_rate",
        "first_corruption_index", "records_delivered", "baseline_match_rate", "penalties_applied_when_omitted",
        "penalty_effect", "penalty_effect_p", "penalty_ignored", "penalty_unsupported", "rejected_param_requests"})
    Params = PenaltyParams
    # corruption_rate pages for its parts (parse failures, key and value drift, premature stops,
    # quote substitutions, dropped optionals) and its complement baseline_match_rate: their moves
    # are notices. penalty_effect is a difference of two shares, not a share of n.
    metric_families = (
        ERROR_RATE,
        MetricFamily("corruption_rate", "share", bad_direction=1),
        MetricFamily("truncation_rate", "share", bad_direction=1),
        MetricFamily("penalty_effect", "other"),
    )
    # A penalty setting is one family: the cells of its grid are pooled.
    pooled_labels = frozenset({"mode", "n_records", "temperature"})

    async def run(self, ctx: ProbeContext, params: PenaltyParams) -> None:
        protocol = ctx.target.protocol
        if protocol in NO_PENALTIES:
            # Nothing to measure: say so in the run's output, send nothing, store nothing.
            with ctx.progress_task(f"penalty skipped: {NO_PENALTIES[protocol]}", 0):
                return
        cells = interleaved(grid(params, protocol))
        queue = iter(cells)

        async def worker() -> None:
            for cell in queue:
                await ctx.send(build_request(cell, params, protocol), case=cell.mode, labels=cell.labels)

        with ctx.progress_task("penalty grid", len(cells)):
            await asyncio.gather(*(worker() for _ in range(params.concurrency)))

    def summarize(self, samples: Sequence[SampleRow], params: PenaltyParams, *,
                  run_id: str, target: str) -> list[Metric]:
        rows = [r for r in samples if r.get("probe") == self.name and r.get("final", True)]
        collected = MetricCollector(run_id=run_id, target=target, probe=self.name)
        metrics, add, add_share = collected.metrics, collected.add, collected.share

        cells: dict[Cell, list[SampleRow]] = defaultdict(list)
        for row in rows:
            labels = row["labels"]
            cells[Cell(labels["mode"], int(labels["n_records"]), float(labels["temperature"]),
                       labels["penalty"], labels.get("penalty_value"))].append(row)
        protocols = {r.get("protocol") or "" for r in rows}
        for mode in params.modes:
            if any(wire_mode(mode, protocol) is None for protocol in protocols):
                add("skipped", 1, {"mode": mode, "reason": "no equivalent on the anthropic protocol"}, 0, None)

        corrupted: dict[Cell, tuple[int, int]] = {}
        texts: dict[Cell, list[str]] = {}
        for cell in sorted(cells, key=_cell_order):
            cell_rows = cells[cell]
            labels = cell.labels
            ok = [r for r in cell_rows if not r.get("error_type")]
            add_share("error_rate", len(cell_rows) - len(ok), len(cell_rows), labels)
            texts[cell] = [answer_text(r) for r in ok]
            if not ok:
                continue
            results = [analyse_row(r) for r in ok]
            n = len(results)
            add_share("parse_rate", sum(a.parses for a in results), n, labels)
            add_share("key_drift_rate", sum(a.key_drift for a in results), n, labels)
            add_share("premature_stop_rate", sum(a.premature_stop for a in results), n, labels)
            add_share("truncation_rate", sum(a.truncated for a in results), n, labels)
            add_share("quote_substitution_rate", sum(a.quote_substitution for a in results), n, labels)
            add_share("corruption_rate", sum(a.corrupted for a in results), n, labels)
            if cell.mode in CONSTRAINED_MODES:
                add_share("dropped_optional_rate", sum(bool(a.dropped_optional) for a in results), n, labels)
                add_share("value_drift_rate", sum(a.value_drift for a in results), n, labels)
            indices = [a.first_corruption_index for a in results if a.first_corruption_index is not None]
            add("first_corruption_index", sum(indices) / len(indices) if indices else None, labels,
                len(indices), "records")
            add("records_delivered", sum(a.records_delivered for a in results) / n, labels, n, "records")
            corrupted[cell] = (sum(a.corrupted for a in results), n)

        for cell in sorted(cells, key=_cell_order):
            baseline = Cell(cell.mode, cell.n_records, cell.temperature, "none", None)
            if baseline not in texts or cell not in texts:
                continue
            labels = cell.labels
            explicit = texts[baseline]
            if cell.penalty != "none" and explicit and texts[cell]:
                matches = sum(1 for text in texts[cell] if text in explicit)
                add_share("baseline_match_rate", matches, len(texts[cell]), labels)
            if cell.penalty == "omitted":
                check_labels = {"mode": cell.mode, "n_records": cell.n_records, "temperature": cell.temperature}
                add("penalties_applied_when_omitted", injection_check(explicit, texts[cell], params.check_alpha),
                    check_labels, len(explicit) + len(texts[cell]), None)
            if cell.penalty in NO_OP and cell in corrupted and baseline in corrupted:
                (base_x, base_n), (x, n) = corrupted[baseline], corrupted[cell]
                difference, low, high = stats.proportion_difference(base_x, base_n, x, n)
                add("penalty_effect", difference, labels, base_n + n, "ratio", (low, high))
                add("penalty_effect_p", stats.fisher_exact(base_x, base_n, x, n), labels, base_n + n, "p")
                swept = params.penalties.get(cell.penalty)
                strongest = max(swept) if swept else cell.penalty_value
                refused = any(_refused(r, cell.penalty, params) for r in cells[cell])
                if cell.penalty_value == strongest and not refused:
                    add("penalty_ignored", ignored_check(explicit, texts[cell]), labels,
                        len(explicit) + len(texts[cell]), None)

        for name in NO_OP:
            carrying = [r for r in rows if (r.get("labels") or {}).get("penalty") not in ("omitted", None)
                        and any(f in (r.get("request_body") or {}) or f in (r.get("rejected_params") or [])
                                for f in penalty_fields(name, params))]
            if carrying:
                any_refused = any(_refused(r, name, params) for r in carrying)
                add("penalty_unsupported", int(any_refused), {"penalty": name}, len(carrying), None)
        refusals: dict[str, int] = defaultdict(int)
        for row in rows:
            for param in row.get("rejected_params") or []:
                refusals[param] += 1
        for param, count in sorted(refusals.items()):
            add("rejected_param_requests", count, {"param": param}, len(rows), "requests")
        return metrics

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        with_baseline = _with_no_op_points(latest)
        return [Chart("versus", "Corruption against penalty (pooled over modes, lengths and temperatures; Wilson 95%)",
                      "corruption rate", ("corruption_rate",), x="penalty_value", x_label="penalty value",
                      series_by=("penalty",), rows=with_baseline),
                Chart("versus", "Corruption against length (pooled over penalty values, modes and temperatures)",
                      "corruption rate", ("corruption_rate",), x="n_records", x_label="records requested",
                      series_by=("penalty",)),
                Chart("versus", "JSON parse rate against penalty (pooled)", "parse rate", ("parse_rate",),
                      x="penalty_value", x_label="penalty value", series_by=("penalty",), rows=with_baseline)]

    def examples(self, samples: Sequence[SampleRow]) -> list[NotableSample]:
        """Answers the probe's analysis calls corrupted, with where they first went wrong."""
        found = []
        for row in samples:
            if not {"mode", "n_records"} <= (row.get("labels") or {}).keys():
                continue
            analysis = analyse_row(row)
            if analysis.corrupted:
                where = (f"corrupted JSON: {analysis.first_corruption_kind or 'damaged'} after "
                         f"{analysis.first_corruption_index} intact record(s)")
                found.append(NotableSample(row, where, answer_text(row)))
        return found


def _with_no_op_points(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The explicit baseline (penalty "none": every penalty at its no-op value) becomes the no-op
    point of each penalty the run varied, so each curve starts where no penalty applies."""
    varied = {labels.get("penalty") for labels in (row.get("labels") or {} for row in rows)
              if labels.get("penalty_value") is not None}
    baseline = [{**row, "labels": {**row["labels"], "penalty": name, "penalty_value": no_op}}
                for row in rows if (row.get("labels") or {}).get("penalty") == "none"
                for name, no_op in NO_OP.items() if name in varied]
    return [*rows, *baseline]


def _refused(row: SampleRow, penalty: str, params: PenaltyParams) -> bool:
    """The endpoint refused this penalty under every name it was sent as."""
    rejected = set(row.get("rejected_params") or [])
    return all(field in rejected for field in penalty_fields(penalty, params))


def _cell_order(cell: Cell) -> tuple[str, int, float, int, str, float]:
    kinds = {"none": 0, "omitted": 1}
    return (cell.mode, cell.n_records, cell.temperature, kinds.get(cell.penalty, 2), cell.penalty,
            cell.penalty_value or 0.0)
