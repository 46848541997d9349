"""Runs, samples and metrics in and out of the store, on SQLite and on a real PostgreSQL server.

The fixtures `store_url` (a new database per test, on both backends) and `db` (a Store open on
it) and the record factories are imported by the other test_store_* modules.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from prober.core.errors import ConfigError
from prober.core.records import Exchange, Metric, Run, Sample
from prober.store import Store
from tests.support.postgres import create_database, postgres_url  # noqa: F401

UTC = dt.UTC
START_NS = 5_000_000_000


# The parameter sets the tier of each test that takes the fixture (see tests/conftest.py).
@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.unit),
                        pytest.param("postgresql", marks=pytest.mark.infra)])
def store_url(request, tmp_path) -> str:
    """A URL of a new, empty database: a SQLite file, or a database on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'prober.db'}"
    return create_database(request.getfixturevalue("postgres_url"), f"t_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def db(store_url):
    """An open Store on a new database (see store_url)."""
    opened = Store.open(store_url)
    yield opened
    opened.close()


def make_run(run_id: str, **fields) -> Run:
    values = dict(id=run_id, suite="latency", started_at=dt.datetime.now(UTC), prober_version="0.1.0",
                  config_hash="abc123", host=socket.gethostname(), pid=os.getpid(), targets=["emu"])
    values.update(fields)
    return Run(**values)


def make_sample(run_id: str, index: int = 0, *, probe: str = "latency", target: str = "emu",
                case: str | None = None, **exchange_fields) -> Sample:
    values = dict(
        protocol="anthropic", url="http://127.0.0.1:9/v1/messages",
        request_body={"model": "emulator-1", "max_tokens": 16, "temperature": 0.0,
                      "messages": [{"role": "user", "content": f"prompt {index}"}]},
        request_headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
        started_at=dt.datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC), start_ns=START_NS, stream=True,
        status=200, response_headers={"request-id": f"req_{index}", "content-type": "text/event-stream"},
        request_id=f"req_{index}", response_model="emulator-1", text=f"answer {index}", finish_reason="end_turn",
        usage={"input_tokens": 12, "output_tokens": 3},
        headers_ns=START_NS + 4_000_000, first_byte_ns=START_NS + 4_500_000, first_token_ns=START_NS + 7_250_000,
        chunk_ns=[START_NS + 7_250_000, START_NS + 9_000_000], chunk_chars=[6, 2], end_ns=START_NS + 12_000_000,
    )
    values.update(exchange_fields)
    return Sample(run_id=run_id, target=target, probe=probe, case=case or f"case-{index}",
                  labels={"concurrency": 4, "phase": "measure"}, exchange=Exchange(**values), request_index=index)


def write_samples(store: Store, sample_list: list[Sample], max_output_chars: int | None = 65536) -> None:
    with store.sample_writer(max_output_chars) as writer:
        for sample in sample_list:
            writer.submit(sample)


def test_sample_round_trip(db):
    db.create_run(make_run("r1"))
    sample = make_sample(
        "r1", 7, stream=False, attempt=2,
        request_headers={"Authorization": "Bearer sk-secret", "X-Api-Key": "sk-ant-secret", "api-key": "azure",
                         "content-type": "application/json"},
        response_headers={"request-id": "req_7", "x-ratelimit-remaining-requests": "99"},
        system_fingerprint="fp_1", service_tier="priority", tool_calls=[{"name": "get", "input": {"a": [1, 2]}}],
        findings=["usage.cache_read_input_tokens missing"], rejected_params=["temperature"],
        extra={"timings": {"prompt_ms": 1.5}, "seen_at": dt.datetime(2025, 1, 1, tzinfo=UTC)})
    sample.final = False
    write_samples(db, [sample])

    [row] = db.samples("r1")
    assert isinstance(row["id"], int)
    assert (row["run_id"], row["target"], row["probe"], row["case"]) == ("r1", "emu", "latency", "case-7")
    assert row["labels"] == {"concurrency": 4, "phase": "measure"}
    assert (row["request_index"], row["attempt"], row["final"], row["stream"]) == (7, 2, False, False)
    assert row["protocol"] == "anthropic" and row["url"] == "http://127.0.0.1:9/v1/messages"
    assert row["request_body"] == sample.exchange.request_body
    assert row["request_headers"] == {"content-type": "application/json"}   # secrets never stored
    assert row["response_headers"] == {"request-id": "req_7", "x-ratelimit-remaining-requests": "99"}
    assert (row["http_status"], row["request_id"], row["system_fingerprint"], row["response_model"]) == \
        (200, "req_7", "fp_1", "emulator-1")
    assert row["service_tier"] == "priority"
    assert row["output_text"] == "answer 7" and row["output_truncated"] is False
    assert row["tool_calls"] == [{"name": "get", "input": {"a": [1, 2]}}]
    assert row["finish_reason"] == "end_turn"
    assert row["started_at"] == sample.exchange.started_at and row["started_at"].tzinfo == UTC
    assert (row["headers_ms"], row["first_byte_ms"], row["ttft_ms"], row["end_ms"]) == (4.0, 4.5, 7.25, 12.0)
    assert row["chunk_offsets_ms"] == [7.25, 9.0] and row["chunk_chars"] == [6, 2]
    assert row["error_type"] is None and row["error_message"] is None
    assert row["findings"] == ["usage.cache_read_input_tokens missing"]
    assert row["rejected_params"] == ["temperature"]
    assert row["extra"] == {"timings": {"prompt_ms": 1.5}, "seen_at": "2025-01-01T00:00:00+00:00"}


def test_usage_is_stored_exactly_as_reported(db):
    db.create_run(make_run("r1"))
    usages = [
        {"output_tokens": 5, "input_tokens": 10, "cache_read_input_tokens": None,
         "cache_creation": {"ephemeral_5m_input_tokens": 0}},   # no cache_creation_input_tokens at all
        {},
        None,
        {"prompt_tokens": 3, "completion_tokens": 0, "prompt_tokens_details": None},
    ]
    write_samples(db, [make_sample("r1", i, usage=usage) for i, usage in enumerate(usages)])
    stored = [row["usage"] for row in db.samples("r1")]
    assert stored == usages
    assert list(stored[0]) == ["output_tokens", "input_tokens", "cache_read_input_tokens", "cache_creation"]
    assert "cache_creation_input_tokens" not in stored[0] and stored[0]["cache_read_input_tokens"] is None
    assert stored[1] == {} and stored[2] is None


def test_output_is_bounded_and_hashed_in_full(db):
    db.create_run(make_run("r1"))
    long_text = "é✓" * 60 + "tail"
    write_samples(db, [make_sample("r1", 0, text=long_text), make_sample("r1", 1, text="short"),
                          make_sample("r1", 2, text="", error_type="timeout", error_message="read timed out",
                                      status=None, usage=None)], max_output_chars=100)
    long_row, short_row, failed_row = db.samples("r1")
    assert long_row["output_text"] == long_text[:100]
    assert long_row["output_truncated"] is True and long_row["output_chars"] == 124
    assert long_row["output_sha256"] == hashlib.sha256(long_text.encode()).hexdigest()
    assert short_row["output_text"] == "short" and short_row["output_truncated"] is False
    assert short_row["output_sha256"] == hashlib.sha256(b"short").hexdigest()
    assert (failed_row["error_type"], failed_row["error_message"], failed_row["http_status"]) == \
        ("timeout", "read timed out", None)


def test_nul_characters_and_non_finite_numbers_do_not_lose_a_sample(db):
    db.create_run(make_run("r1"))
    write_samples(db, [make_sample("r1", 0, text="a\x00b", extra={"lag": float("nan"), "s": "x\x00"})])
    [row] = db.samples("r1")
    assert row["output_text"] in ("a\x00b", "a\ufffdb")   # PostgreSQL text cannot hold NUL
    assert row["output_sha256"] == hashlib.sha256(b"a\x00b").hexdigest()
    assert row["extra"] == {"lag": None, "s": "x\x00"}


def test_datetimes_are_utc_and_timezone_aware(db):
    plus_two = dt.timezone(dt.timedelta(hours=2))
    db.create_run(make_run("r1", started_at=dt.datetime(2025, 6, 1, 14, 0, tzinfo=plus_two)))
    db.create_run(make_run("r2", started_at=dt.datetime(2025, 6, 1, 13, 0)))   # naive is taken as UTC
    db.finish_run("r1", "complete", dt.datetime(2025, 6, 1, 12, 30, 0, 250000, tzinfo=UTC))
    r1, r2 = db.get_run("r1"), db.get_run("r2")
    assert r1["started_at"] == dt.datetime(2025, 6, 1, 12, 0, tzinfo=UTC) and r1["started_at"].tzinfo == UTC
    assert r1["finished_at"] == dt.datetime(2025, 6, 1, 12, 30, 0, 250000, tzinfo=UTC)
    assert r2["started_at"] == dt.datetime(2025, 6, 1, 13, 0, tzinfo=UTC) and r2["finished_at"] is None
    assert [run["id"] for run in db.list_runs()] == ["r2", "r1"]


def test_run_lifecycle_and_listing(db):
    base = dt.datetime(2025, 1, 1, tzinfo=UTC)
    db.create_run(make_run("aaa111", started_at=base, targets=["emu"]))
    db.create_run(make_run("aaa222", started_at=base + dt.timedelta(hours=1), suite="caching",
                              targets=["local"], notes={"why": "nightly"}))
    db.create_run(make_run("bbb333", started_at=base + dt.timedelta(hours=2), targets=[]))
    write_samples(db, [make_sample("aaa111", i) for i in range(3)]
                  + [make_sample("aaa111", 3, error_type="rate_limited", status=429)]
                  + [make_sample("bbb333", 0, target="local")])
    with pytest.raises(ValueError, match="aaa111"):
        db.create_run(make_run("aaa111"))

    db.finish_run("aaa222", "failed", base + dt.timedelta(hours=1, minutes=5),
                     loop_lag={"p50_ms": 0.2, "p99_ms": 1.5, "saturated": False}, notes={"problems": ["x"]})
    with pytest.raises(ValueError, match="status"):
        db.finish_run("aaa222", "done", base)
    with pytest.raises(ValueError, match="unknown run"):
        db.finish_run("nope", "complete", base)

    listed = db.list_runs()
    assert [run["id"] for run in listed] == ["bbb333", "aaa222", "aaa111"]
    counts = {run["id"]: (run["sample_count"], run["error_count"]) for run in listed}
    assert counts == {"bbb333": (1, 0), "aaa222": (0, 0), "aaa111": (4, 1)}
    assert [run["id"] for run in db.list_runs(limit=1)] == ["bbb333"]
    assert [run["id"] for run in db.list_runs(suite="caching")] == ["aaa222"]
    # A run counts for a target if it lists it or has samples from it.
    assert [run["id"] for run in db.list_runs(target="local")] == ["bbb333", "aaa222"]
    assert [run["id"] for run in db.list_runs(target="emu")] == ["aaa111"]

    finished = db.get_run("aaa222")
    assert finished["status"] == "failed"
    assert finished["loop_lag"] == {"p50_ms": 0.2, "p99_ms": 1.5, "saturated": False}
    assert finished["notes"] == {"why": "nightly", "problems": ["x"]}   # merged
    assert finished["targets"] == ["local"] and finished["host"] == socket.gethostname()
    assert db.get_run("bbb")["id"] == "bbb333"   # a unique prefix
    with pytest.raises(ConfigError, match="ambiguous.*aaa111, aaa222"):
        db.get_run("aaa")
    assert db.get_run("zzz") is None and db.get_run("") is None
    assert db.get_run("aa%") is None   # LIKE wildcards in a prefix are literal


def test_metrics_round_trip(db):
    db.create_run(make_run("r1"))
    metrics = [Metric(run_id="r1", target="emu", probe="latency", name="ttft_p50_ms", value=7.25,
                      labels={"concurrency": 4}, ci_low=7.0, ci_high=7.5, n=200, unit="ms"),
               Metric(run_id="r1", target="emu", probe="caching", name="hit_rate", value=None),
               Metric(run_id="r1", target="emu", probe="latency", name="ttft_p99_ms", value=9.0, ci_low=8.1,
                      n=32, unit="ms", flags=["interval_unbounded"])]
    db.write_metrics(metrics)
    db.write_metrics([])
    first, second, third = db.metrics("r1")
    assert {key: first[key] for key in ("target", "probe", "name", "labels", "value", "ci_low", "ci_high",
                                        "n", "unit", "flags")} == \
        {"target": "emu", "probe": "latency", "name": "ttft_p50_ms", "labels": {"concurrency": 4}, "value": 7.25,
         "ci_low": 7.0, "ci_high": 7.5, "n": 200, "unit": "ms", "flags": None}
    assert second["value"] is None and second["labels"] == {} and second["n"] is None
    assert third["flags"] == ["interval_unbounded"] and third["ci_high"] is None
    assert [m["name"] for m in db.metrics("r1", probe="caching")] == ["hit_rate"]


def test_samples_filters_and_frame(db):
    db.create_run(make_run("r1"))
    write_samples(db, [make_sample("r1", 0), make_sample("r1", 1, probe="caching"),
                          make_sample("r1", 2, target="local", usage={"input_tokens": 1})])
    assert [row["request_index"] for row in db.samples("r1", probe="latency")] == [0, 2]
    assert [row["request_index"] for row in db.samples("r1", probe="latency", target="local")] == [2]

    frame = db.samples_frame("r1", expand=("labels", "usage"))
    assert len(frame) == 3
    assert list(frame["labels.concurrency"]) == [4, 4, 4]
    assert list(frame["usage.output_tokens"])[:2] == [3, 3]
    assert str(frame["started_at"].dt.tz) == "UTC"
    assert frame["ttft_ms"].tolist() == [7.25] * 3
    empty = db.samples_frame("none")
    assert len(empty) == 0 and "output_sha256" in empty.columns


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_mark_stale_runs_interrupted(db):
    now = dt.datetime.now(UTC)
    dead = _dead_pid()
    zombie = subprocess.Popen(["true"])   # exits at once, not reaped yet
    db.create_run(make_run("dead", pid=dead, started_at=now))
    db.create_run(make_run("alive", pid=os.getpid(), started_at=now))
    # Our pid, but the run is older than this process: a previous process had the same pid.
    db.create_run(make_run("reused", pid=os.getpid(), started_at=now - dt.timedelta(days=1)))
    db.create_run(make_run("elsewhere", pid=dead, host="some-other-host", started_at=now))
    db.create_run(make_run("done", pid=dead, started_at=now, status="complete"))
    try:
        deadline = time.monotonic() + 5
        while (Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
               and time.monotonic() < deadline):
            time.sleep(0.01)
        db.create_run(make_run("zombie", pid=zombie.pid, started_at=now))
        assert sorted(db.mark_stale_runs_interrupted()) == ["dead", "reused", "zombie"]
    finally:
        zombie.wait()
    statuses = {run["id"]: run["status"] for run in db.list_runs()}
    assert statuses == {"dead": "interrupted", "alive": "running", "reused": "interrupted",
                        "elsewhere": "running", "done": "complete", "zombie": "interrupted"}
    assert "interrupted_detected_at" in db.get_run("dead")["notes"]
    assert db.mark_stale_runs_interrupted() == []


@pytest.mark.parametrize("url, expected", [
    ("prober.db", "is not a database URL"),
    ("", "store url is empty"),
    ("sqlite://", "in-memory"),
    ("sqlite:///:memory:", "in-memory"),
    ("mysql://user@localhost/db", "unsupported database 'mysql'"),
    ("postgresql+asyncpg://user@localhost/db", "unsupported driver 'postgresql+asyncpg'"),
    ("sqlite:////nonexistent-dir/sub/prober.db", "cannot open the database"),
    ("postgresql+psycopg://prober:hunter2@127.0.0.1:1/prober", "cannot open the database"),
])
@pytest.mark.emulator
def test_bad_urls_are_one_line_config_errors(url, expected):
    with pytest.raises(ConfigError) as caught:
        Store.open(url)
    message = str(caught.value)
    assert expected in message and "\n" not in message
    if url:
        assert "store url" in message
    assert "hunter2" not in message


@pytest.mark.unit
def test_a_file_that_is_not_a_database_is_a_config_error(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a database, just some text that is long enough " * 50)
    with pytest.raises(ConfigError, match="cannot open the database: file is not a database"):
        Store.open(f"sqlite:///{path}")


@pytest.mark.infra
def test_plain_postgresql_scheme_uses_psycopg(postgres_url):
    url = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with Store.open(url) as opened:
        assert opened.backend == "postgresql"


def _alert_row(key: str, state: str, value: float, at: dt.datetime) -> dict:
    return {"key": key, "kind": "slo", "name": "ttft", "severity": "page", "target": "emu", "suite": "latency",
            "probe": "latency", "metric": "ttft_p50_ms", "labels": {"concurrency": 4}, "state": state,
            "breaks": 1, "value": value, "summary": f"{key} {value}", "detail": {}, "updated_at": at}


def test_alert_changes_insert_new_keys_update_known_ones_and_apply_a_repeated_key_in_order(db):
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    db.save_alert_changes([_alert_row("a", "firing", 1.0, at), _alert_row("b", "ok", 2.0, at)], [], [])
    later = at + dt.timedelta(days=1)
    db.save_alert_changes([_alert_row("b", "firing", 3.0, later), _alert_row("c", "ok", 4.0, later),
                           {**_alert_row("c", "firing", 5.0, later), "fired_at": later}], [], [])
    stored = {row["key"]: row for row in db.alerts()}
    assert {key: (row["state"], row["value"]) for key, row in stored.items()} == {
        "a": ("firing", 1.0), "b": ("firing", 3.0), "c": ("firing", 5.0)}
    assert stored["b"]["updated_at"] == later and stored["a"]["updated_at"] == at
    assert stored["c"]["fired_at"] == later and stored["b"]["fired_at"] is None
