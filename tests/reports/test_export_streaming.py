"""`prober export --format csv|parquet` streams: a window holding ten times the samples is
written at the same peak memory (within 20%), and the file holds every row of the window.

The peak is the exporting process's own resident maximum (bench/history_scale.py's `measure`
runs it as the only child of a fresh process). A non-streaming export of the larger window holds
some 25,000 sample rows as objects at once, more than the interpreter and pyarrow weigh together.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

from prober.store import Store
from tests.support.history import nightly_template_store

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import history_scale as bench

END = dt.datetime.now(dt.UTC)
TARGETS, SMALL_NIGHTS, LARGE_NIGHTS = 4, 2, 20
SAME_MEMORY = 1.20


def _export(tmp_path: Path, fmt: str, nights: int) -> dict[str, float]:
    config = tmp_path / "prober.toml"
    out = tmp_path / f"{fmt}-{nights}"
    found = bench.measure([sys.executable, "-m", "prober", "export", "--format", fmt, "--since", f"{nights}d",
                           "--out", str(out), "--config", str(config)], tmp_path)
    assert found["exit"] == 0, found["stderr"]
    return found


@pytest.mark.unit
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_ten_times_the_window_at_the_same_peak_memory(tmp_path: Path, fmt: str) -> None:
    import pyarrow.parquet as pq

    template_url = f"sqlite:///{tmp_path / 'template.db'}"
    nightly_template_store(template_url)
    template = bench.load_template(template_url)
    url = f"sqlite:///{tmp_path / 'history.db'}"
    bench.write_history(url, LARGE_NIGHTS, TARGETS, template, end=END)
    (tmp_path / "prober.toml").write_text(f'[store]\nurl = "{url}"\n')
    # a window ends a little after the newest run: --since Nd holds N nights
    small = _export(tmp_path, fmt, SMALL_NIGHTS)
    large = _export(tmp_path, fmt, LARGE_NIGHTS)
    assert large["rss_mb"] <= SAME_MEMORY * small["rss_mb"], (small["rss_mb"], large["rss_mb"])

    per_night = len(template.samples) * TARGETS
    path = tmp_path / f"{fmt}-{LARGE_NIGHTS}" / f"samples.{fmt}"
    if fmt == "parquet":
        assert pq.ParquetFile(path).metadata.num_rows == LARGE_NIGHTS * per_night
        assert pq.ParquetFile(path).metadata.num_row_groups > 1          # written a batch at a time
        small_rows = pq.ParquetFile(tmp_path / f"{fmt}-{SMALL_NIGHTS}" / "samples.parquet").metadata.num_rows
    else:
        with path.open(encoding="utf-8") as file:
            assert sum(1 for _ in file) - 1 == LARGE_NIGHTS * per_night
        with (tmp_path / f"{fmt}-{SMALL_NIGHTS}" / "samples.csv").open(encoding="utf-8") as file:
            small_rows = sum(1 for _ in file) - 1
    assert small_rows == SMALL_NIGHTS * per_night                         # ten times fewer samples
    with Store.open(url) as store:                                         # and every metric row too
        assert len(store.metric_history(since=END - dt.timedelta(days=LARGE_NIGHTS))) == \
            LARGE_NIGHTS * TARGETS * len(template.metrics)
