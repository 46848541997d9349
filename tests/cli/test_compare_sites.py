"""`prober compare` and sites: a window never pools runs from two sites; `--site A --site B` with
one target compares what the two sites see of it."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from prober.commands.compare import compare_command
from prober.core.config import ProberConfig
from prober.core.errors import ConfigError
from prober.store import Store
from tests.support.history import add_run

pytestmark = pytest.mark.unit


@pytest.fixture
def config(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    with Store.open(url) as store:
        for night in range(4):    # started days after 2026-01-01: --since takes them all
            for site, ttft in (("fra", 100.0), ("iad", 300.0)):
                add_run(store, f"{site}{night}", night, [{"name": "ttft_p50_ms", "value": ttft + night,
                                                          "labels": {"concurrency": 4}, "n": 24, "unit": "ms"}],
                        site=site)
    return ProberConfig.model_validate({"store": {"url": url}})


def _compare(config: ProberConfig, **options):
    console = Console(file=io.StringIO(), width=200)
    defaults = {"runs": [], "targets": ["emu"], "since": "2025-12-01", "until": None, "suite": None,
                "fmt_name": "json", "out_path": None, "metrics": [], "sites": []}
    return compare_command(config, console, console, str, **{**defaults, **options})


def test_two_sites_of_one_target_are_two_sides(config):
    comparison = _compare(config, sites=["fra", "iad"])
    assert [run["id"] for run in comparison.a.runs] == ["fra3", "fra2", "fra1", "fra0"]
    assert [run["id"] for run in comparison.b.runs] == ["iad3", "iad2", "iad1", "iad0"]
    (ttft,) = [c for c in comparison.compared if c.name == "ttft_p50_ms"]
    assert (ttft.a, ttft.b) == (pytest.approx(101.5, rel=0.01), pytest.approx(301.5, rel=0.01))   # geometric means


def test_a_window_spanning_two_sites_asks_for_one(config):
    with pytest.raises(ConfigError, match="side A: target 'emu' has runs from sites fra, iad in this window; "
                                          "choose one with --site"):
        _compare(config, until="2026-01-03")
    comparison = _compare(config, until="2026-01-03", sites=["iad"])
    assert [run["id"] for run in comparison.a.runs] == ["iad1", "iad0"]
    assert [run["id"] for run in comparison.b.runs] == ["iad3", "iad2"]
