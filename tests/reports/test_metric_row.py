"""The Latest-metrics row (prober/reports/html.metric_row) and the collector pause around a report."""

from __future__ import annotations

import gc

import pytest

from prober.core.collector import collector_paused
from prober.reports.calibration import Overhead
from prober.reports.collect import LatestMetric, SloResult
from prober.reports.html import metric_row

pytestmark = pytest.mark.unit

HOSTILE = "<script>alert(1)</script>"


def test_metric_row_escapes_every_stored_value():
    metric = LatestMetric("latency", f"ttft{HOSTILE}", {"region": HOSTILE}, 900.0, 850.0, 950.0, 12, f"ms{HOSTILE}",
                          slo=[SloResult(f"rule{HOSTILE}", "<= 800", "page", True)], recent=[1.0, None, 900.0],
                          flags=[f"flag{HOSTILE}"], overhead=Overhead(120.0, f"cal{HOSTILE}"))
    row = str(metric_row(metric))
    assert "<script" not in row
    assert row.count("&lt;script&gt;") == 6                  # name, labels, flag, overhead run, unit, rule
    assert row.startswith('<tr><td>ttft&lt;script&gt;') and row.endswith("</td></tr>")
    assert '<td class="num flagged">900 <span title="flag&lt;script&gt;alert(1)&lt;/script&gt;: never judged">' in row
    assert "(client overhead 120 ms (client))" in row       # 120 ms is more than a tenth of 900
    assert '<span class="broken">rule&lt;script&gt;alert(1)&lt;/script&gt;: broken</span>' in row
    assert "<td>1 → - → 900</td>" in row
    assert '<td class="num">850 .. 950</td>' in row and '<td class="num">12</td>' in row


def test_metric_row_of_a_plain_metric_has_no_marks():
    row = str(metric_row(LatestMetric("schema", "valid_rate", {}, 0.5, None, None, None, None)))
    assert row == ('<tr><td>valid_rate</td><td></td><td class="num">0.5</td>\n<td class="num"></td>\n'
                   '<td class="num"></td><td></td>\n<td></td>\n<td></td></tr>')


def test_collector_paused_restores_the_collector_as_it_was():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()                           # a caller that disabled it keeps it disabled
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a failed report")
    assert gc.isenabled()
