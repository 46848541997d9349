"""Tool-call conformance: when a request forces a tool, does the answer call that tool, once, with
arguments that follow the tool's input schema? Offered among decoys too (`tool_counts`), since a
gateway or a small model may pick the wrong one when there are many.

Per number of tools offered (label `tools`): `error_rate` over all requests; `tool_call_rate`, the
share of answers that are exactly one call of the forced tool with a call id; and
`arguments_valid_rate`, the share of those whose arguments are a JSON object with every required
property, no undeclared one and each of its declared type or enum. Both protocols: the adapters
store each call as {"type", "id", "name", "input"}.

The probe also declares how the report shows it (`charts`, `examples`) and how drift judges it
(`metric_families`): prober/core/declarations.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from pydantic import Field

from prober.core.declarations import Chart, MetricFamily, NotableSample
from prober.core.records import ChatRequest, Metric, SampleRow
from prober.probes.base import ERROR_RATE, MetricCollector, Probe, ProbeContext, ProbeParams

TOOL_NAME = "get_weather"
TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "the city to forecast"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "description": "days ahead, 1 to 7"},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
PROMPT = "What will the weather be in Lisbon over the next 3 days, in celsius? Use the tool."
_JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                            "boolean": (bool,), "object": (dict,), "array": (list,)}


class ToolCallParams(ProbeParams):
    tool_counts: list[int] = Field(default_factory=lambda: [1, 8], min_length=1,
                                   description="tools offered per request, the forced one among them")
    requests: int = Field(12, ge=1, description="requests per number of tools")
    concurrency: int = Field(4, ge=1)
    max_tokens: int = Field(256, ge=1)


def tools(count: int) -> list[dict[str, Any]]:
    """The forced tool and `count - 1` decoys, the forced one in the middle."""
    decoys = [{"name": f"lookup_{i}", "description": f"Look up record {i}.",
               "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
              for i in range(max(0, count - 1))]
    forced = {"name": TOOL_NAME, "description": "Get the weather forecast for a city.", "input_schema": TOOL_SCHEMA}
    middle = len(decoys) // 2
    return [*decoys[:middle], forced, *decoys[middle:]]


def build_request(count: int, params: ToolCallParams) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": PROMPT}], max_tokens=params.max_tokens,
                       tools=tools(count), tool_choice={"type": "tool", "name": TOOL_NAME})


def argument_problems(arguments: Any, schema: dict[str, Any] = TOOL_SCHEMA) -> list[str]:
    """Where `arguments` (a call's parsed input) break the object schema `schema`."""
    if not isinstance(arguments, dict):
        return ["arguments are not a JSON object"]
    properties = schema.get("properties", {})
    problems = [f"missing {name!r}" for name in schema.get("required", []) if name not in arguments]
    problems += [f"undeclared {name!r}" for name in arguments if name not in properties]
    for name, value in arguments.items():
        declared = properties.get(name) or {}
        expected = _JSON_TYPES.get(declared.get("type", ""), ())
        # JSON has no separate boolean number: true is not an integer here.
        if expected and (not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected)):
            problems.append(f"{name!r} is not of type {declared['type']}")
        elif "enum" in declared and value not in declared["enum"]:
            problems.append(f"{name!r} is not one of {declared['enum']}")
    return problems


def call_problems(row: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what is wrong with the call itself, what is wrong with its arguments) for one answer; the
    arguments are judged only for a proper call."""
    calls = row.get("tool_calls") or []
    if not calls:
        return ["no tool call"], []
    names = [call.get("name") for call in calls]
    if len(calls) > 1:
        return [f"{len(calls)} calls ({', '.join(map(str, names))})"], []
    (call,) = calls
    if call.get("name") != TOOL_NAME:
        return [f"called {call.get('name')!r} instead of {TOOL_NAME!r}"], []
    if not call.get("id"):
        return ["the call has no id"], []
    if call.get("parse_error"):
        return [], ["arguments are not JSON"]
    return [], argument_problems(call.get("input"))


class ToolCallProbe(Probe):
    name = "tool_call"
    version = 1
    Params = ToolCallParams
    metric_names = frozenset({"error_rate", "tool_call_rate", "arguments_valid_rate"})
    label_params: ClassVar[dict[str, str]] = {"tool_counts": "tools"}
    metric_families = (
        ERROR_RATE,
        MetricFamily("tool_call_rate", "share", bad_direction=-1),
        MetricFamily("arguments_valid_rate", "share", bad_direction=-1),
    )
    # One family per quantity and run: the numbers of tools offered are its cells.
    pooled_labels = frozenset({"tools"})

    async def run(self, ctx: ProbeContext, params: ToolCallParams) -> None:  # type: ignore[override]
        for count in params.tool_counts:
            await ctx.closed_loop(concurrency=params.concurrency, count=params.requests,
                                  make_request=lambda _, n=count: build_request(n, params),
                                  case=f"tools={count}", labels={"tools": count}, title=f"tool_call tools={count}")

    def summarize(self, samples: Sequence[dict[str, Any]], params: ToolCallParams, *,  # type: ignore[override]
                  run_id: str, target: str) -> list[Metric]:
        collected = MetricCollector(run_id=run_id, target=target, probe=self.name)
        rows = [r for r in samples if r.get("probe") == self.name and r.get("final", True)]
        for count in params.tool_counts:
            level = [r for r in rows if (r.get("labels") or {}).get("tools") == count]
            ok = [r for r in level if not r.get("error_type")]
            labels = {"tools": count}
            collected.share("error_rate", len(level) - len(ok), len(level), labels)
            judged = [call_problems(r) for r in ok]
            called = [arguments for call, arguments in judged if not call]
            collected.share("tool_call_rate", len(called), len(ok), labels)
            collected.share("arguments_valid_rate", sum(1 for problems in called if not problems), len(called),
                            labels)
        return collected.metrics

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        return [Chart("versus", "Forced tool called, and arguments valid, against tools offered (Wilson 95%)",
                      "share", ("tool_call_rate", "arguments_valid_rate"), x="tools", x_label="tools offered"),
                Chart("trend", "Valid tool arguments over time", "share", ("arguments_valid_rate",))]

    def examples(self, samples: Sequence[SampleRow]) -> list[NotableSample]:
        found = []
        for row in samples:
            call, arguments = call_problems(row)
            if call or arguments:
                shown = json.dumps(row["tool_calls"], ensure_ascii=False) if row.get("tool_calls") else row.get(
                    "output_text")
                found.append(NotableSample(row, "; ".join(call + arguments), shown))
        return found
