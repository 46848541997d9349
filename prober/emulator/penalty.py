"""Penalty-induced corruption of JSON output, for the penalty probe's records task.

A model writing a long JSON array keeps choosing between the token the structure wants and a near
neighbour: `"` or `'`, `user_id` or `userId` (then `userld`), `}` or the end of the text, `,` and
the next record or `]`. The emulator gives the wanted token a finite logit margin over its
neighbour (`base_logit + margin` against `base_logit`; each decision's margin jittered by the
prompt and position, so some decisions are nearer ties than others). Penalties act on how often
each candidate already appears in the output, before temperature: frequency subtracts
`frequency * count`, presence subtracts `presence` once a token has appeared, repetition divides a
positive logit (multiplies a negative one) by `repetition`. The wanted tokens are the repeated
ones, so once the push on them exceeds the margin the choice flips, and corruption grows with
the penalty and with the length of the array. At temperature 0 the choice is the argmax; above
it, a draw from the softmax of logits / temperature (seeded by the request's seed, else its
number).

What can flip depends on the mode: unconstrained output gets renamed keys, single quotes and an
end of text before a record closes; `json_object` keeps the syntax, so keys are renamed and the
array closes early; under a schema (response_format json_schema, output_config, a forced tool)
the syntax and keys hold and corruption becomes an array that closes early, the optional field
set to null and empty strings, with every answer parsing. A forced tool is answered as a call to
it.

A request is recognised by its prompt ("Generate N user records as JSON" and the field list the
probe sends); every other request is left alone. Penalties are read from OpenAI-protocol requests
only. The gateway switch (`inject_when_omitted`) applies penalties to requests that omit them, on
either protocol. Ground truth in `behaviours["penalty"]`: records
asked and delivered, mode, the penalties applied and which were injected, how the answer ended,
and every flipped decision.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prober.emulator.plan import GenRequest, ResponsePlan
from prober.emulator.scenario import PenaltyScenario, Scenario
from prober.emulator.schema_order import requested_schema
from prober.emulator.tokenizer import tokenize

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState

_TASK = re.compile(r"Generate (\d+) user records as JSON")
_FIELD_LINE = re.compile(r"^Each object has these fields.*$", re.MULTILINE)
_FIELD = re.compile(r'"(\w+)" \(([^)]*)\)')
# Request field -> the penalty it sets (llama.cpp spells the repetition penalty repeat_penalty).
PENALTY_FIELDS = {"frequency_penalty": "frequency", "presence_penalty": "presence",
                  "repetition_penalty": "repetition", "repeat_penalty": "repetition"}
_SYLLABLES = ("ka", "lo", "mi", "ra", "te", "su", "no", "vi", "de", "pa")


@dataclass(frozen=True)
class Penalties:
    frequency: float = 0.0
    presence: float = 0.0
    repetition: float = 1.0

    def apply(self, logit: float, count: int) -> float:
        if count > 0:
            logit = logit / self.repetition if logit > 0 else logit * self.repetition
            logit -= self.frequency * count + self.presence
        return logit


def requested_penalties(request: GenRequest, inject: dict[str, float]) -> tuple[Penalties, dict[str, float]]:
    """The penalties a request sets, with the gateway's added where it omits them; and those added.
    The Anthropic API has no penalty fields (its wire refuses the common ones), so there only the
    gateway's count."""
    values: dict[str, float] = {}
    for name, penalty in PENALTY_FIELDS.items():
        value = request.body.get(name) if request.protocol == "openai" else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values[penalty] = float(value)
    injected = {}
    for name, value in inject.items():
        added = PENALTY_FIELDS.get(name)
        if added is not None and added not in values:
            values[added] = injected[name] = value
    return Penalties(**values), injected


@dataclass(frozen=True)
class RecordsTask:
    n_records: int
    fields: tuple[tuple[str, str], ...]     # (name, the type as the prompt states it)

    @property
    def optional(self) -> set[str]:
        return {name for name, kind in self.fields if "null" in kind}


def recognise(request: GenRequest) -> RecordsTask | None:
    """The records task the penalty probe sends, or None for any other request."""
    users = [b.text for b in request.blocks if b.section == "messages" and b.role == "user"]
    text = users[-1] if users else ""
    task, line = _TASK.search(text), _FIELD_LINE.search(text)
    if task is None or line is None:
        return None
    fields = tuple(_FIELD.findall(line.group()))
    if not fields or int(task.group(1)) < 1:
        return None
    return RecordsTask(int(task.group(1)), fields)


def output_mode(request: GenRequest) -> tuple[str, str | None]:
    """("unconstrained" | "json_object" | "constrained", the forced tool's name or None)."""
    schema, tool = requested_schema(request)
    if tool is not None or isinstance(schema, dict):
        return "constrained", tool
    response_format = request.body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_object":
        return "json_object", None
    return "unconstrained", None


def key_variants(key: str) -> list[str]:
    """The key and the renames a penalty pushes it to: user_id -> userId -> userld."""
    if "_" in key:
        head, *rest = key.split("_")
        first = head + "".join(part.capitalize() for part in rest)
    else:
        first = key.capitalize()
    second = first.replace("I", "l", 1) if "I" in first else first + "s"
    return [key, first, second]


class _Writer:
    """Writes one answer, decision by decision, counting what it has written."""

    def __init__(self, settings: PenaltyScenario, penalties: Penalties, temperature: float,
                 rng: random.Random, jitter_seed: str) -> None:
        self.settings, self.penalties, self.temperature, self.rng = settings, penalties, temperature, rng
        self.jitter_seed = jitter_seed
        self.parts: list[str] = []
        self.counts: dict[str, int] = {}
        self.decisions = 0
        self.records_closed = 0
        self.flips: list[dict[str, Any]] = []

    def emit(self, text: str, *counted: str) -> None:
        self.parts.append(text)
        for name in counted:
            self.counts[name] = self.counts.get(name, 0) + 1

    def choose(self, kind: str, record: int, margin: float, candidates: list[str], offsets: list[float]) -> int:
        """Index of the chosen candidate; candidate 0 is the wanted one, `margin` its lead over
        candidate 1 before jitter; `offsets` the others' logits relative to candidate 1."""
        digest = hashlib.sha256(f"{self.jitter_seed}\x00{self.decisions}".encode()).digest()
        u = int.from_bytes(digest[:8], "big") / 2 ** 64
        self.decisions += 1
        lead = margin * (1 + self.settings.margin_jitter * (2 * u - 1))
        base = self.settings.base_logit
        logits = [self.penalties.apply(base + (lead if i == 0 else offsets[i - 1]), self.counts.get(c, 0))
                  for i, c in enumerate(candidates)]
        if self.temperature <= 0:
            chosen = max(range(len(logits)), key=lambda i: (logits[i], -i))
        else:
            top = max(logits)
            weights = [math.exp((logit - top) / self.temperature) for logit in logits]
            chosen = self.rng.choices(range(len(logits)), weights)[0]
        if chosen:
            self.flips.append({"kind": kind, "record": record, "chosen": candidates[chosen]})
        return chosen

    @property
    def text(self) -> str:
        return "".join(self.parts)


def _value(name: str, kind: str, index: int, seed: int) -> Any:
    digest = hashlib.sha256(f"record\x00{seed}\x00{index}".encode()).digest()
    if "integer" in kind:
        return index + 1
    if "boolean" in kind:
        return digest[0] % 3 != 0
    if "number" in kind:
        return round(digest[1] * 100 / 255, 1)
    if "date" in kind:
        return f"2024-{1 + digest[2] % 12:02d}-{1 + digest[3] % 28:02d}T{digest[4] % 24:02d}:{digest[5] % 60:02d}:00Z"
    user = "".join(_SYLLABLES[b % len(_SYLLABLES)] for b in digest[6:6 + 2 + digest[7] % 2])
    return f"{user}@example.com" if "email" in name else user


def write_records(task: RecordsTask, mode: str, settings: PenaltyScenario, penalties: Penalties,
                  temperature: float, rng: random.Random, seed: int) -> tuple[str, str, _Writer]:
    """(the answer, how it ended: complete | end_of_text | array_closed, the writer with its flips)."""
    w = _Writer(settings, penalties, temperature, rng, f"penalty\x00{seed}\x00{task}")
    names = [name for name, _ in task.fields]
    emptied = names[1] if len(names) > 1 else None    # the field after the id: the one that goes empty
    w.emit('{"records": [', '"', '"', "[")
    for i in range(task.n_records):
        if i:
            w.emit(", ", ",")
        w.emit("{", "{")
        for j, (name, kind) in enumerate(task.fields):
            if j:
                w.emit(", ", ",")
            key = name
            if mode != "constrained":
                variants = key_variants(name)
                key = variants[w.choose("key", i, settings.key_margin, variants, [0.0, -settings.key_margin / 2])]
            quote = '"'
            if mode == "unconstrained" and w.choose("quote", i, settings.quote_margin, ['"', "'"], [0.0]):
                quote = "'"
            value = _value(name, kind, i, seed)
            if mode == "constrained" and name in task.optional:
                if w.choose("optional", i, settings.optional_margin, [f"{name}=value", "null"], [0.0]):
                    value = None
            elif mode == "constrained" and isinstance(value, str) and name == emptied:
                if w.choose("value", i, settings.value_margin, [f"{name}=value", '""'], [0.0]):
                    value = ""
            rendered = f"{quote}{value}{quote}" if isinstance(value, str) else json.dumps(value)
            shown = "null" if value is None else '""' if value == "" else f"{name}=value"
            w.emit(f"{quote}{key}{quote}: {rendered}", quote, quote, key, shown,
                   *((quote, quote) if isinstance(value, str) else ()))
        if mode == "unconstrained" and w.choose("close", i, settings.close_margin, ["}", "<end>"], [0.0]):
            return w.text, "end_of_text", w
        w.emit("}", "}")
        w.records_closed += 1
        if mode != "unconstrained" and i < task.n_records - 1 and \
                w.choose("continue", i, settings.continue_margin, [",", "]"], [0.0]):
            w.emit("]}", "]", "}")
            return w.text, "array_closed", w
    w.emit("]}", "]", "}")
    return w.text, "complete", w


class PenaltyEffect:
    """The behaviour: answers the records task as the penalty model writes it."""

    def __init__(self, scenario: Scenario) -> None:
        self.settings = scenario.penalty
        self.seed = scenario.seed

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        if not self.settings.enabled:
            return
        task = recognise(request)
        if task is None:
            return
        body = request.body
        penalties, injected = requested_penalties(request, self.settings.inject_when_omitted)
        temperature = body.get("temperature")
        temperature = float(temperature) if isinstance(temperature, (int, float)) else 1.0
        seed = body.get("seed")
        rng = random.Random(f"penalty:{self.seed}:{seed if isinstance(seed, int) else f'request {state.seq}'}")
        mode, tool = output_mode(request)
        text, ended, writer = write_records(task, mode, self.settings, penalties, temperature, rng, self.seed)
        plan.answer(tokenize(text), request.max_tokens)
        if plan.finish == "length":
            ended = "length"
        plan.tool_name = tool
        plan.truth["penalty"] = {
            "n_records": task.n_records, "mode": mode, "ended": ended,
            "penalties": {"frequency": penalties.frequency, "presence": penalties.presence,
                          "repetition": penalties.repetition},
            "injected": injected, "decisions": writer.decisions, "flips": writer.flips,
            "records_closed": writer.records_closed,
        }
