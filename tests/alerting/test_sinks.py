"""Sinks against real receivers: a local HTTP server checks the generic payload, its HMAC
signature and the Slack payload; a real Alertmanager shows the alert in GET /api/v2/alerts and
closes it on resolve."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import time

import pytest

from prober.alerting.sinks import DeliveryError, make_sink, verify
from prober.core.config import SinkConfig
from prober.core.errors import ConfigError
from tests.support.alertmanager import current_alerts
from tests.support.receiver import Receiver

SECRET = "whsec-test-0b9e"


def event(status: str = "firing", summary: str = "ttft16: prod ttft_p50_ms (concurrency=16) = 950 breaks <= 800",
          key: str = "slo|ttft16|prod|latency|{\"concurrency\":16}") -> dict:
    fired = "2026-01-02T03:04:05+00:00"
    return {"event_id": 42, "status": status, "alert": {
        "key": key, "kind": "slo", "name": "ttft16", "severity": "critical", "target": "prod", "suite": "nightly",
        "probe": "latency", "metric": "ttft_p50_ms", "labels": {"concurrency": 16}, "value": 950.0,
        "summary": summary, "description": "TTFT p50 at 16 must stay <= 800 ms", "detail": {"threshold": 800},
        "fired_at": fired, "resolved_at": dt.datetime.now(dt.UTC).isoformat() if status == "resolved" else None,
        "run_id": "abc123"}}


def sink(monkeypatch, **fields):
    monkeypatch.setenv("SINK_TEST_SECRET", SECRET)
    return make_sink(SinkConfig.model_validate(fields), "prober.toml")


@pytest.mark.emulator
def test_webhook_payload_and_hmac_signature_as_a_receiver_checks_them(monkeypatch):
    with Receiver() as receiver:
        sink(monkeypatch, kind="webhook", url=receiver.url + "/hooks/prober",
             secret_env="SINK_TEST_SECRET").send(event())
    [request] = receiver.requests
    assert request.path == "/hooks/prober"
    assert request.headers["content-type"] == "application/json"
    timestamp, signature = request.headers["x-prober-timestamp"], request.headers["x-prober-signature"]
    assert abs(int(timestamp) - time.time()) < 60
    expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + request.body, hashlib.sha256).hexdigest()
    assert signature == f"sha256={expected}"
    assert verify(SECRET.encode(), timestamp, request.body, signature)
    assert not verify(SECRET.encode(), timestamp, request.body.replace(b"950", b"500"), signature)   # tampered
    assert not verify(b"another secret", timestamp, request.body, signature)
    assert not verify(SECRET.encode(), str(int(timestamp) + 1), request.body, signature)            # replayed later
    body = request.json()
    assert body["version"] == 1 and body["event_id"] == 42 and body["status"] == "firing"
    assert body["alert"]["name"] == "ttft16" and body["alert"]["labels"] == {"concurrency": 16}
    assert request.headers["x-prober-event"] == "42"
    assert SECRET not in request.body.decode() and SECRET not in json.dumps(dict(request.headers))


@pytest.mark.emulator
def test_slack_payload_escapes_control_characters(monkeypatch):
    with Receiver() as receiver:
        hostile = event(summary="model said <script>alert(1)</script> & left")
        sink(monkeypatch, kind="slack", url=receiver.url).send(hostile)
        sink(monkeypatch, kind="slack", url=receiver.url).send(event(status="resolved"))
    firing, resolved = (r.json() for r in receiver.requests)
    assert firing["text"].startswith(":rotating_light: [FIRING] ttft16 (critical) on prod")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; left" in firing["text"] and "<script>" not in json.dumps(firing)
    assert [block["type"] for block in firing["blocks"]] == ["section", "section", "context"]
    assert resolved["text"].startswith(":white_check_mark: [RESOLVED]")


@pytest.mark.emulator
def test_a_receiver_answering_non_2xx_is_a_delivery_error(monkeypatch):
    with Receiver() as receiver:
        receiver.status = 500
        with pytest.raises(DeliveryError, match="HTTP 500"):
            sink(monkeypatch, kind="slack", url=receiver.url).send(event())


@pytest.mark.unit
def test_sink_config_errors():
    for fields, message in [({"kind": "webhook", "url": "http://x"}, "needs secret_env"),
                            ({"kind": "slack", "url": "http://x", "url_env": "U"}, "exactly one of url and url_env"),
                            ({"kind": "slack"}, "exactly one of url and url_env"),
                            ({"kind": "slack", "url": "http://x", "secret_env": "S"}, "webhook\" only"),
                            ({"kind": "pagerduty", "url": "http://x"}, "kind")]:
        with pytest.raises(ValueError, match=message):
            SinkConfig.model_validate(fields)
    with pytest.raises(ConfigError, match="SINK_UNSET_VAR"):
        make_sink(SinkConfig.model_validate({"kind": "alertmanager", "url_env": "SINK_UNSET_VAR"}), "prober.toml")


def _ours(alertmanager_url: str, key_label: str) -> list[dict]:
    return [a for a in current_alerts(alertmanager_url) if a["labels"].get("target") == key_label]


@pytest.mark.infra
@pytest.mark.timeout(120)
def test_alertmanager_shows_the_alert_and_closes_it_on_resolve(monkeypatch, alertmanager_url):
    manager = sink(monkeypatch, kind="alertmanager", url=alertmanager_url)
    firing = event()
    firing["alert"]["target"] = "prod-am-test"
    manager.send(firing)
    [shown] = _ours(alertmanager_url, "prod-am-test")
    assert shown["status"]["state"] == "active"
    assert {k: shown["labels"][k] for k in ("alertname", "severity", "target", "suite", "probe", "metric",
                                             "concurrency", "job")} == {
        "alertname": "ttft16", "severity": "critical", "target": "prod-am-test", "suite": "nightly",
        "probe": "latency", "metric": "ttft_p50_ms", "concurrency": "16", "job": "prober"}
    assert shown["annotations"]["summary"].startswith("ttft16: prod ttft_p50_ms")
    assert shown["annotations"]["description"] == "TTFT p50 at 16 must stay <= 800 ms"
    assert dt.datetime.fromisoformat(shown["startsAt"].replace("Z", "+00:00")) == \
        dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ends = dt.datetime.fromisoformat(shown["endsAt"].replace("Z", "+00:00"))
    assert ends - dt.datetime.now(dt.UTC) > dt.timedelta(hours=25)      # held until the next run

    resolved = event(status="resolved")
    resolved["alert"]["target"] = "prod-am-test"
    manager.send(resolved)
    deadline = time.monotonic() + 20
    while _ours(alertmanager_url, "prod-am-test") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _ours(alertmanager_url, "prod-am-test") == []      # endsAt in the past: no longer an active alert
