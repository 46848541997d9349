"""Accuracy that depends on a JSON schema's property order, with a known true effect.

Under constrained decoding the declared property order is the generation order: a field before
the answer is scratchpad, a field after it cannot change the answer. The emulator models the
outcome, not the mechanism. A request it recognises (a schema, from response_format,
output_config.format, a top-level json_schema or a forced tool, with a `label` property; and a
user message that is an item of the dataset) is answered with a JSON object whose `label` is
right with the accuracy of its variant: answer-first when `label` is declared first,
reasoning-first when anything is declared before it. Every other request is left alone.

Per item, two latent uniform draws decide right or wrong (draw < accuracy), one per variant; with
probability `correlation` both variants share one draw, so the paired outcomes are as concordant as
the scenario says and the true discordance is known. Draws depend only on (seed, item id), so a
retried or repeated request gets the same answer, and a new seed gives a new sample of items.

The keys come in the declared order, or required before optional when `required_first` is set
(as llama.cpp's grammar emits them). A forced tool is answered as a call to that tool. The ground
truth (`behaviours["schema_order"]`): item, variant, accuracy, correct, expected and emitted label,
key order.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import TYPE_CHECKING, Any

from prober.emulator.plan import GenRequest, ResponsePlan
from prober.emulator.scenario import Scenario, SchemaOrderScenario
from prober.emulator.tokenizer import pseudo_text, tokenize
from prober.suites.datasets import SHIPPED_SCHEMA_ORDER, LabelledItem, items_by_input

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState

ANSWER_FIELD = "label"


def item_outcomes(settings: SchemaOrderScenario, seed: int, item_id: str) -> dict[str, bool]:
    """Whether the answer-first and the reasoning-first variant get this item right."""
    digest = hashlib.sha256(f"schema-order\x00{seed}\x00{item_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:16], "big"))
    shared = rng.random() < settings.correlation
    common, own_answer_first, own_reasoning_first = rng.random(), rng.random(), rng.random()
    return {
        "answer_first": (common if shared else own_answer_first) < settings.answer_first_accuracy,
        "reasoning_first": (common if shared else own_reasoning_first) < settings.reasoning_first_accuracy,
    }


def requested_schema(request: GenRequest) -> tuple[dict[str, Any] | None, str | None]:
    """(the schema the answer must follow, the forced tool's name or None), from the request body."""
    body = request.body
    choice = body.get("tool_choice")
    forced = None
    if isinstance(choice, dict):
        if request.protocol == "anthropic" and choice.get("type") == "tool":
            forced = choice.get("name")
        elif request.protocol == "openai" and choice.get("type") == "function":
            forced = (choice.get("function") or {}).get("name")
    if forced is not None:
        for tool in body.get("tools") or []:
            if not isinstance(tool, dict):
                continue
            if request.protocol == "anthropic" and tool.get("name") == forced:
                return tool.get("input_schema"), forced
            function = tool.get("function") or {}
            if request.protocol == "openai" and function.get("name") == forced:
                return function.get("parameters"), forced
        return None, None
    if request.protocol == "openai":
        response_format = body.get("response_format") or {}
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            return (response_format.get("json_schema") or {}).get("schema"), None
        return body.get("json_schema"), None       # llama-server's own field
    output_format = (body.get("output_config") or {}).get("format") or {}
    return (output_format.get("schema") if isinstance(output_format, dict) else None), None


def _last_user_text(request: GenRequest) -> str | None:
    users = [block.text for block in request.blocks if block.section == "messages" and block.role == "user"]
    return users[-1] if users else None


def _value(name: str, schema: Any, item: LabelledItem, correct: bool, seed: int) -> Any:
    """A plausible value of one property."""
    schema = schema if isinstance(schema, dict) else {}
    kind = schema.get("type")
    if name == "confidence" and kind in ("number", "integer"):
        return 0.9 if correct else 0.55
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "string":
        return "".join(pseudo_text(f"{item.input}\x00{name}", 12, seed)).strip()
    return {"number": 0.5, "integer": 1, "boolean": True, "array": [], "object": {}}.get(kind)


def _label(schema: Any, item: LabelledItem, correct: bool, seed: int) -> str:
    if correct:
        return item.label
    enum = schema.get("enum") if isinstance(schema, dict) else None
    choices = enum if isinstance(enum, list) else list(item.choices or ())
    wrong = [c for c in choices if isinstance(c, str) and c != item.label]
    if not wrong:
        return f"not {item.label}"
    digest = hashlib.sha256(f"wrong\x00{seed}\x00{item.id}".encode()).digest()
    return wrong[digest[0] % len(wrong)]


class SchemaOrderEffect:
    def __init__(self, scenario: Scenario) -> None:
        self.settings = scenario.schema_order
        self.seed = scenario.seed
        self.dataset = str(self.settings.dataset or SHIPPED_SCHEMA_ORDER)

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        schema, tool_name = requested_schema(request)
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(properties, dict) or ANSWER_FIELD not in properties:
            return
        item = items_by_input(self.dataset).get(_last_user_text(request) or "")
        if item is None:
            return
        declared = list(properties)
        variant = "answer_first" if declared[0] == ANSWER_FIELD else "reasoning_first"
        correct = item_outcomes(self.settings, self.seed, item.id)[variant]
        listed = schema.get("required") if isinstance(schema, dict) else None
        required = listed if isinstance(listed, list) else declared
        order = declared
        if self.settings.required_first:
            order = [k for k in declared if k in required] + [k for k in declared if k not in required]
        answer = {name: _value(name, properties[name], item, correct, self.seed) for name in order}
        answer[ANSWER_FIELD] = _label(properties[ANSWER_FIELD], item, correct, self.seed)
        plan.answer(tokenize(json.dumps(answer, ensure_ascii=False)), request.max_tokens)
        plan.tool_name = tool_name
        plan.truth["schema_order"] = {
            "item": item.id, "variant": variant, "correct": correct, "expected": item.label,
            "label": answer[ANSWER_FIELD], "key_order": order,
            "accuracy": getattr(self.settings, f"{variant}_accuracy"),
        }
