"""`prober run --dry-run`: the requests, tokens and cost a run would send, per target, with nothing
sent (this is the unit tier: the CLI child process may open no socket) and nothing written."""

from __future__ import annotations

import re
import time

import pytest

from prober.commands.dry_run import plan_run, request_input_tokens
from prober.core.config import ProberConfig
from prober.core.records import ChatRequest
from tests.support.cli import prober

pytestmark = pytest.mark.unit

CONFIG = """
[store]
url = "sqlite:///{db}"

[targets.paid]
protocol = "openai"
base_url = "https://api.example.com"
model = "m"
api_key_env = "PROBER_TEST_UNSET_KEY"
pricing = {{ input_usd_per_mtok = 3.0, output_usd_per_mtok = 15.0 }}

[targets.free]
protocol = "anthropic"
model = "emulator-1"
emulator = {{}}
"""


def _config(**targets) -> ProberConfig:
    return ProberConfig.model_validate({"targets": targets})


def _tokens(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text))


def test_latency_requests_and_output_tokens_follow_the_grid() -> None:
    config = _config(t={"protocol": "openai", "base_url": "https://api.example.com", "model": "m"})
    overrides = {"levels": [1, 2, 4], "requests_per_level": 5, "warmup": 2, "max_tokens": 7}
    _, (row,) = plan_run(config, "latency", None, overrides)
    # Each level sends its warm-up and then its measured requests.
    assert row.requests == 3 * (5 + 2)
    assert row.output_tokens_max == row.requests * 7
    assert row.input_tokens > 0


def test_input_tokens_count_system_messages_tools_and_schema() -> None:
    bare = ChatRequest(messages=[{"role": "user", "content": "one two three"}])
    assert request_input_tokens(bare) == 3
    fuller = ChatRequest(messages=[{"role": "user", "content": [{"type": "text", "text": "one two three"}]}],
                         system="four five", tools=[{"name": "t"}], json_schema={"name": "s"})
    assert request_input_tokens(fuller) == 3 + 2 + _tokens('[{"name": "t"}]') + _tokens('{"name": "s"}')


def test_waits_in_a_probe_take_no_time() -> None:
    config = _config(t={"protocol": "anthropic", "model": "claude-sonnet-4-5", "emulator": {}})
    began = time.perf_counter()
    _, (row,) = plan_run(config, "caching", None, {"cases": ["ttl"], "ttl_wait_s": 3600, "requests": 3})
    # The ttl case waits an hour between its writer and its readers: on the virtual clock, at once
    # (60 s is a bound no machine needs, and 60 times less than the wait).
    assert time.perf_counter() - began < 60
    assert row.requests >= 2


def test_cli_prints_requests_tokens_and_cost_and_sends_and_writes_nothing(tmp_path) -> None:
    db = tmp_path / "p.db"
    config = tmp_path / "prober.toml"
    config.write_text(CONFIG.format(db=db))
    result = prober("run", "--suite", "latency", "--config", str(config), "--dry-run", "--param", "levels=[1,2]",
                    "--param", "requests_per_level=10", "--param", "warmup=0", "--param", "max_tokens=100",
                    cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(tmp_path.iterdir()) == [config]          # no store, no report, nothing
    out = result.stdout
    assert "suite latency against paid" in out and "suite latency against free" in out
    # 20 requests of at most 100 output tokens each; the cost is input x $3/M + output x $15/M.
    total = next(line for line in out.splitlines() if line.startswith("│ total") and "$" in line)
    cells = [c.strip() for c in total.strip("│ ").split("│")]
    requests, input_tokens, output_tokens = (int(c.replace(",", "")) for c in cells[2:5])
    assert (requests, output_tokens) == (20, 2000)
    assert cells[5] == f"${(input_tokens * 3.0 + output_tokens * 15.0) / 1e6:,.2f}"
    assert "free: no cost" in out and "paid: no cost" not in out


def test_cli_dry_run_of_an_unknown_suite_is_a_usage_error(tmp_path) -> None:
    result = prober("run", "--suite", "nope", "--dry-run", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []
