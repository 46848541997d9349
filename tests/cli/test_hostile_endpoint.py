"""Secrets and terminal safety against a hostile endpoint (tests/support/hostile.py), end to end
through the real CLI: a 401 body, an output, a response header and ids that echo the API keys and
a gateway key on the three protocols, as they are and encoded (base64, hex, case-changed), escape
sequences in the fingerprint, the model name, the output and the error message, and an output
that starts like a spreadsheet formula.

One run of the divergence suite against an OpenAI chat-completions, an OpenAI Responses and an
Anthropic target feeds every check:
the canaries must appear nowhere in the database file (raw bytes, WAL included), the reports,
the exports or any command's output, and no raw control character may reach `prober run` or
`prober show` output, the Markdown report or the Prometheus textfile.
"""

from __future__ import annotations

import base64
import csv
import json
import re
import secrets
import sqlite3
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from prober.store import Store
from tests.support.cli import prober
from tests.support.hostile import FORMULA, HostileServer

pytestmark = pytest.mark.emulator

# Random per test session, so that no fixed string anywhere in the tree can match by accident.
CANARIES = {
    "OPENAI_CANARY_KEY": f"sk-canary-openai-{secrets.token_hex(16)}",
    "ANTHROPIC_CANARY_KEY": f"sk-ant-canary-{secrets.token_hex(16)}",
    "APIM_CANARY_KEY": f"apim-canary-{secrets.token_hex(16)}",
}
# Raw terminal controls (newline and tab are layout, not commands).
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    # A connection kept open keeps SQLite from deleting the write-ahead log when prober's last
    # connection closes, so that the WAL's raw bytes are there to be searched too.
    Store.open(f"sqlite:///{tmp}/p.db").close()
    keeper = sqlite3.connect(tmp / "p.db")
    keeper.execute("SELECT count(*) FROM runs").fetchall()
    with HostileServer() as server:
        # (target, protocol, path, key): every protocol, each with the gateway key beside its own
        targets = [("oai", "openai", "/v1", "OPENAI_CANARY_KEY"),
                   ("resp", "openai-responses", "/v1", "OPENAI_CANARY_KEY"),
                   ("ant", "anthropic", "", "ANTHROPIC_CANARY_KEY")]
        (tmp / "prober.toml").write_text(textwrap.dedent(f"""
            [store]
            url = "sqlite:///{tmp}/p.db"
            [runner]
            progress = false
            error_rate_ceiling = 1.0
            max_retries = 0
        """) + "".join(f"""
[targets.{name}]
protocol = "{protocol}"
base_url = "{server.base_url}{path}"
model = "m"
api_key_env = "{key}"
headers_env = {{ "Ocp-Apim-Subscription-Key" = "APIM_CANARY_KEY" }}
""" for name, protocol, path, key in targets))
        cli = {}

        def run(name, *args):
            cli[name] = prober(*args, "--config", "prober.toml", cwd=tmp, env=CANARIES, timeout=300)
            return cli[name]

        done = run("run", "run", "--suite", "divergence", "--param", "levels=[1,2]",
                   "--param", "requests_per_level=4", "--param", 'prompts=["story"]')
        assert done.returncode in (0, 1), done.stdout + done.stderr
        received = list(server.received)
        sent = list(server.sent)
    with Store.open(f"sqlite:///{tmp}/p.db") as store:
        (summary,) = store.list_runs(limit=1)
        rows = store.samples(summary["id"])
    show = run("show", "show", summary["id"])
    assert show.returncode == 0, show.stderr
    for name, *flags in (("samples",), ("samples-json", "--json")):
        done = run(name, "samples", summary["id"], *flags)
        assert done.returncode == 0, done.stderr
    for fmt in ("html", "md", "json"):
        done = run(f"report-{fmt}", "report", "--format", fmt, "--out", "reports")
        assert done.returncode == 0, done.stderr
    for fmt in ("csv", "parquet", "prometheus"):
        done = run(f"export-{fmt}", "export", "--format", fmt, "--out", "export")
        assert done.returncode == 0, done.stderr
    yield tmp, cli, received, rows, sent
    keeper.close()


def _files(tmp: Path) -> list[Path]:
    return [p for p in sorted(tmp.rglob("*")) if p.is_file() and p.name != "prober.toml"]


def test_the_endpoint_really_received_and_echoed_the_canaries(hostile_run):
    _, _, received, rows, _ = hostile_run
    sent = " ".join(str(headers) for headers in received)
    assert all(canary in sent for canary in CANARIES.values())
    protocols = {"openai", "openai-responses", "anthropic"}
    assert {r["protocol"] for r in rows} == protocols
    refused = [r for r in rows if r["http_status"] == 401]
    answered = [r for r in rows if r["http_status"] == 200]
    assert {r["protocol"] for r in refused} == {r["protocol"] for r in answered} == protocols
    # The echoes are kept, with the secrets masked: the evidence stays readable.
    assert all("Incorrect API key provided:" in r["error_message"] and "***" in r["error_message"]
               for r in refused)
    assert all("You said:" in r["output_text"] and "***" in r["output_text"] for r in answered)


def test_no_canary_in_the_database_reports_exports_or_output(hostile_run):
    tmp, cli, _, _, _ = hostile_run
    files = _files(tmp)
    names = {p.name for p in files}
    assert {"p.db", "p.db-wal", "samples.csv", "samples.parquet", "metrics.csv", "prober.prom"} <= names
    assert {p.suffix for p in files} >= {".html", ".md", ".json"}
    for canary in CANARIES.values():
        # The random part alone: a prefix or suffix of the key left behind would show it too.
        for needle in (canary, canary[-32:-16], canary[-16:]):
            for path in files:   # p.db, and p.db-wal / -shm whenever SQLite left them
                assert needle.encode() not in path.read_bytes(), path
            for name, done in cli.items():
                assert needle not in done.stdout + done.stderr, name
            for path in tmp.rglob("*.parquet"):   # compressed pages: read the values back
                assert needle not in pd.read_parquet(path).to_csv(), path


def encoded_needles(canary: str) -> list[str]:
    """Text that betrays the canary in each encoding, computed here from base64 and hex alone: the
    inner characters of its base64 wherever it sits (the first and last group carry neighbouring
    bytes), its hex and case-changed spellings, and a piece of each."""
    raw = canary.encode()
    needles = []
    for offset in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            inner = encode(b"\0" * offset + raw).decode()[4:-4]
            needles += [inner, inner[8:24]]
    for spelled in (raw.hex(), raw.hex().upper(), canary.upper(), canary.swapcase()):
        needles += [spelled, spelled[-24:-8]]
    return needles


def test_no_encoded_canary_in_the_database_samples_or_exports(hostile_run):
    tmp, cli, _, rows, sent = hostile_run
    files = [p for p in _files(tmp) if p.suffix != ".parquet"]
    parquet = [pd.read_parquet(path).to_csv() for path in tmp.rglob("*.parquet")]
    samples = cli["samples"].stdout
    lines = [json.loads(line) for line in cli["samples-json"].stdout.splitlines() if line.strip()]
    assert len(lines) == len(rows) and samples.count("You said:") >= 2
    # Where the echoes were, masks are: outputs, error messages, the kept header and the ids.
    assert all(r["output_text"].count("***") >= 20 for r in rows if r["http_status"] == 200)
    # (an error message is kept to its first 500 characters: a few of the echoes fit)
    assert all(r["error_message"].count("***") >= 4 for r in rows if r["http_status"] == 401)
    assert all(r["response_headers"]["server"].count("***") >= 20 for r in rows)
    assert all(r["request_id"].count("***") >= 20 for r in rows)
    for canary in CANARIES.values():
        for needle in encoded_needles(canary):
            assert any(needle in text for text in sent), needle       # the endpoint did echo it
            for path in files:
                assert needle.encode() not in path.read_bytes(), (path, needle)
            for name, done in cli.items():
                assert needle not in done.stdout + done.stderr, (name, needle)
            assert not any(needle in table for table in parquet), needle


def test_credential_headers_are_never_stored_and_headers_env_is_sent(hostile_run):
    _, _, received, rows, _ = hostile_run
    assert all(h.get("ocp-apim-subscription-key") == CANARIES["APIM_CANARY_KEY"] for h in received)
    for row in rows:
        names = {name.lower() for name in row["request_headers"]}
        assert not names & {"authorization", "x-api-key", "ocp-apim-subscription-key"}, names
        assert "content-type" in names        # the other headers are kept
    # An echoing header value and an echoing response id are masked.
    assert all(r["request_id"].startswith(("req_", "msg_", "chatcmpl-", "resp_")) for r in rows)


def test_run_and_show_print_no_raw_control_characters(hostile_run):
    _, cli, _, _, _ = hostile_run
    for name in ("run", "show"):
        output = cli[name].stdout + cli[name].stderr
        assert not RAW_CONTROL.search(output), (name, RAW_CONTROL.findall(output))
    # The hostile fingerprint is shown, escaped, as the label of its own count.
    assert "fingerprint=fp_\\x1b]0;pwned\\x07\\x1b[2J" in cli["show"].stdout


def test_markdown_report_and_prometheus_textfile_hold_no_raw_control_characters(hostile_run):
    tmp, _, _, _, _ = hostile_run
    (markdown,) = (tmp / "reports").glob("*.md")
    text = markdown.read_text()
    assert not RAW_CONTROL.search(text), RAW_CONTROL.findall(text)
    assert "x1b]0;pwned" in text               # the hostile output is there, made visible
    prom = (tmp / "export" / "prober.prom").read_text()
    assert not RAW_CONTROL.search(prom), RAW_CONTROL.findall(prom)
    assert "fp_\\\\x1b]0;pwned\\\\x07" in prom
    # Every label value keeps to the exposition format's grammar: only \\, \" and \n are escapes.
    values = re.findall(r'="((?:[^"\\]|\\.)*)"', prom)
    assert values and all(re.fullmatch(r'(?:[^"\\\n]|\\[\\"n])*', v) for v in values)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def test_csv_cells_never_start_a_spreadsheet_formula(hostile_run):
    tmp, _, _, _, _ = hostile_run
    with open(tmp / "export" / "samples.csv", newline="") as handle:
        table = list(csv.DictReader(handle))
    outputs = [row["output_text"] for row in table if row["http_status"] == "200"]
    assert outputs and all(text.startswith("'" + FORMULA) for text in outputs)
    cells = [cell for row in table for cell in row.values() if cell and not _is_number(cell)]
    assert not [cell for cell in cells if cell[0] in "=+-@\t\r"]
    # Parquet is no spreadsheet's input: it keeps the text exactly as stored.
    parquet = pd.read_parquet(tmp / "export" / "samples.parquet")
    assert all(text.startswith(FORMULA) for text in parquet.loc[parquet["http_status"] == 200, "output_text"])
