"""Records to rows: what of a Sample, Run or Metric is stored, and how."""

from __future__ import annotations

import hashlib
from typing import Any, cast

from prober.core.records import KEPT_HEADER_PREFIXES, Metric, Run, Sample, SampleRow, default_site
from prober.core.redact import is_credential_header, redact_text, redact_value


def without_secrets(headers: dict[str, Any] | None, keep_prefixes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Headers without the credential-like ones (adapters redact the key headers already; the store
    drops every such header again, because a key on disk is a leak). `keep_prefixes`: names that
    only look like credentials (x-ratelimit-remaining-tokens)."""
    return {name: value for name, value in (headers or {}).items()
            if not is_credential_header(name) or name.lower().startswith(keep_prefixes)}


def _redacted(row: dict[str, Any]) -> dict[str, Any]:
    """Every value of a row with the configured secrets masked (column names are ours)."""
    return {column: redact_value(value) for column, value in row.items()}


def output_fields(text: str | None, max_chars: int | None) -> dict[str, Any]:
    """The stored (bounded) output, with the sha256 and length of the full text."""
    text = text or ""
    truncated = max_chars is not None and len(text) > max_chars
    return {
        "output_text": text[:max_chars] if truncated else text,
        # surrogatepass: a lone surrogate must not make hashing fail.
        "output_sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        "output_chars": len(text),
        "output_truncated": truncated,
    }


def sample_row(sample: Sample, max_output_chars: int | None) -> SampleRow:
    """Every text in the row has the configured secrets masked (prober/core/redact.py), the output
    before it is hashed and bounded, so that a cut cannot leave half a key behind."""
    ex = sample.exchange
    offsets = ex.offsets_ms()
    return cast(SampleRow, _redacted({
        "run_id": sample.run_id,
        "target": sample.target,
        "probe": sample.probe,
        "case": sample.case,
        "labels": sample.labels,
        "request_index": sample.request_index,
        "attempt": ex.attempt,
        "final": sample.final,
        "protocol": ex.protocol,
        "url": ex.url,
        "request_body": ex.request_body,
        "request_headers": without_secrets(ex.request_headers),
        "stream": ex.stream,
        "http_status": ex.status,
        "response_headers": without_secrets(ex.response_headers, KEPT_HEADER_PREFIXES),
        "request_id": ex.request_id,
        "system_fingerprint": ex.system_fingerprint,
        "response_model": ex.response_model,
        "service_tier": ex.service_tier,
        **output_fields(redact_text(ex.text), max_output_chars),
        "tool_calls": ex.tool_calls,
        "finish_reason": ex.finish_reason,
        "usage": ex.usage,   # as the wire reported it: absent keys stay absent, None stays None
        "started_at": ex.started_at,
        "headers_ms": offsets["headers_ms"],
        "first_byte_ms": offsets["first_byte_ms"],
        "ttft_ms": offsets["ttft_ms"],
        "ttft_answer_ms": offsets["ttft_answer_ms"],
        "end_ms": offsets["end_ms"],
        "chunk_offsets_ms": offsets["chunk_offsets_ms"],
        "chunk_chars": ex.chunk_chars,
        "error_type": ex.error_type,
        "error_message": ex.error_message,
        "findings": ex.findings,
        "rejected_params": ex.rejected_params,
        "extra": ex.extra,
        "entry": sample.entry,
    }))


def run_row(run: Run) -> dict[str, Any]:
    return _redacted({
        "id": run.id,
        "suite": run.suite,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "status": run.status,
        "prober_version": run.prober_version,
        "config_hash": run.config_hash,
        "host": run.host,
        "pid": run.pid,
        "targets": run.targets,
        "loop_lag": run.loop_lag,
        "notes": run.notes,
        "lease_expires_at": run.lease_expires_at,
        "site": run.site or default_site(run.host),
        "batch": run.batch,
    })


def metric_row(metric: Metric) -> dict[str, Any]:
    return _redacted({
        "run_id": metric.run_id,
        "target": metric.target,
        "probe": metric.probe,
        "name": metric.name,
        "labels": metric.labels,
        "value": metric.value,
        "ci_low": metric.ci_low,
        "ci_high": metric.ci_high,
        "n": metric.n,
        "unit": metric.unit,
        "entry": metric.entry,
        "flags": metric.flags or None,
    })
