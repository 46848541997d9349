"""`prober drill` against the emulator: healthy runs stay quiet, the regressed run fires, and the
alert arrives at a local webhook receiver (signed), a Slack-style receiver and a real Alertmanager."""

from __future__ import annotations

import textwrap

import pytest

from prober.alerting.sinks import verify
from tests.support.alertmanager import current_alerts, received_totals
from tests.support.cli import prober
from tests.support.receiver import Receiver

SECRET = "drill-secret-5d2a"


@pytest.mark.infra
@pytest.mark.timeout(300)
def test_drill_delivers_the_alert_to_every_configured_sink(tmp_path, alertmanager_url):
    with Receiver() as hook, Receiver() as slack:
        (tmp_path / "prober.toml").write_text(textwrap.dedent(f"""
            [[sinks]]
            kind = "webhook"
            url = "{hook.url}/prober"
            secret_env = "DRILL_TEST_SECRET"
            [[sinks]]
            kind = "slack"
            url_env = "DRILL_TEST_SLACK_URL"
            [[sinks]]
            kind = "alertmanager"
            url = "{alertmanager_url}"
        """))
        before = received_totals(alertmanager_url)
        done = prober("drill", "-c", "prober.toml", cwd=tmp_path,
                      env={"DRILL_TEST_SECRET": SECRET, "DRILL_TEST_SLACK_URL": slack.url}, timeout=280)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "drill run 5/5: REGRESSED" in output and "FIRING [critical] drill_ttft_p50" in output
    assert "every configured sink received its alerts" in output

    received = [r.json() for r in hook.requests]
    names = {body["alert"]["name"] for body in received}
    # TTFT's drift pages as the latency group's one alert, which names the families that moved
    assert "drill_ttft_p50" in names and "drift_latency" in names
    drift = next(body["alert"] for body in received if body["alert"]["name"] == "drift_latency")
    assert "ttft_ms" in drift["detail"]["families"] and "ttft_ms" in drift["summary"], drift
    assert all(verify(SECRET.encode(), r.headers["x-prober-timestamp"], r.body, r.headers["x-prober-signature"])
               for r in hook.requests)
    assert len(slack.requests) == len(hook.requests)
    assert any("drill_ttft_p50 (critical) on drill" in r.json()["text"] for r in slack.requests)

    # The drill resolves what it fired before it exits: each sink heard the firing, then the resolve,
    # and the real Alertmanager holds no active alert of the drill's target afterwards.
    statuses = [(body["alert"]["name"], body["status"]) for body in received]
    assert {name for name, status in statuses if status == "resolved"} == names
    assert all(statuses.index((name, "firing")) < statuses.index((name, "resolved")) for name in names)
    assert "in every sink; none stays active" in output
    active = [a for a in current_alerts(alertmanager_url)
              if a["labels"].get("target") == "drill" and a["status"]["state"] == "active"]
    assert active == [], active
    # ... which is not for want of alerts: Alertmanager itself counts each of them sent firing, then resolved.
    after = received_totals(alertmanager_url)
    assert after["firing"] - before["firing"] >= len(names), (before, after)
    assert after["resolved"] - before["resolved"] >= len(names), (before, after)


@pytest.mark.emulator
@pytest.mark.timeout(300)
def test_drill_without_sinks_shows_the_alert_it_would_send(tmp_path):
    done = prober("drill", "--healthy-runs", "3", cwd=tmp_path, timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no [[sinks]] configured" in done.stdout
    assert '"name": "drill_ttft_p50"' in done.stdout and '"status": "firing"' in done.stdout
    assert not list(tmp_path.iterdir())          # the drill's store was temporary


@pytest.mark.emulator
@pytest.mark.timeout(300)
def test_a_failed_delivery_says_the_drill_store_is_temporary(tmp_path):
    with Receiver() as hook:
        hook.status = 503
        (tmp_path / "prober.toml").write_text(textwrap.dedent(f"""
            [[sinks]]
            kind = "webhook"
            url = "{hook.url}/prober"
            secret_env = "DRILL_TEST_SECRET"
        """))
        done = prober("drill", "-c", "prober.toml", "--healthy-runs", "1", cwd=tmp_path,
                      env={"DRILL_TEST_SECRET": SECRET}, timeout=280)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "FAILED (HTTP 503" in output
    assert "the drill's store is temporary, so nothing retries it" in output
    assert "next run" not in output          # no promise the temporary store cannot keep
