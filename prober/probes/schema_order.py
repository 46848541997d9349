"""Schema order: does the order of a JSON schema's properties change how often the answer is right?

Under constrained decoding a schema's property order is the generation order. A field declared
before the answer is scratchpad the answer can use; a field after it is a justification written
once the answer is fixed. So the probe asks every item of a labelled dataset under each schema
variant (the same fields in different orders: answer-first against reasoning-first by default),
grades each answer exactly, and compares the variants paired, item by item: only the items one
variant gets right and the other wrong tell them apart, and exact McNemar tests those.

Each sample carries labels {variant, item, index, look, expected}, so the pairs and the grades can
be rebuilt from stored rows alone. Whether an output's keys come in the declared order is measured
on its own (`key_order_conformance`): llama.cpp's grammar puts required keys before optional ones
whatever the declared order, and a server that reorders keys silently changes the experiment.

With `sequential = true` the items go in `looks` equal groups and the run stops after the first
look at which every pair of variants is decisive under an O'Brien-Fleming-type alpha-spending
bound (stats.obrien_fleming_bounds); `requests_saved` says how many requests that spared.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from prober.core import stats
from prober.core.declarations import Chart, MetricFamily, NotableSample
from prober.core.findings import STRUCTURED_OUTPUT_RATES, structured_output_counts
from prober.core.records import ChatRequest, Exchange, Metric, SampleRow
from prober.probes.base import ERROR_RATE, MetricCollector, Probe, ProbeContext, ProbeParams
from prober.suites.datasets import SHIPPED_SCHEMA_ORDER, LabelledItem, load_labelled_jsonl

ANSWER_FIELD = "label"
TOOL_NAME = "record_answer"

# The built-in fields a variant can order. Only keywords both hosted APIs' strict structured outputs
# accept (no length or range limits); the label's enum comes from the item's choices.
BUILTIN_FIELDS: dict[str, dict[str, Any]] = {
    "label": {"type": "string", "description": "the answer"},
    "confidence": {"type": "number", "description": "how sure you are that the answer is right, from 0 to 1"},
    "rationale": {"type": "string", "description": "why the answer is right, in one or two sentences"},
    "evidence": {"type": "string", "description": "the facts of the question that decide the answer, "
                                                  "worked through step by step"},
}

DEFAULT_INSTRUCTIONS = ("Answer the question. Reply with a JSON object with exactly the fields the schema "
                        "asks for; `label` is your final answer.")


class SchemaVariant(BaseModel):
    """One schema: the fields in `properties`, declared (and meant to be generated) in that order.
    `required` defaults to all of them; a variant with optional fields is sent non-strict."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    properties: list[str] = Field(min_length=1)
    required: list[str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SchemaVariant:
        if len(set(self.properties)) != len(self.properties):
            raise ValueError(f"variant {self.name}: a property is listed twice")
        if ANSWER_FIELD not in self.properties:
            raise ValueError(f"variant {self.name}: properties must include {ANSWER_FIELD!r}")
        for name in self.required or []:
            if name not in self.properties:
                raise ValueError(f"variant {self.name}: required field {name!r} is not in properties")
        return self

    def required_fields(self) -> list[str]:
        return list(self.properties) if self.required is None else [p for p in self.properties if p in self.required]


DEFAULT_VARIANTS = [
    SchemaVariant(name="answer_first", properties=["label", "confidence", "rationale"]),
    SchemaVariant(name="reasoning_first", properties=["evidence", "rationale", "label", "confidence"]),
]


class SchemaOrderParams(ProbeParams):
    dataset: str | None = Field(None, description="a JSONL file of {id, input, label, choices?}; a relative "
                                "path is read next to the suite file (from the working directory when given "
                                "with --param); unset: the shipped weekday dataset")
    limit: int | None = Field(None, ge=1, description="use only the first N items")
    variants: list[SchemaVariant] = Field(default_factory=lambda: list(DEFAULT_VARIANTS), min_length=2)
    fields: dict[str, dict[str, Any]] = Field(default_factory=dict, description="JSON schemas of fields of "
                                              "your own, by name, for use in variants")
    mode: Literal["json_schema", "tool"] = Field("json_schema", description="json_schema: response_format "
                                                 "(OpenAI, llama-server) / output_config.format (Anthropic); "
                                                 "tool: one tool, forced with tool_choice")
    instructions: str = DEFAULT_INSTRUCTIONS
    max_tokens: int = Field(512, ge=1)
    temperature: float = 0.0
    seed: int | None = Field(1234, description="sent where the protocol takes a seed (OpenAI)")
    concurrency: int = Field(4, ge=1)
    sequential: bool = Field(False, description="stop at the first look where every pair is decisive")
    looks: int = Field(5, ge=1, description="planned looks (equal groups of items) when sequential")
    alpha: float = Field(0.05, gt=0, lt=1, description="two-sided level, spent over the looks when sequential")
    _items: list[LabelledItem] = PrivateAttr(default_factory=list)

    @field_validator("dataset")
    @classmethod
    def _next_to_the_suite_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        # The suite loader says where the file is and which values came from the command line, so
        # that a suite file and its dataset can move together and cron can run from any directory.
        context = info.context or {}
        if value is None or "suite_dir" not in context or "dataset" in context.get("from_command_line", ()):
            return value
        path = Path(value).expanduser()
        return str(path if path.is_absolute() else Path(context["suite_dir"]) / path)

    @model_validator(mode="after")
    def _known_fields(self) -> SchemaOrderParams:
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError("variant names must be unique")
        for variant in self.variants:
            for field in variant.properties:
                if field not in BUILTIN_FIELDS and field not in self.fields:
                    raise ValueError(f"variant {variant.name}: unknown field {field!r} (built in: "
                                     f"{', '.join(BUILTIN_FIELDS)}; declare others under `fields`)")
        self._items = self._load_items()     # a broken dataset is a configuration error, before any request
        return self

    def _load_items(self) -> list[LabelledItem]:
        items = load_labelled_jsonl(self.dataset if self.dataset is not None else SHIPPED_SCHEMA_ORDER)
        return items[:self.limit] if self.limit is not None else items

    def items(self) -> list[LabelledItem]:
        return self._items

    def variant(self, name: str) -> SchemaVariant | None:
        return next((v for v in self.variants if v.name == name), None)

    def look_ends(self, planned: int) -> list[int]:
        """How many items have been asked at each look: one look unless sequential."""
        looks = self.looks if self.sequential else 1
        return sorted({math.ceil(planned * k / looks) for k in range(1, looks + 1)})

    def pairs(self) -> list[tuple[str, str]]:
        return list(itertools.combinations([v.name for v in self.variants], 2))


def build_schema(variant: SchemaVariant, params: SchemaOrderParams, item: LabelledItem) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for field in variant.properties:
        schema = dict(params.fields.get(field) or BUILTIN_FIELDS[field])
        if field == ANSWER_FIELD and item.choices is not None:
            schema["enum"] = list(item.choices)
        properties[field] = schema
    return {"type": "object", "properties": properties, "required": variant.required_fields(),
            "additionalProperties": False}


def build_request(item: LabelledItem, variant: SchemaVariant, params: SchemaOrderParams,
                  protocol: str) -> ChatRequest:
    sampling: dict[str, Any] = {"temperature": params.temperature}
    if protocol == "openai":     # the Responses API, like Anthropic's, has no seed and no penalties
        # The no-op penalties too, so that no server-side default can leak in.
        sampling.update(frequency_penalty=0.0, presence_penalty=0.0)
        if params.seed is not None:
            sampling["seed"] = params.seed
    schema = build_schema(variant, params, item)
    request = ChatRequest(messages=[{"role": "user", "content": item.input}], system=params.instructions,
                          max_tokens=params.max_tokens, stream=True, sampling=sampling)
    if params.mode == "tool":
        request.tools = [{"name": TOOL_NAME, "description": "Record the answer to the question.",
                          "input_schema": schema}]
        request.tool_choice = {"type": "tool", "name": TOOL_NAME}
    else:
        # OpenAI's strict mode wants every property required; a variant with optional ones is not strict.
        strict = len(variant.required_fields()) == len(variant.properties)
        request.json_schema = {"name": "answer", "schema": schema, "strict": strict}
    return request


# --- grading ----------------------------------------------------------------------------------

class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its (key, value) pairs, in the order they were written."""


@dataclass(frozen=True)
class Grade:
    parsed: bool                    # the output is a JSON object
    correct: bool                   # its label equals the expected one (case and spacing aside)
    in_declared_order: bool | None  # its declared keys come in the declared order; None if not parsed


def _normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


def output_json_text(text: str | None, tool_calls: Sequence[dict[str, Any]] | None) -> str:
    """The JSON the model produced: a tool call's input (forced tool mode), else the text."""
    for call in tool_calls or []:
        value = call.get("input")
        # A parsed input keeps its key order (json keeps it, and the store keeps it on both backends).
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text or ""


def grade(output: str, expected: str, declared: Sequence[str]) -> Grade:
    """Grade one output. Model output is untrusted: anything that is not a JSON object is wrong."""
    try:
        value = json.loads(output, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return Grade(parsed=False, correct=False, in_declared_order=None)
    if not isinstance(value, _Pairs):
        return Grade(parsed=False, correct=False, in_declared_order=None)
    keys = [key for key, _ in value]
    label = dict(value).get(ANSWER_FIELD)
    correct = isinstance(label, str) and _normalize(label) == _normalize(expected)
    emitted = [key for key in keys if key in declared]
    return Grade(parsed=True, correct=correct, in_declared_order=emitted == [k for k in declared if k in keys])


# --- pairing and sequential stopping ----------------------------------------------------------

def discordant(correct: dict[tuple[int, str], bool], a: str, b: str, up_to: int | None = None
               ) -> tuple[int, int, int]:
    """(a_only, b_only, paired items) over items (by index, below `up_to`) graded under both."""
    a_only = b_only = paired = 0
    for (index, variant), right in correct.items():
        if variant != a or (up_to is not None and index >= up_to) or (index, b) not in correct:
            continue
        paired += 1
        other = correct[(index, b)]
        a_only += right and not other
        b_only += other and not right
    return a_only, b_only, paired


def sequential_stop(correct: dict[tuple[int, str], bool], params: SchemaOrderParams, planned: int) -> int | None:
    """The first look (0-based, not the last) after which every pair's exact McNemar p-value is at
    or below that look's nominal alpha under O'Brien-Fleming-type spending; None: run on."""
    ends = params.look_ends(planned)
    if not params.sequential or len(ends) < 2:
        return None
    nominal = stats.nominal_alphas(stats.obrien_fleming_bounds([end / planned for end in ends], params.alpha))
    for look, end in enumerate(ends[:-1]):
        if all(stats.mcnemar(*discordant(correct, a, b, up_to=end)[:2]).p_value <= nominal[look]
               for a, b in params.pairs()):
            return look
    return None


class SchemaOrderProbe(Probe[SchemaOrderParams]):
    name = "schema_order"
    timing = "none"
    version = 1
    metric_names = frozenset({
        "accuracy", "json_valid_rate", "key_order_conformance", "error_rate", "discordant_a_only",
        "discordant_b_only", "mcnemar_p", "mcnemar_mid_p", "paired_difference", "items_for_80_power",
        "items_evaluated", "requests_saved", "sequential_stopped_early", "sequential_looks_used",
        *STRUCTURED_OUTPUT_RATES})
    Params = SchemaOrderParams
    # A paired difference may move either way as a matter of course: its moves are notices.
    metric_families = (
        ERROR_RATE,
        MetricFamily("accuracy", "share", bad_direction=-1),
        MetricFamily("json_valid_rate", "share", bad_direction=-1),
        MetricFamily("key_order_conformance", "share", bad_direction=-1),
        MetricFamily("paired_difference", "paired"),
        # The answer ignored the requested structure, or broke its schema (prober/targets/structured.py).
        *(MetricFamily(name, "share", bad_direction=1) for name in STRUCTURED_OUTPUT_RATES),
    )

    async def run(self, ctx: ProbeContext, params: SchemaOrderParams) -> None:
        items = params.items()
        ends = params.look_ends(len(items))
        slots = asyncio.Semaphore(params.concurrency)
        correct: dict[tuple[int, str], bool] = {}

        async def ask(index: int, item: LabelledItem, variant: SchemaVariant, look: int) -> None:
            async with slots:
                exchange = await ctx.send(build_request(item, variant, params, ctx.target.protocol),
                                          case=variant.name,
                                          labels={"variant": variant.name, "item": item.id, "index": index,
                                                  "look": look, "expected": item.label})
            if exchange.ok:
                correct[(index, variant.name)] = _grade_exchange(exchange, item.label, variant).correct

        start = 0
        for look, end in enumerate(ends):
            title = "schema_order" if len(ends) == 1 else f"schema_order look {look + 1}/{len(ends)}"
            # Both variants of an item are asked together, so an interrupted run still leaves pairs.
            with ctx.progress_task(title, (end - start) * len(params.variants)):
                await asyncio.gather(*(ask(index, items[index], variant, look)
                                       for index in range(start, end) for variant in params.variants))
            start = end
            if sequential_stop(correct, params, len(items)) == look:
                break

    def summarize(self, samples: Sequence[SampleRow], params: SchemaOrderParams, *,
                  run_id: str, target: str) -> list[Metric]:
        rows = [r for r in samples if r.get("probe") == self.name and r.get("final", True)]
        collected = MetricCollector(run_id=run_id, target=target, probe=self.name)
        metrics, add, add_share = collected.metrics, collected.add, collected.share

        grades: dict[str, list[Grade]] = defaultdict(list)
        answer_findings: dict[str, list[list[str] | None]] = defaultdict(list)
        errors: dict[str, int] = defaultdict(int)
        correct: dict[tuple[int, str], bool] = {}
        items_seen: set[int] = set()
        for row in rows:
            labels = row.get("labels") or {}
            variant = params.variant(str(labels.get("variant")))
            if variant is None:
                continue
            index = int(labels["index"])
            items_seen.add(index)
            if row.get("error_type"):
                errors[variant.name] += 1
                continue
            result = grade(output_json_text(row.get("output_text"), row.get("tool_calls")),
                           str(labels["expected"]), variant.properties)
            grades[variant.name].append(result)
            answer_findings[variant.name].append(row.get("findings"))
            correct[(index, variant.name)] = result.correct

        for variant in params.variants:
            graded = grades.get(variant.name, [])
            labels = {"variant": variant.name}
            add_share("accuracy", sum(g.correct for g in graded), len(graded), labels)
            parsed = [g for g in graded if g.parsed]
            add_share("json_valid_rate", len(parsed), len(graded), labels)
            add_share("key_order_conformance", sum(bool(g.in_declared_order) for g in parsed), len(parsed), labels)
            for name, hits in structured_output_counts(answer_findings.get(variant.name, [])):
                add_share(name, hits, len(graded), labels)
            add_share("error_rate", errors.get(variant.name, 0), len(graded) + errors.get(variant.name, 0), labels)

        for a, b in params.pairs():
            a_only, b_only, paired = discordant(correct, a, b)
            labels = {"a": a, "b": b}
            test = stats.mcnemar(a_only, b_only)
            add("discordant_a_only", a_only, labels, paired, "items")
            add("discordant_b_only", b_only, labels, paired, "items")
            add("mcnemar_p", test.p_value, labels, paired, "p")
            add("mcnemar_mid_p", test.mid_p, labels, paired, "p")
            difference, low, high = stats.paired_difference(a_only, b_only, paired)
            add("paired_difference", difference, labels, paired, "ratio", (low, high))
            add("items_for_80_power", stats.mcnemar_items_for_power(a_only, b_only, paired, params.alpha),
                labels, paired, "items")

        planned = len(params.items())
        stopped = sequential_stop(correct, params, planned)
        add("items_evaluated", len(items_seen), {}, planned, "items")
        # Only a sequential stop saves requests; items missing for another reason (a budget) do not count.
        saved = (planned - len(items_seen)) * len(params.variants) if stopped is not None else 0
        add("requests_saved", saved, {}, planned, "requests")
        if params.sequential:
            looks = len(params.look_ends(planned))
            add("sequential_stopped_early", float(stopped is not None), {"looks": looks}, len(items_seen), "bool")
            add("sequential_looks_used", (stopped + 1) if stopped is not None else looks, {"looks": looks},
                len(items_seen), "looks")
        return metrics

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        return [Chart("categories", "Accuracy by schema field order (95% CI)", "accuracy", ("accuracy",),
                      x="variant", note_metrics=("mcnemar_p", "mcnemar_mid_p", "paired_difference")),
                Chart("categories", "Key order conformance by variant", "conformance", ("key_order_conformance",),
                      x="variant")]

    def examples(self, samples: Sequence[SampleRow]) -> list[NotableSample]:
        """Outputs that are not JSON at all."""
        found = []
        for row in samples:
            text = output_json_text(row.get("output_text"), row.get("tool_calls"))
            try:
                json.loads(text)
            except (ValueError, RecursionError):
                found.append(NotableSample(row, "output is not valid JSON", text))
        return found


def _grade_exchange(exchange: Exchange, expected: str, variant: SchemaVariant) -> Grade:
    return grade(output_json_text(exchange.text, exchange.tool_calls), expected, variant.properties)
