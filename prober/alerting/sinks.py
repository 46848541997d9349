"""Where alert events go: a signed JSON webhook, a Slack incoming webhook, Prometheus Alertmanager.

Each sink turns one outbox event (prober/alerting/alerts.py, `event_payload`) into one HTTP POST and raises
`DeliveryError` unless the receiver answered 2xx; the outbox records the outcome and retries on a
later run. Delivery goes through the project's own HTTP client (prober/targets/transport.py), one
short-lived connection per POST, run to completion from synchronous code.

Generic webhook signature: the body is the raw JSON bytes; the headers carry
    X-Prober-Timestamp: <unix seconds when sent>
    X-Prober-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<raw body>" with the secret>
    X-Prober-Event: <event id>    (the same on a retry, so a receiver can drop duplicates)
A receiver recomputes the HMAC over the timestamp, a dot and the body exactly as received,
compares in constant time, and rejects timestamps too far from its clock (replays). The secret
comes only from the environment variable named by `secret_env`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import re
import time
from typing import Any, Protocol

from prober.core.config import SinkConfig, Timeouts
from prober.targets.transport import HTTPTransport, TransportError, build_head, split_url

SIGNATURE_HEADER = "X-Prober-Signature"
TIMESTAMP_HEADER = "X-Prober-Timestamp"
EVENT_HEADER = "X-Prober-Event"
WEBHOOK_VERSION = 1


class DeliveryError(Exception):
    """The receiver could not be reached or did not answer 2xx."""


class Sink(Protocol):
    name: str
    kind: str

    def send(self, event: dict[str, Any]) -> None: ...


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The X-Prober-Signature value for this body sent at this timestamp."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify(secret: bytes, timestamp: str, body: bytes, signature: str) -> bool:
    """What a receiver does (the tests' receiver uses it): constant-time comparison."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)


def webhook_body(event: dict[str, Any]) -> dict[str, Any]:
    return {"version": WEBHOOK_VERSION, "event_id": event["event_id"], "status": event["status"],
            "alert": event["alert"]}


def _slack_escape(text: str) -> str:
    # Slack's mrkdwn treats these three as control characters.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# Statuses that close an alert at a receiver: "new_normal" closes a drift alert whose level
# persisted for the configured nights (the level is the baseline now), as "resolved" does.
CLOSING_STATUSES = ("resolved", "new_normal")

def slack_body(event: dict[str, Any]) -> dict[str, Any]:
    alert = event["alert"]
    icon = ":white_check_mark:" if event["status"] in CLOSING_STATUSES else (
        ":rotating_light:" if alert["severity"] == "critical" else ":warning:")
    site = f" from {alert['site']}" if alert.get("site") else ""
    headline = f"{icon} [{event['status'].upper()}] {alert['name']} ({alert['severity']}) on {alert['target']}{site}"
    return {
        "text": _slack_escape(f"{headline}: {alert['summary']}"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": _slack_escape(headline)}},
            {"type": "section", "text": {"type": "mrkdwn", "text": _slack_escape(alert["summary"])}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": _slack_escape(
                f"suite {alert['suite']} · probe {alert['probe']} · run {alert.get('run_id') or '-'}")}]},
        ],
    }


_LABEL_NAME = re.compile(r"[^A-Za-z0-9_]")


def alertmanager_alert(event: dict[str, Any], hold: dt.timedelta, now: dt.datetime) -> dict[str, Any]:
    """One alert as Alertmanager's API v2 wants it. Firing: endsAt `hold` ahead (each run that
    finds it still firing renews it); resolved: endsAt when it resolved, which closes it."""
    alert = event["alert"]
    labels = {"alertname": alert["name"], "severity": alert["severity"], "target": alert["target"],
              "suite": alert["suite"], "probe": alert["probe"], "metric": alert["metric"],
              "kind": alert["kind"], "job": "prober"}
    if alert.get("site"):   # Alertmanager groups by labels: two sites' alerts must not merge into one
        labels["site"] = alert["site"]
    for key, value in (alert.get("labels") or {}).items():
        labels.setdefault(_LABEL_NAME.sub("_", str(key)), str(value))
    ends = alert.get("resolved_at") if event["status"] in CLOSING_STATUSES else (now + hold).isoformat()
    return {
        "labels": labels,
        "annotations": {"summary": alert["summary"], "description": alert.get("description") or alert["summary"]},
        "startsAt": alert.get("fired_at") or now.isoformat(),
        "endsAt": ends,
    }


class _HttpSink:
    kind = ""

    def __init__(self, config: SinkConfig, url: str) -> None:
        self.name = config.name
        self.url = url
        self.timeout = config.timeout

    def _post(self, url: str, body: bytes, headers: dict[str, str]) -> None:
        status, text = asyncio.run(post(url, body, {"content-type": "application/json", **headers}, self.timeout))
        if not 200 <= status < 300:
            raise DeliveryError(f"HTTP {status}: {text[:200]}")


class WebhookSink(_HttpSink):
    kind = "webhook"

    def __init__(self, config: SinkConfig, url: str, secret: bytes) -> None:
        super().__init__(config, url)
        self._secret = secret

    def send(self, event: dict[str, Any]) -> None:
        body = json.dumps(webhook_body(event), sort_keys=True).encode()
        timestamp = str(int(time.time()))
        self._post(self.url, body, {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(self._secret, timestamp, body),
                                    EVENT_HEADER: str(event["event_id"])})


class SlackSink(_HttpSink):
    kind = "slack"

    def send(self, event: dict[str, Any]) -> None:
        self._post(self.url, json.dumps(slack_body(event)).encode(), {})


class AlertmanagerSink(_HttpSink):
    kind = "alertmanager"

    def __init__(self, config: SinkConfig, url: str) -> None:
        super().__init__(config, url)
        self.hold = dt.timedelta(hours=config.hold_hours)

    def send(self, event: dict[str, Any]) -> None:
        self.post_alerts([event])

    def post_alerts(self, events: list[dict[str, Any]]) -> None:
        now = dt.datetime.now(dt.UTC)
        body = json.dumps([alertmanager_alert(e, self.hold, now) for e in events]).encode()
        self._post(self.url.rstrip("/") + "/api/v2/alerts", body, {})


async def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    """POST and read the whole answer: (status, body text). DeliveryError if no answer came."""
    try:
        origin, path = split_url(url)
    except ValueError as exc:
        raise DeliveryError(str(exc)) from None
    query = url.split("?", 1)[1] if "?" in url else ""
    transport = HTTPTransport(origin, max_connections=1,
                              timeouts=Timeouts(connect=timeout, read=timeout, total=timeout))
    try:
        response = await transport.send(build_head("POST", (path or "/") + (f"?{query}" if query else ""),
                                                   origin, headers), body)
        try:
            text = (await response.read(64 * 1024)).decode("utf-8", "replace")
        finally:
            await response.aclose()
        return response.status, text
    except TransportError as exc:
        raise DeliveryError(f"{exc.kind}: {exc}") from None
    finally:
        await transport.aclose()


def make_sink(config: SinkConfig, source: str) -> Sink:
    """A sink ready to send; ConfigError (exit 2) if its URL or secret variable is unset."""
    url = config.resolved_url(source)
    if config.kind == "webhook":
        secret = config.secret(source)
        assert secret is not None   # SinkConfig requires secret_env for webhooks
        return WebhookSink(config, url, secret)
    if config.kind == "slack":
        return SlackSink(config, url)
    return AlertmanagerSink(config, url)
