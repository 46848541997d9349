"""Whether an answer honoured the structured output its request asked for.

A request asks for structured output with OpenAI's `response_format` (json_schema or json_object),
Anthropic's `output_config.format`, the Responses API's `text.format`, or a forced tool call
(`tool_choice` naming a tool, or "any"/"required"). An answer that is not JSON (or not the forced
tool call) gets the finding `structured_output_ignored`; JSON that does not match the requested
schema gets `schema_violation` (codes: prober/core/findings.py). llama-server drops
`output_config` on /v1/messages and answers in prose: nothing else would notice.

The schema check covers what structured-output schemas use (type, properties, required,
additionalProperties, items, enum, const, anyOf/oneOf) and ignores the other keywords: a
keyword it does not know never makes a violation.
"""

from __future__ import annotations

import json
from typing import Any

from prober.core.findings import SCHEMA_VIOLATION, STRUCTURED_OUTPUT_IGNORED
from prober.core.records import Exchange

_TRUNCATED = frozenset({"length", "max_tokens"})
_ERRORS_SHOWN = 3
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
    "integer": (int,), "number": (int, float),
}


def requested_structure(body: dict[str, Any]) -> tuple[str, dict[str, Any] | None, str | None] | None:
    """(what asked for it, the schema or None for any JSON, the forced tool's name or None for
    "any tool") from a request body; None when it asks for no structure."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
        spec = fmt.get("json_schema")
        return "response_format", (spec.get("schema") if isinstance(spec, dict) else None), None
    config = body.get("output_config")
    if isinstance(config, dict) and isinstance(config.get("format"), dict):
        fmt = config["format"]
        if fmt.get("type") == "json_schema":
            return "output_config", fmt.get("schema") if isinstance(fmt.get("schema"), dict) else None, None
    text = body.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        fmt = text["format"]
        if fmt.get("type") in ("json_schema", "json_object"):
            return "text.format", fmt.get("schema") if isinstance(fmt.get("schema"), dict) else None, None
    return _forced_tool(body)


def _forced_tool(body: dict[str, Any]) -> tuple[str, dict[str, Any] | None, str | None] | None:
    choice = body.get("tool_choice")
    name: str | None
    if choice in ("required", "any") or (isinstance(choice, dict) and choice.get("type") in ("any", "required")):
        name = None
    elif isinstance(choice, dict) and choice.get("type") == "tool" and isinstance(choice.get("name"), str):
        name = choice["name"]                                                   # Anthropic
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")                                   # Chat Completions
    elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        name = choice["name"]                                                   # Responses
    else:
        return None
    return "tool_choice", _tool_schema(body.get("tools"), name) if name else None, name


def _tool_schema(tools: Any, name: str) -> dict[str, Any] | None:
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        nested = tool.get("function")
        function: dict[str, Any] = nested if isinstance(nested, dict) else tool
        if function.get("name") == name:
            schema = function.get("input_schema") or function.get("parameters")
            return schema if isinstance(schema, dict) else None
    return None


def structured_output_findings(ex: Exchange) -> list[str]:
    """The structured-output finding of a completed, successful exchange, if any."""
    if not ex.ok or not isinstance(ex.request_body, dict):
        return []
    asked = requested_structure(ex.request_body)
    if asked is None:
        return []
    source, schema, tool = asked
    if source == "tool_choice":
        return _tool_findings(ex, schema, tool)
    text = ex.text.strip()
    try:
        value = json.loads(text)
    except ValueError:
        if ex.finish_reason in _TRUNCATED and text[:1] in ("{", "["):
            return []        # JSON cut by max_tokens: the structure was followed as far as it went
        return [f"{STRUCTURED_OUTPUT_IGNORED}: {source} asked for JSON; the answer is not JSON: {text[:60]!r}"]
    return _schema_findings(value, schema, source)


def _tool_findings(ex: Exchange, schema: dict[str, Any] | None, tool: str | None) -> list[str]:
    calls = [call for call in ex.tool_calls if tool is None or call.get("name") == tool]
    wanted = f"tool {tool!r}" if tool else "a tool call"
    if not calls:
        return [f"{STRUCTURED_OUTPUT_IGNORED}: tool_choice forced {wanted}; the answer has none"]
    call = calls[0]
    if call.get("parse_error"):
        return [f"{STRUCTURED_OUTPUT_IGNORED}: tool_choice forced {wanted}; its input is not JSON"]
    return _schema_findings(call.get("input"), schema, "tool_choice")


def _schema_findings(value: Any, schema: dict[str, Any] | None, source: str) -> list[str]:
    if schema is None:
        return []
    errors = schema_errors(value, schema)
    if not errors:
        return []
    return [f"{SCHEMA_VIOLATION}: {source}: " + "; ".join(errors[:_ERRORS_SHOWN])]


def schema_errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """Where `value` breaks `schema`, as "path: what" lines; empty when it matches."""
    errors: list[str] = []
    kinds = schema.get("type")
    if kinds is not None:
        names = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_type(value, name) for name in names):
            return [f"{path}: {type(value).__name__} where {'/'.join(map(str, names))} is required"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: not the constant {schema['const']!r}")
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and not any(
                isinstance(option, dict) and not schema_errors(value, option, path) for option in options):
            errors.append(f"{path}: matches none of {key}")
    if isinstance(value, dict):
        errors += _object_errors(value, schema, path)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{path}[{index}]")
    return errors


def _object_errors(value: dict[str, Any], schema: dict[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    declared = schema.get("properties")
    properties: dict[str, Any] = declared if isinstance(declared, dict) else {}
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(f"{path}: missing required {name!r}")
    for name, item in value.items():
        if name in properties:
            if isinstance(properties[name], dict):
                errors += schema_errors(item, properties[name], f"{path}.{name}")
        elif schema.get("additionalProperties") is False:
            errors.append(f"{path}: unexpected {name!r}")
    return errors


def _is_type(value: Any, name: Any) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False                      # JSON has no boolean numbers; Python's bool is an int
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    allowed = _TYPES.get(name) if isinstance(name, str) else None
    return True if allowed is None else isinstance(value, allowed)
