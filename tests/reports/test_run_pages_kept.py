"""A run's page is drawn once: a later report keeps it while what it was drawn from holds, and
redraws only its part about now (the verdict table and the banner of firing alerts); it draws the
page again when the run, the SLO rules or the window's length changed."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from prober.alerting.verdicts import ReportVerdicts
from prober.core.config import SloRule
from prober.reports.collect import FiringAlert, collect, load_window
from prober.reports.site import NOW_END, NOW_START, write_site
from prober.store import Store
from tests.support.history import nightly_template_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import history_scale as bench

END = dt.datetime(2026, 6, 30, 12, tzinfo=dt.UTC)
KEPT = "<p>a mark only a kept page still has</p>"


def _site(store: Store, out: Path, verdicts: ReportVerdicts, since: dt.datetime | None = None,
          firing: list[FiringAlert] | None = None) -> dict[str, str]:
    window = load_window(store, since)
    report = collect(store, verdicts, since, window=window)
    if firing is not None:
        report.firing = firing
    write_site(store, verdicts, report, out, window)
    return {path.name: path.read_text() for path in sorted((out / "runs").glob("*.html"))}


def _mark(pages: Path) -> None:
    """Put KEPT into every run page, outside its part about now."""
    for path in pages.glob("*.html"):
        path.write_text(path.read_text().replace("<h1>", KEPT + "<h1>", 1))


@pytest.mark.unit
def test_run_pages_are_kept_and_only_their_part_about_now_redrawn(tmp_path: Path) -> None:
    template_url = f"sqlite:///{tmp_path / 'template.db'}"
    nightly_template_store(template_url, levels=(1,), requests_per_level=4)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    bench.write_history(url, 4, 1, bench.load_template(template_url), end=END, sites=1)
    out = tmp_path / "site"
    with Store.open(url) as store:
        quiet = ReportVerdicts([])
        first = _site(store, out, quiet)
        assert len(first) == 4 and all(NOW_START in page and NOW_END in page for page in first.values())
        # kept, with the part about now drawn again as it was: the same bytes
        assert _site(store, out, quiet) == first

        _mark(out / "runs")
        target = store.list_runs(limit=1, counts=False)[0]["targets"][0]
        alert = FiringAlert("ttft-slow", "slo", "critical", "ttft_p50_ms", {}, "ttft <b>slow</b>", END,
                            target=target, suite="nightly", anchor="", site="")
        kept = _site(store, out, quiet, firing=[alert])
        for name, page in kept.items():
            assert KEPT in page, name                              # not drawn again
            banner = page.split(NOW_START, 1)[1].split(NOW_END, 1)[0]
            assert "1 alert(s) firing now" in banner and "ttft &lt;b&gt;slow&lt;/b&gt;" in banner, name
            assert "<b>slow" not in page
        # the alert resolved: the banner goes, the kept page stays
        assert all(KEPT in page and "firing now" not in page for page in _site(store, out, quiet).values())

        # other SLO rules judge the metrics differently: every page is drawn again
        rule = SloRule(name="ttft-fast", metric="ttft_p50_ms", comparator="<=", threshold=1.0)
        redrawn = _site(store, out, ReportVerdicts([rule]))
        assert redrawn.keys() == first.keys() and not any(KEPT in page for page in redrawn.values())
        assert all("ttft-fast" in page for page in redrawn.values())

        # so does a window of another length
        _mark(out / "runs")
        week = _site(store, out, ReportVerdicts([rule]), since=END - dt.timedelta(days=7))
        assert week.keys() == first.keys() and not any(KEPT in page for page in week.values())
