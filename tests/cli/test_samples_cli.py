"""`prober samples`: a run's requests with their timings, usage, findings and output, filtered by
target, labels and errors; an endpoint's text escaped, the configured secrets masked, in the
terminal and in JSON lines."""

import json

import pytest

from prober.core.records import Exchange, Sample
from prober.store import Store
from tests.support.cli import prober
from tests.support.history import T0, add_run

pytestmark = pytest.mark.unit

SECRET = "sk-test-0123456789abcdefghij"
HOSTILE = f"fine\x1b]0;pwned\x07\x1b[2J [bold]markup[/bold] echoed key {SECRET}"


def _sample(index: int, concurrency: int, *, error: bool = False, text: str = "hello") -> Sample:
    start = 1_000_000_000
    exchange = Exchange(protocol="openai", url="http://127.0.0.1:9/v1/chat/completions", request_body={},
                        request_headers={"authorization": "***"}, started_at=T0, start_ns=start,
                        status=500 if error else 200, text="" if error else text,
                        finish_reason=None if error else "stop",
                        usage=None if error else {"prompt_tokens": 12, "completion_tokens": 3,
                                                  "prompt_tokens_details": {"cached_tokens": 0}},
                        headers_ns=start + 2_000_000, first_token_ns=None if error else start + 50_000_000,
                        end_ns=start + 80_000_000, error_type="server_error" if error else None,
                        error_message=f"HTTP 500: {HOSTILE}" if error else None,
                        findings=["usage.total_tokens missing"] if index == 0 else [])
    return Sample(run_id="r1", target="emu", probe="latency", case="sweep", exchange=exchange, request_index=index,
                  labels={"concurrency": concurrency, "phase": "measure"}, entry="latency.latency")


@pytest.fixture
def setup(tmp_path):
    url = f"sqlite:///{tmp_path}/p.db"
    with Store.open(url) as store:
        add_run(store, "r1", 0, [])
        with store.sample_writer() as writer:
            writer.submit(_sample(0, 1, text=HOSTILE))
            writer.submit(_sample(1, 4))
            writer.submit(_sample(2, 4, error=True))
    config = tmp_path / "prober.toml"
    config.write_text(f'[store]\nurl = "{url}"\n\n[targets.emu]\nprotocol = "openai"\n'
                      'base_url = "http://127.0.0.1:9"\nmodel = "m"\napi_key_env = "SAMPLES_TEST_KEY"\n')
    return tmp_path, config


def _samples(setup, *args):
    tmp_path, config = setup
    done = prober("samples", "r1", "--config", str(config), *args, cwd=tmp_path, env={"SAMPLES_TEST_KEY": SECRET})
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    return done


def test_requests_are_shown_with_timings_usage_findings_and_escaped_output(setup):
    shown = _samples(setup).stdout
    assert [line.split(" ")[0] for line in shown.splitlines() if line.startswith("#")] == ["#0", "#1", "#2"]
    assert "\x1b" not in shown and "\\x1b]0;pwned\\x07" in shown
    assert "[bold]markup[/bold]" in shown          # shown as text, not applied
    assert "echoed key ***" in shown
    assert "ttft 50 ms" in shown and "end 80 ms" in shown
    assert "prompt_tokens 12, completion_tokens 3, prompt_tokens_details.cached_tokens 0" in shown
    assert "findings: usage.total_tokens missing" in shown
    assert "error: server_error: HTTP 500:" in shown and "usage: not reported" in shown


def test_label_and_error_filters(setup):
    by_label = _samples(setup, "--label", "concurrency=4").stdout
    assert [line.split(" ")[0] for line in by_label.splitlines() if line.startswith("#")] == ["#1", "#2"]
    errors = _samples(setup, "--errors").stdout
    assert [line.split(" ")[0] for line in errors.splitlines() if line.startswith("#")] == ["#2"]
    nothing = _samples(setup, "--label", "concurrency=64")
    assert nothing.stdout == "" and "no samples in run r1 match (labels concurrency=64)" in nothing.stderr


def test_json_lines_carry_whole_rows_with_secrets_masked(setup):
    lines = _samples(setup, "--json").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert [row["request_index"] for row in rows] == [0, 1, 2]
    assert rows[0]["output_text"] == HOSTILE.replace(SECRET, "***")
    assert rows[0]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert "\x1b" not in "".join(lines)       # JSON writes it as \u001b
    assert rows[2]["error_type"] == "server_error" and rows[2]["ttft_ms"] is None


@pytest.mark.parametrize(("args", "fragment"), [(["--target", "other"], "--target 'other': run r1 did not run it"),
                                                (["--label", "concurrency"], "expected KEY=VALUE")])
def test_bad_filters_are_one_line_and_exit_2(setup, args, fragment):
    tmp_path, config = setup
    done = prober("samples", "r1", "--config", str(config), *args, cwd=tmp_path)
    assert done.returncode == 2 and fragment in done.stderr and "Traceback" not in done.stderr, done.stderr
    missing = prober("samples", "nosuch", "--config", str(config), cwd=tmp_path)
    assert missing.returncode == 2 and "no run with id 'nosuch'" in missing.stderr
