"""Alert lifecycle: one event per state change, resolve, and the outbox: a sink that is down gets
its events, in order, on a later run, exactly once; the webhook secret is never stored."""

from __future__ import annotations

import socket

import pytest

from prober.alerting.alerts import advance, evaluate_run, make_sinks
from prober.alerting.sinks import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from prober.core.config import ProberConfig
from prober.store import Store
from tests.store.test_store_roundtrip import store_url  # noqa: F401  (SQLite and PostgreSQL)
from tests.support.history import add_run
from tests.support.receiver import Receiver

SECRET = "s3cr3t-for-the-alert-tests-7f1c"


def config_for(*sinks: dict) -> ProberConfig:
    return ProberConfig.model_validate({
        "slo": [{"name": "errors", "metric": "error_rate", "comparator": "<=", "threshold": 0.1,
                 "severity": "critical"}],
        "sinks": list(sinks), "drift": {"enabled": False}})


def night(store: Store, number: int, error_rate: float) -> str:
    return add_run(store, f"run{number}", number, [{"name": "error_rate", "value": error_rate, "n": 50,
                                                     "unit": "ratio", "labels": {"concurrency": 4}}])["id"]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The webhook and Slack receivers are sockets, so the SQLite case is not a unit test here.
@pytest.mark.parametrize("store_url", [pytest.param("sqlite", marks=pytest.mark.emulator),
                                       pytest.param("postgresql", marks=pytest.mark.infra)], indirect=True)
def test_one_event_per_state_change_and_a_delivery_row_per_sink(store_url, monkeypatch):
    monkeypatch.setenv("ALERT_TEST_SECRET", SECRET)
    with Receiver() as hook, Receiver() as slack, Store.open(store_url) as store:
        config = config_for({"kind": "webhook", "url": hook.url, "secret_env": "ALERT_TEST_SECRET"},
                            {"kind": "slack", "url": slack.url})
        outcomes = [evaluate_run(store, config, night(store, i, rate)) for i, rate in
                    enumerate([0.3, 0.4, 0.5, 0.0, 0.0, 0.2])]
        events = store.alert_events()
    assert [[r["state"] for r in o.firing] for o in outcomes] == [
        ["firing"], ["firing"], ["firing"], [], [], ["firing"]]
    assert [len(o.fired_now) for o in outcomes] == [1, 0, 0, 0, 0, 1]
    assert [len(o.resolved_now) for o in outcomes] == [0, 0, 0, 1, 0, 0]
    assert [(e["status"], e["run_id"]) for e in events] == [
        ("firing", "run0"), ("resolved", "run3"), ("firing", "run5")]
    assert all(set(e["deliveries"]) == {"webhook", "slack"} for e in events)
    assert all(d["delivered_at"] is not None and d["attempts"] == 1 for e in events for d in e["deliveries"].values())
    assert [r.json()["status"] for r in hook.requests] == ["firing", "resolved", "firing"]
    assert len(slack.requests) == 3
    resolved = hook.requests[1].json()["alert"]
    assert resolved["resolved_at"] is not None and resolved["value"] == 0.0


@pytest.mark.emulator
@pytest.mark.parametrize("outage", ["http_503", "connection_refused"])
def test_the_outbox_delivers_after_the_sink_comes_back_exactly_once_and_in_order(tmp_path, monkeypatch, outage):
    monkeypatch.setenv("ALERT_TEST_SECRET", SECRET)
    with Receiver() as hook, Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        down_url = hook.url if outage == "http_503" else f"http://127.0.0.1:{_closed_port()}"
        hook.status = 503
        down = config_for({"kind": "webhook", "url": down_url, "secret_env": "ALERT_TEST_SECRET"})
        first = evaluate_run(store, down, night(store, 0, 0.5))        # fires: sink down
        second = evaluate_run(store, down, night(store, 1, 0.0))       # resolves: sink still down
        assert [d.ok for d in first.deliveries] == [False]
        assert [d.ok for d in second.deliveries] == [False]            # stops at the oldest, keeps the order
        pending = store.pending_deliveries("webhook")
        assert [(p["status"], p["attempts"]) for p in pending] == [("firing", 2), ("resolved", 0)]
        assert pending[0]["last_error"]

        hook.status = 200
        up = config_for({"kind": "webhook", "url": hook.url, "secret_env": "ALERT_TEST_SECRET"})
        third = evaluate_run(store, up, night(store, 2, 0.0))          # nothing new: the outbox drains
        assert [(d.status, d.ok) for d in third.deliveries] == [("firing", True), ("resolved", True)]
        fourth = evaluate_run(store, up, night(store, 3, 0.0))
        assert fourth.deliveries == [] and store.pending_deliveries("webhook") == []
    assert [r.json()["status"] for r in hook.requests] == ["firing", "resolved"]          # exactly once each
    assert len({r.headers["x-prober-event"] for r in hook.requests}) == 2
    for request in hook.requests:
        assert request.headers[SIGNATURE_HEADER.lower()] == sign(SECRET.encode(), request.headers[
            TIMESTAMP_HEADER.lower()], request.body)


@pytest.mark.emulator
def test_the_secret_never_reaches_the_database(tmp_path, monkeypatch):
    monkeypatch.setenv("ALERT_TEST_SECRET", SECRET)
    path = tmp_path / "p.db"
    with Receiver() as hook, Store.open(f"sqlite:///{path}") as store:
        config = config_for({"kind": "webhook", "url": hook.url, "secret_env": "ALERT_TEST_SECRET"})
        evaluate_run(store, config, night(store, 0, 0.5))
        assert len(hook.requests) == 1
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert SECRET.encode() not in stored and b"ALERT_TEST_SECRET" not in stored
    assert SECRET not in config.model_dump_json()


@pytest.mark.unit
def test_an_unset_secret_or_url_variable_is_a_config_error(monkeypatch):
    from prober.core.errors import ConfigError

    monkeypatch.delenv("ALERT_TEST_SECRET", raising=False)
    with pytest.raises(ConfigError, match="sinks.webhook.secret_env: environment variable ALERT_TEST_SECRET"):
        make_sinks(config_for({"kind": "webhook", "url": "http://x", "secret_env": "ALERT_TEST_SECRET"}))
    with pytest.raises(ConfigError, match="sinks.slack.url_env: environment variable ALERT_TEST_SLACK"):
        make_sinks(config_for({"kind": "slack", "url_env": "ALERT_TEST_SLACK"}))


@pytest.mark.unit
def test_state_machine_pending_is_not_a_notification():
    from prober.alerting.alerts import Observation

    def obs(broken: bool) -> Observation:
        return Observation(key="k", kind="slo", name="r", severity="warning", target="t", suite="s", probe="p",
                           metric="m", labels={}, value=1.0, broken=broken, for_runs=2, summary="")

    import datetime as dt
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    row, event = advance(None, obs(True), "r1", now)
    assert (row["state"], row["breaks"], event) == ("pending", 1, None)
    row, event = advance(row, obs(False), "r2", now)
    assert (row["state"], row["breaks"], event) == ("ok", 0, None)            # pending never notified
    row, _ = advance(row, obs(True), "r3", now)
    row, event = advance(row, obs(True), "r4", now)
    assert (row["state"], event, row["fired_at"]) == ("firing", "firing", now)


@pytest.mark.infra
@pytest.mark.timeout(120)
def test_a_still_firing_alert_is_renewed_in_alertmanager_without_a_new_event(tmp_path, alertmanager_url):
    import datetime as dt

    from tests.support.alertmanager import current_alerts

    config = config_for({"kind": "alertmanager", "url": alertmanager_url, "hold_hours": 1})

    def ours() -> list[dict]:
        return [a for a in current_alerts(alertmanager_url) if a["labels"]["alertname"] == "errors"
                and a["labels"]["target"] == "emu" and a["labels"]["concurrency"] == "4"]

    def ends_at() -> dt.datetime:
        [shown] = ours()
        return dt.datetime.fromisoformat(shown["endsAt"].replace("Z", "+00:00"))

    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        evaluate_run(store, config, night(store, 0, 0.5))
        first = ends_at()
        again = evaluate_run(store, config, night(store, 1, 0.6))
        assert again.deliveries == [] and len(store.alert_events()) == 1     # no second notification
        assert ends_at() > first                                              # but Alertmanager holds it longer
        evaluate_run(store, config, night(store, 2, 0.0))
    assert ours() == []                                                       # resolved: closed


@pytest.mark.emulator
def test_two_stores_send_different_event_ids_for_their_first_event(tmp_path, monkeypatch):
    """A drill's store and production's both have an event 1; a receiver that drops duplicates by
    X-Prober-Event (as the README advises) must still get both."""
    monkeypatch.setenv("ALERT_TEST_SECRET", SECRET)
    with Receiver() as hook:
        config = config_for({"kind": "webhook", "url": hook.url, "secret_env": "ALERT_TEST_SECRET"})
        for name in ("production", "drill"):
            with Store.open(f"sqlite:///{tmp_path}/{name}.db") as store:
                evaluate_run(store, config, night(store, 0, 0.5))
                (event,) = store.alert_events()
                assert event["id"] == 1   # the row ids do collide
    headers = [r.headers["x-prober-event"] for r in hook.requests]
    bodies = [r.json()["event_id"] for r in hook.requests]
    assert len(headers) == 2 and headers[0] != headers[1] and bodies == headers
    assert all(h.endswith("-1") for h in headers)
    # The id is stable for a store: a retry of the same event carries the same header.
    with Store.open(f"sqlite:///{tmp_path}/production.db") as store:
        assert store.public_event_id(1) == headers[0]
