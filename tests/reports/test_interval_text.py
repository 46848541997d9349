"""How a metric's interval reads in `prober show` and the reports when a flag is set."""

import pytest

from prober.reports.svg import interval_text

pytestmark = pytest.mark.unit


def test_only_an_unbounded_percentile_reads_unbounded():
    assert interval_text(None, None, ["interval_unbounded"]) == "unbounded"
    assert interval_text(None, None, ["client_limited", "interval_unbounded"]) == "unbounded"
    # A client_limited level's achieved rate has no interval to bound: it reads empty, not "unbounded".
    assert interval_text(None, None, ["client_limited"]) == ""
    assert interval_text(1.0, None, ["client_limited"]) == "1 .. unbounded"
