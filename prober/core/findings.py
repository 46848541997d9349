"""Stable codes for the findings prober records on a sample.

A finding is a line of text for people ("anthropic error body (HTTP 400): type: Field required");
its code is the stable name of what kind of finding it is ("anthropic_error_body_shape"), for
configuration (`known = [...]` on a target turns those findings into notices: prober/run/
sample_writer.py) and for counting (the suites' structured-output rates). A finding written as
"<code>: <detail>" carries its code; the others are recognised by their wording below, which is
the conformance checker's (prober/targets/conformance.py) and the adapters' (prober/targets/).
docs/operations.md lists the codes; `prober show` lists each target's known ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

STRUCTURED_OUTPUT_IGNORED = "structured_output_ignored"
SCHEMA_VIOLATION = "schema_violation"

# code -> what it means; the order is the documentation's.
FINDING_CODES: dict[str, str] = {
    "anthropic_event_shape": "an Anthropic stream event does not match its SDK type",
    "anthropic_event_order": "Anthropic stream events out of order (before message_start, after "
                             "message_stop, a delta or stop for a block that is not open)",
    "anthropic_event_name": "an Anthropic SSE event name differs from its data's type",
    "anthropic_no_message_stop": "an Anthropic stream ended without message_stop and without an error event",
    "anthropic_blocks_not_stopped": "an Anthropic stream stopped with content blocks still open",
    "anthropic_message_shape": "a non-streamed Anthropic Message does not match the SDK type",
    "anthropic_error_body_shape": "an Anthropic error body or error event is not the ErrorResponse "
                                  "shape (llama-server answers /v1/messages errors in OpenAI's shape)",
    "openai_chunk_shape": "an OpenAI stream chunk does not match ChatCompletionChunk",
    "openai_event_name": "an OpenAI stream chunk with an SSE event name other than error",
    "openai_after_done": "OpenAI stream data after [DONE]",
    "openai_no_done": "an OpenAI stream ended without [DONE] and without an error",
    "openai_no_usage_chunk": "no usage chunk although stream_options.include_usage was set",
    "openai_usage_chunk_choices": "an OpenAI usage chunk with non-empty choices",
    "openai_completion_shape": "a non-streamed ChatCompletion does not match the SDK type",
    "openai_error_body_shape": "an OpenAI error body or error event without its error object or message",
    "body_not_json": "a response body that is not JSON",
    "event_not_object": "a stream event whose data is not a JSON object",
    "not_event_stream": "a stream was requested and the response was not an event stream",
    "parameter_rejected": "the endpoint refused a sampling parameter; resent without it",
    "parameter_not_sent": "a sampling parameter not sent, refused earlier by this endpoint",
    "max_tokens_field": "max_tokens refused, resent as max_completion_tokens",
    "not_expressible": "a request feature this protocol cannot express (json_object on Anthropic)",
    "usage_not_counted": "a usage count that is not a token count, not charged to the budget",
    STRUCTURED_OUTPUT_IGNORED: "structured output was requested and the answer is not JSON, "
                               "or not the forced tool call",
    SCHEMA_VIOLATION: "structured output was requested and the answer is JSON that does not "
                      "match the requested schema",
    "conformance_check_failed": "the conformance checker itself failed (a bug of prober's)",
}

# The wording of each finding without a "<code>:" prefix, first match wins.
_WORDING: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(pattern), code) for pattern, code in (
    (r"^anthropic stream without message_stop", "anthropic_no_message_stop"),
    (r"^anthropic stream: blocks .* never stopped", "anthropic_blocks_not_stopped"),
    (r"^anthropic error body \(HTTP \d+\)", "anthropic_error_body_shape"),
    (r"^anthropic error #\d+", "anthropic_error_body_shape"),
    (r"^anthropic message:", "anthropic_message_shape"),
    (r"^anthropic body \(HTTP \d+\): not JSON", "body_not_json"),
    (r"^anthropic event #\d+: data is not a JSON object", "event_not_object"),
    (r"^anthropic \S+ #\d+: SSE event name", "anthropic_event_name"),
    (r"^anthropic \S+ #\d+: (event after message_stop|second message_start|before message_start"
     r"|delta for block|stop for block)", "anthropic_event_order"),
    (r"^anthropic \S+ #\d+: ", "anthropic_event_shape"),
    (r"^openai error (body \(HTTP \d+\)|event #\d+)", "openai_error_body_shape"),
    (r"^openai body \(HTTP \d+\): not JSON", "body_not_json"),
    (r"^openai chat\.completion:", "openai_completion_shape"),
    (r"^openai chunk #\d+: data after \[DONE\]", "openai_after_done"),
    (r"^openai chunk #\d+: data is not a JSON object", "event_not_object"),
    (r"^openai chunk #\d+: unexpected SSE event name", "openai_event_name"),
    (r"^openai chunk #\d+: usage chunk with non-empty choices", "openai_usage_chunk_choices"),
    (r"^openai chunk #\d+: ", "openai_chunk_shape"),
    (r"^openai stream without \[DONE\]", "openai_no_done"),
    (r"^openai stream: no usage chunk", "openai_no_usage_chunk"),
    (r"^stream requested but the response was not an event stream", "not_event_stream"),
    (r"^parameter \S+ rejected", "parameter_rejected"),
    (r"^parameter \S+ not sent", "parameter_not_sent"),
    (r"^max_tokens rejected, resent as max_completion_tokens", "max_tokens_field"),
    (r"has no Anthropic equivalent: not sent$", "not_expressible"),
    (r"^usage\.\S+ = .* is not a token count", "usage_not_counted"),
    (r"^conformance check failed", "conformance_check_failed"),
))
_PREFIXED = re.compile(r"^([a-z][a-z0-9_]*):")


def finding_code(finding: str) -> str | None:
    """The code of a finding line; None for wording no code names (a finding still, never dropped)."""
    prefixed = _PREFIXED.match(finding)
    if prefixed and prefixed.group(1) in FINDING_CODES:
        return prefixed.group(1)
    for pattern, code in _WORDING:
        if pattern.search(finding):
            return code
    return None


def has_finding(findings: list[str] | None, code: str) -> bool:
    """Whether a sample's findings include one of this code."""
    return any(finding_code(finding) == code for finding in findings or ())


# The suites that ask for structured output report these shares of their successful answers.
STRUCTURED_OUTPUT_RATES = {"structured_output_ignored_rate": STRUCTURED_OUTPUT_IGNORED,
                           "schema_violation_rate": SCHEMA_VIOLATION}


def structured_output_counts(findings_of_rows: list[list[str] | None]) -> list[tuple[str, int]]:
    """(rate metric, answers with that finding) over the answers' findings lists."""
    return [(metric, sum(1 for findings in findings_of_rows if has_finding(findings, code)))
            for metric, code in STRUCTURED_OUTPUT_RATES.items()]


def unknown_codes(codes: list[str]) -> list[str]:
    """The codes of a `known` list that name no finding (a typo would silently match nothing)."""
    return [code for code in codes if code not in FINDING_CODES]


# --- known behaviour per target (`known = [...]` in prober.toml) --------------------------------------

# The notice a known finding becomes: "known finding <code>: <the finding>".
KNOWN_NOTICE = "known finding "


def applies(code: str, protocol: str) -> bool:
    """Whether a code can occur on a target of this protocol (anthropic_* and openai_* codes only
    on their own protocol; the others anywhere)."""
    for own in ("anthropic", "openai"):
        if code.startswith(f"{own}_"):
            return protocol == own
    return True


def set_aside_known(findings: list[str], notices: list[str], known: Iterable[str]) -> list[str]:
    """The findings whose code is not in `known`; each known one goes to `notices` instead (a
    notice neither counts in the suites' rates nor pages)."""
    codes = frozenset(known)
    if not codes:
        return findings
    kept = []
    for finding in findings:
        code = finding_code(finding)
        if code in codes:
            notices.append(f"{KNOWN_NOTICE}{code}: {finding}")
        else:
            kept.append(finding)
    return kept


def known_codes_seen(notices: Iterable[str]) -> set[str]:
    """The codes of the known findings among a sample's notices."""
    return {notice[len(KNOWN_NOTICE):].split(":", 1)[0] for notice in notices
            if isinstance(notice, str) and notice.startswith(KNOWN_NOTICE)}


# The process's known codes per target: the run command registers its configuration's before the
# run starts, and the sample writer's child is handed them, as it is handed the secrets.
_known: dict[str, tuple[str, ...]] = {}


def register_known(known: Mapping[str, Iterable[str]]) -> None:
    _known.update({target: tuple(codes) for target, codes in known.items()})


def active_known() -> dict[str, tuple[str, ...]]:
    return dict(_known)
