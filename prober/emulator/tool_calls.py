"""A forced tool is called, as the hosted APIs do: a request whose tool_choice names a tool, and that
no earlier behaviour answered (schema order, penalty), is answered with a call to that tool.

Its arguments hold every property of the tool's input schema in declared order, each a value of
its declared type (the first enum value; pseudo-words from the prompt for a string), so a
conforming client finds a valid call; cut at max_tokens like any answer, the JSON is then
incomplete. Ground truth (`behaviours["tool_call"]`): the tool and the arguments sent.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from prober.emulator.plan import GenRequest, ResponsePlan
from prober.emulator.scenario import Scenario
from prober.emulator.schema_order import requested_schema
from prober.emulator.tokenizer import pseudo_text, tokenize

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState

_SCALARS: dict[str, Any] = {"integer": 3, "number": 1.5, "boolean": True, "null": None}


def example_value(schema: Any, words: tuple[str, ...]) -> Any:
    """A value that the JSON schema `schema` accepts (the subset tools use: type, enum, properties,
    items)."""
    if not isinstance(schema, dict):
        return "".join(words).strip(" .")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    kind = kind[0] if isinstance(kind, list) and kind else kind
    if kind == "object":
        properties = schema.get("properties")
        return {name: example_value(sub, words) for name, sub in (properties or {}).items()} \
            if isinstance(properties, dict) else {}
    if kind == "array":
        return [example_value(schema.get("items"), words)]
    if kind in _SCALARS:
        return _SCALARS[kind]
    return "".join(words).strip(" .")


class ForcedToolCall:
    def __init__(self, scenario: Scenario) -> None:
        self.seed = scenario.seed

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        if plan.tool_name is not None:
            return
        schema, tool_name = requested_schema(request)
        if tool_name is None:
            return
        arguments = example_value(schema if isinstance(schema, dict) else {"type": "object"},
                                  pseudo_text(request.prompt_text, 3, self.seed))
        plan.answer(tokenize(json.dumps(arguments, ensure_ascii=False)), request.max_tokens)
        plan.tool_name = tool_name
        plan.truth["tool_call"] = {"tool": tool_name, "arguments": arguments}
