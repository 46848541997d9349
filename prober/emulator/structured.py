"""JSON for a request that asks for JSON (response_format json_schema or json_object, Anthropic's
output_config.format, llama-server's json_schema field) and that no earlier behaviour answered
(schema order, penalty, a forced tool): the answer is an object the schema accepts, so that a
JSON-valid rate measured against the emulator means something.

Each property gets a value drawn from an RNG seeded by (scenario seed, prompt, property name): an
enum member, a boolean, an integer within its bounds, pseudo-words for a string. The same prompt
gives the same object, as temperature 0 should. Nondeterminism carries over: when the natural
answer forked at token t of n (nondeterminism.py), the object forks at the property at the same
relative position, whose value then differs where the schema allows another, and every later
property is drawn again. So load-dependent divergence shows in the fields, not only in the bytes.
json_object without a schema gets {"answer": <the natural text>}.

Ground truth (`behaviours["structured"]`): the object sent and the index of the first forked
property (None when it did not fork).
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import TYPE_CHECKING, Any

from prober.emulator.plan import GenRequest, ResponsePlan
from prober.emulator.scenario import Scenario
from prober.emulator.schema_order import requested_schema
from prober.emulator.tokenizer import pseudo_text, tokenize

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState

# Behaviours earlier in the chain that answer JSON requests of their own kind.
_ANSWERED_BY = ("schema_order", "penalty", "tool_call")
# Draws tried for a forked property to differ from its natural value (enough for any enum of two).
_FORK_DRAWS = 16


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def drawn_value(schema: Any, rng: random.Random, words: tuple[str, ...]) -> Any:
    """A value `schema` accepts (type, enum, properties, items, minimum/maximum), drawn from `rng`."""
    if not isinstance(schema, dict):
        return "".join(words).strip()
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    kind = schema.get("type")
    kind = next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        return {name: drawn_value(sub, rng, words) for name, sub in properties.items()}
    if kind == "array":
        return [drawn_value(schema.get("items"), rng, words) for _ in range(rng.randint(1, 3))]
    if kind == "boolean":
        return rng.random() < 0.5
    if kind in ("integer", "number"):
        low = schema.get("minimum", 1)
        high = schema.get("maximum", max(low, 0) + 9)
        return rng.randint(int(low), int(high)) if kind == "integer" else round(rng.uniform(low, high), 2)
    if kind == "null":
        return None
    start = rng.randrange(max(len(words) - 4, 1))
    return "".join(words[start:start + rng.randint(2, 4)]).strip(" .,")


class StructuredAnswer:
    def __init__(self, scenario: Scenario) -> None:
        self.seed = scenario.seed
        self.length = scenario.output_tokens

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        if any(name in plan.truth for name in _ANSWERED_BY) or plan.tool_name is not None:
            return
        schema, tool = requested_schema(request)
        if tool is not None:
            return
        natural = tuple(plan.tokens)
        fork = (plan.truth.get("nondeterminism") or {}).get("forked_at_token")
        if isinstance(schema, dict):
            answer, forked_field = self._object(request.prompt_text, schema, fork, len(natural))
        elif _asks_json_object(request):
            answer, forked_field = {"answer": "".join(natural).strip()}, (0 if fork is not None else None)
        else:
            return
        plan.answer(tokenize(json.dumps(answer, ensure_ascii=False)), request.max_tokens)
        plan.truth["structured"] = {"answer": answer, "forked_field": forked_field}

    def _object(self, prompt: str, schema: dict[str, Any], fork: int | None,
                natural_tokens: int) -> tuple[Any, int | None]:
        words = pseudo_text(prompt, 24, self.seed)
        properties = schema.get("properties")
        if schema.get("type") not in ("object", None) or not isinstance(properties, dict) or not properties:
            return drawn_value(schema, _rng("structured", self.seed, prompt), words), None
        names = list(properties)
        answer = {name: drawn_value(properties[name], _rng("structured", self.seed, prompt, name), words)
                  for name in names}
        if fork is None:
            return answer, None
        first = min(len(names) - 1, fork * len(names) // max(natural_tokens, 1))
        for i, name in enumerate(names[first:], start=first):
            rng = _rng("structured-fork", self.seed, prompt, fork, name)
            natural = answer[name]
            for _ in range(_FORK_DRAWS if i == first else 1):
                answer[name] = drawn_value(properties[name], rng, words)
                if answer[name] != natural:
                    break
        return answer, first


def _asks_json_object(request: GenRequest) -> bool:
    response_format = request.body.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") == "json_object"
