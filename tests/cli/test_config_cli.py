"""Configuration errors: one clear line naming the file and key, exit code 2, no traceback."""

import pytest

from prober.core.config import default_config, load_config
from prober.core.errors import ConfigError
from tests.support.cli import assert_one_clear_line, prober

pytestmark = pytest.mark.unit

GOOD_TARGET = '[targets.a]\nprotocol = "openai"\nbase_url = "http://127.0.0.1:9"\nmodel = "m"\n'



def test_toml_syntax_error(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(GOOD_TARGET + "max_concurrency = \n")
    result = prober("run", "--suite", "latency", "--config", str(path), cwd=tmp_path)
    assert_one_clear_line(result, str(path), "TOML syntax error")


def test_unknown_key_is_named_with_its_path(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(GOOD_TARGET + "max_concurency = 4\n")
    result = prober("run", "--suite", "latency", "--config", str(path), cwd=tmp_path)
    assert_one_clear_line(result, str(path), "targets.a.max_concurency", "unknown key")


def test_missing_api_key_variable_is_named(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(GOOD_TARGET + 'api_key_env = "PROBER_TEST_KEY_THAT_IS_NOT_SET"\n')
    result = prober("run", "--suite", "latency", "--config", str(path), cwd=tmp_path,
                    env={"PROBER_TEST_KEY_THAT_IS_NOT_SET": ""})
    assert_one_clear_line(result, str(path), "targets.a.api_key_env", "PROBER_TEST_KEY_THAT_IS_NOT_SET")


def test_unknown_suite_and_target(tmp_path):
    result = prober("run", "--suite", "no-such-suite", "--target", "emulator", cwd=tmp_path)
    assert_one_clear_line(result, "unknown suite 'no-such-suite'", "latency")
    result = prober("run", "--suite", "latency", "--target", "nope", cwd=tmp_path)
    assert_one_clear_line(result, "unknown target 'nope'", "emulator", "local")


def test_bad_value_names_the_key(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(GOOD_TARGET.replace('"openai"', '"grpc"'))
    with pytest.raises(ConfigError, match=r"targets\.a\.protocol"):
        load_config(path)


def test_secrets_in_headers_are_refused(tmp_path):
    path = tmp_path / "prober.toml"
    path.write_text(GOOD_TARGET + 'headers = { Authorization = "Bearer sk-123" }\n')
    with pytest.raises(ConfigError, match="api_key_env") as info:
        load_config(path)
    assert "sk-123" not in str(info.value)


def test_defaults_without_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(None)
    assert set(config.targets) == {"local", "emulator", "emulator-openai", "local-responses", "emulator-responses"}
    assert config.targets["local"].base_url == "http://127.0.0.1:8080"
    assert config.targets["emulator"].is_emulator and config.targets["emulator"].protocol == "anthropic"
    assert config.targets["emulator-openai"].is_emulator and config.targets["emulator-openai"].protocol == "openai"
    assert config.targets["emulator-responses"].is_emulator
    responses = config.targets["emulator-responses"], config.targets["local-responses"]
    assert [target.protocol for target in responses] == ["openai-responses"] * 2
    assert config.targets["local-responses"].base_url == config.targets["local"].base_url
    assert config.store.url == "sqlite:///prober.db"
    assert default_config().hash() == config.hash()


def test_init_writes_a_valid_commented_example(tmp_path):
    result = prober("init", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = load_config(tmp_path / "prober.toml")
    # A default run (every target) needs no key and no server: only the emulator is active.
    assert set(config.targets) == {"emulator"} and config.targets["emulator"].is_emulator
    text = (tmp_path / "prober.toml").read_text()
    # The others are opt-in: each block, uncommented, is a valid target.
    for name, key in (("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY"), ("vllm", None),
                      ("local", None)):
        block = text[text.index(f"# [targets.{name}]"):].split("\n\n")[0]
        uncommented = tmp_path / f"{name}.toml"
        uncommented.write_text("\n".join(line.removeprefix("# ") for line in block.splitlines()) + "\n")
        assert load_config(uncommented).targets[name].api_key_env == key
    again = prober("init", cwd=tmp_path)
    assert_one_clear_line(again, "already exists")


def test_every_command_has_help_with_an_example(tmp_path):
    for command in (["run"], ["suites"], ["targets"], ["runs"], ["show"], ["init"], ["emulate"],
                    ["local", "start"], ["local", "stop"], ["local", "status"], ["local", "install"]):
        result = prober(*command, "--help", cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr)
        assert "Example: prober" in result.stdout, command
