"""Sites: a run's baseline, drift tests and alerts belong to its (target, site). A latency baseline
measured from a near site never judges a run from a far one, and an alert firing from one site is
neither resolved nor repeated by runs from another."""

from __future__ import annotations

import pytest

from prober.alerting.alerts import evaluate_run
from prober.alerting.baseline import select_baselines
from prober.alerting.drift import drift_for_run
from prober.core.config import ProberConfig
from prober.store import Store
from tests.support.history import add_run

pytestmark = pytest.mark.unit

NEAR, FAR = 100.0, 300.0     # the same endpoint's TTFT seen from two sites
WOBBLE = [1.00, 1.04, 0.97, 1.01, 0.99, 1.03, 0.98, 1.02, 1.0, 0.99]


def _night(store: Store, run_id: str, night: int, site: str, ttft_ms: float) -> dict:
    return add_run(store, run_id, night, [{"name": "ttft_p50_ms", "value": ttft_ms, "labels": {"concurrency": 4},
                                           "n": 24, "unit": "ms"}], site=site)


def _config(**slo) -> ProberConfig:
    return ProberConfig.model_validate({"drift": {"baseline_runs": 8, "min_baseline_runs": 7},
                                        "slo": [slo] if slo else []})


def test_a_baseline_takes_only_the_runs_of_its_own_site(tmp_path):
    config = _config()
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(9):                      # fra every night, iad every other night
            _night(store, f"fra{night}", 2 * night, "fra", NEAR * WOBBLE[night])
            if night % 2 == 0:
                _night(store, f"iad{night}", 2 * night + 1, "iad", FAR * WOBBLE[night])
        fra, iad = _night(store, "fra-tonight", 30, "fra", NEAR), _night(store, "iad-tonight", 31, "iad", FAR)
        baseline = select_baselines(store, fra, "emu", 8)["latency.latency"].runs
        assert [run["id"] for run in baseline] == [f"fra{night}" for night in range(8, 0, -1)]
        assert [run["id"] for run in select_baselines(store, iad, "emu", 8)["latency.latency"].runs] == \
            ["iad8", "iad6", "iad4", "iad2", "iad0"]
        # fra is judged against fra alone; iad's five runs are too few, whatever fra holds
        assert {t.baseline_runs for t in drift_for_run(store, fra, config.drift).tests if t.nights == 1} == {8}
        assert drift_for_run(store, iad, config.drift).not_tested == [
            "drift: emu latency.latency: 5 comparable baseline run(s), the night-level tests need 7: not tested"]
        evaluation = evaluate_run(store, config, "fra-tonight")
    assert evaluation.firing == [] and evaluation.checked > 0


def test_far_site_runs_are_not_drift_against_the_near_sites_baseline(tmp_path):
    """Both sites quiet: nothing fires, although iad's TTFT is three times fra's. A far-site
    figure among near-site nights would have paged (checked last: the same run from fra does)."""
    config = _config()
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        for night in range(9):
            _night(store, f"fra{night}", 2 * night, "fra", NEAR * WOBBLE[night])
            _night(store, f"iad{night}", 2 * night + 1, "iad", FAR * WOBBLE[night])
        _night(store, "iad-tonight", 30, "iad", FAR)
        quiet = evaluate_run(store, config, "iad-tonight")
        # fra slow two nights running (drift pages a regression that persists)
        _night(store, "fra-slow-1", 31, "fra", FAR)
        first = evaluate_run(store, config, "fra-slow-1")
        _night(store, "fra-slow", 32, "fra", FAR)
        slow = evaluate_run(store, config, "fra-slow")
    assert quiet.firing == [] and quiet.checked > 0
    assert first.fired_now == []
    assert [(row["metric"], row["detail"]["site"]) for row in slow.fired_now] == [("latency", "fra")]


def test_an_slo_alert_belongs_to_its_site(tmp_path):
    config = _config(name="ttft", metric="ttft_p50_ms", comparator="<=", threshold=200)
    with Store.open(f"sqlite:///{tmp_path / 'p.db'}") as store:
        _night(store, "iad0", 0, "iad", FAR)
        fired = evaluate_run(store, config, "iad0")
        _night(store, "fra0", 1, "fra", NEAR)                 # holds from fra: iad's alert is untouched
        held = evaluate_run(store, config, "fra0")
        _night(store, "iad1", 2, "iad", FAR)                  # still firing from iad: no second page
        again = evaluate_run(store, config, "iad1")
        firing = store.alerts(state="firing")
        events = store.alert_events()
    assert [row["detail"]["site"] for row in fired.fired_now] == ["iad"]
    assert held.resolved_now == [] and held.firing == []
    assert again.fired_now == [] and len(again.firing) == 1
    assert [(row["key"], row["detail"]["site"]) for row in firing] == [(fired.fired_now[0]["key"], "iad")]
    assert fired.fired_now[0]["key"].endswith("|site=iad")
    assert [(event["status"], event["payload"]["alert"]["site"]) for event in events] == [("firing", "iad")]
