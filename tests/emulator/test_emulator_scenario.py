"""Scenario files: defaults, overrides, errors that name the file and the key, the example
scenarios, and the gateway's stamp."""

from __future__ import annotations

from pathlib import Path

import pytest

from prober.core.errors import ConfigError
from prober.emulator import Faults, Scenario, load_scenario
from prober.emulator.gateway import stamped_system_prompt
from prober.emulator.plan import GenRequest, PromptBlock
from tests.support.cli import prober

pytestmark = pytest.mark.unit


def test_defaults() -> None:
    scenario = load_scenario(None)
    assert scenario == Scenario()
    assert (scenario.first_token_delay_ms, scenario.prefill_ms_per_token, scenario.decode_tokens_per_s,
            scenario.output_tokens, scenario.slots) == (20, 0.02, 200, 64, 8)
    assert scenario.faults == Faults() and scenario.faults.fail_first_n == 0


def test_toml_file_sets_values(tmp_path) -> None:
    path = tmp_path / "busy.toml"
    path.write_text('first_token_delay_ms = 150\nslots = 2\nmodels = ["a", "b"]\nsystem_fingerprint = "fp_x"\n'
                    '[faults]\nrate_limit = 0.1\nretry_after_s = 3\nfail_first_n = 2\nfail_first_kind = "overloaded"\n')
    scenario = load_scenario(path)
    assert scenario.first_token_delay_ms == 150 and scenario.slots == 2 and scenario.models == ["a", "b"]
    assert scenario.faults.rate_limit == 0.1 and scenario.faults.retry_after_s == 3
    assert scenario.faults.fail_first_kind == "overloaded"
    assert scenario.decode_tokens_per_s == 200      # untouched keys keep their defaults


def test_code_overrides() -> None:
    scenario = Scenario(slots=4, first_token_delay_ms=100, faults={"stall": 0.5, "stall_s": 0.1})
    assert scenario.slots == 4 and scenario.faults.stall == 0.5


@pytest.mark.parametrize("text, key, problem", [
    ("slotz = 3\n", "slotz", "unknown key"),
    ("[faults]\nrate_limt = 0.1\n", "faults.rate_limt", "unknown key"),
    ("slots = 0\n", "slots", "greater than or equal to 1"),
    ("[faults]\nstall = 1.5\n", "faults.stall", "less than or equal to 1"),
    ("[faults]\nstall = 0.6\nrate_limit = 0.6\n", "faults", "more than 1"),
    ('[faults]\nfail_first_kind = "explode"\n', "faults.fail_first_kind", "Input should be"),
    ("decode_tokens_per_s = 0\n", "decode_tokens_per_s", "greater than 0"),
])
def test_errors_name_file_and_key(tmp_path, text, key, problem) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key}: ")
    assert problem in message


def test_syntax_error_and_missing_file_name_the_file(tmp_path) -> None:
    bad = tmp_path / "broken.toml"
    bad.write_text("slots = = 2\n")
    with pytest.raises(ConfigError, match=f"^{bad}: TOML syntax error"):
        load_scenario(bad)
    with pytest.raises(ConfigError, match="nope.toml: file not found"):
        load_scenario(tmp_path / "nope.toml")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_every_example_scenario_loads_and_has_its_paragraph() -> None:
    files = sorted(EXAMPLES.glob("*.toml"))
    assert len(files) >= 4
    readme = (EXAMPLES / "README.md").read_text()
    for path in files:
        load_scenario(path)
        assert f"**`{path.name}`**" in readme, path.name


def test_stamped_system_prompt_opens_the_system_prompt_or_adds_one() -> None:
    with_system = GenRequest("anthropic", "r", "m", True, 10, [
        PromptBlock("tools", "t"), PromptBlock("system", "be brief", cache_control={"type": "ephemeral"}),
        PromptBlock("messages", "hi", role="user")])
    stamped = stamped_system_prompt(with_system, 1_700_000_000_123_456_000)
    assert stamped.blocks[1].text == "Now: 2023-11-14T22:13:20.123456+00:00\nbe brief"
    assert stamped.blocks[1].cache_control == {"type": "ephemeral"}      # the breakpoint stays
    assert stamped.input_tokens > with_system.input_tokens
    without = GenRequest("openai", "r", "m", True, 10, [PromptBlock("tools", "t"),
                                                         PromptBlock("messages", "hi", role="user")])
    added = stamped_system_prompt(without, 0).blocks
    assert [b.section for b in added] == ["tools", "system", "messages"] and added[1].text.startswith("Now: 1970")


def test_drill_with_a_bad_scenario_is_a_usage_error(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("first_token_delay = 400\n")
    done = prober("drill", "--scenario", str(bad), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{bad}: first_token_delay: " in done.stderr
