"""`prober export --format prometheus --push URL` against a real Prometheus Pushgateway (Debian's
`prometheus-pushgateway`, started here on a free loopback port with its own storage): every
series of the textfile is scraped back from the gateway's /metrics, in the group job="prober",
instance=<the site>."""

from __future__ import annotations

import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from tests.support.cli import prober
from tests.support.llama import free_port
from tests.support.processes import listening_process

pytestmark = [pytest.mark.infra, pytest.mark.timeout(300)]

SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
SITE = "lab:east-1+b"      # characters a site may have that a URL path would otherwise have to escape


def _series(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and (match := SERIES.match(line)):
            found[(match.group(1), frozenset(LABEL.findall(match.group(2) or "")))] = float(match.group(3))
    return found


def _a_store_with_a_run(tmp_path: Path) -> str:
    db = f"sqlite:///{tmp_path}/p.db"
    run = prober("run", "--suite", "latency", "--target", "emulator", "--db", db, "--param", "levels=[1]",
                 "--param", "requests_per_level=3", "--param", "warmup=0", "--param", "max_tokens=8",
                 cwd=tmp_path, env={"PROBER_SITE": SITE})
    assert run.returncode == 0, run.stdout + run.stderr
    return db


def test_the_pushed_series_are_scraped_back_from_a_real_pushgateway(tmp_path):
    binary = shutil.which("prometheus-pushgateway")
    assert binary, "prometheus-pushgateway not found: apt-get install -y prometheus-pushgateway"
    db = _a_store_with_a_run(tmp_path)
    port = free_port()
    args = [binary, f"--web.listen-address=127.0.0.1:{port}", f"--persistence.file={tmp_path}/gateway.data"]
    with listening_process(args, port, "prometheus-pushgateway", timeout=30):
        export = prober("export", "--format", "prometheus", "--out", str(tmp_path / "out"), "--db", db,
                        "--push", f"http://127.0.0.1:{port}", cwd=tmp_path, env={"PROBER_SITE": SITE})
        assert export.returncode == 0, export.stdout + export.stderr
        assert f"pushed to http://127.0.0.1:{port} as job=prober instance={SITE}" in export.stderr
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            scraped = _series(reply.read().decode())
    exported = _series((tmp_path / "out" / "prober.prom").read_text())
    assert any(name.startswith("prober_latency") for name, _ in exported), sorted(exported)[:5]
    group = {("job", "prober"), ("instance", SITE)}
    missing = [(name, sorted(labels)) for (name, labels), value in exported.items()
               if scraped.get((name, labels | group)) != value]
    assert missing == [], f"{len(missing)} of {len(exported)} series not scraped back: {missing[:3]}"


def test_a_gateway_that_does_not_answer_is_one_error_line_and_the_textfile_stays(tmp_path):
    db = _a_store_with_a_run(tmp_path)
    port = free_port()          # nothing listens there
    export = prober("export", "--format", "prometheus", "--out", str(tmp_path / "out"), "--db", db,
                    "--push", f"http://127.0.0.1:{port}", cwd=tmp_path)
    assert export.returncode == 3, export.stdout + export.stderr
    errors = [line for line in export.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: --push http://127.0.0.1:{port}: "), export.stderr
    assert "Traceback" not in export.stderr
    assert (tmp_path / "out" / "prober.prom").read_text().startswith("#")


def test_push_needs_the_prometheus_format(tmp_path):
    export = prober("export", "--format", "csv", "--push", "http://127.0.0.1:9", cwd=tmp_path)
    assert (export.returncode, export.stderr.strip()) == (2, "error: --push: only with --format prometheus, not csv")
