import pytest

from prober.core.errors import ConfigError
from prober.suites.loader import available_suites, load_suite

pytestmark = pytest.mark.unit


def test_nightly_includes_every_other_builtin_suite():
    builtin = set(available_suites([])) - {"nightly"}
    assert "latency" in builtin
    nightly = load_suite("nightly", [])
    assert {e.suite for e in nightly.entries} == builtin
    for name in builtin:
        load_suite(name, [])   # each one loads on its own too


def test_user_suite_shadows_builtin_and_includes(tmp_path):
    (tmp_path / "latency.toml").write_text('[[probes]]\nprobe = "latency"\n[probes.params]\nlevels = [1, 3]\n')
    (tmp_path / "mine.toml").write_text('include = ["latency"]\n')
    suite = load_suite("mine", [str(tmp_path)])
    assert suite.entries[0].params.levels == [1, 3]


def test_overrides_apply_to_probes_that_accept_them(tmp_path):
    suite = load_suite("latency", [], overrides={"levels": [2, 1]})
    assert suite.entries[0].params.levels == [1, 2]


def test_an_override_no_probe_accepts_is_an_error_listing_the_accepted_keys():
    with pytest.raises(ConfigError) as info:
        load_suite("latency", [], overrides={"levels": [2], "nosuch": 1})
    message = str(info.value)
    assert message.startswith("command line: --param nosuch: ")
    assert "levels" in message and "requests_per_level" in message


def test_probe_dot_key_aims_an_override_at_one_probe_of_a_composite_suite():
    plain = {e.probe.name: e.params for e in load_suite("nightly", []).entries}
    aimed = {e.probe.name: e.params for e in load_suite("nightly", [], overrides={"latency.levels": [1, 4]}).entries}
    assert aimed["latency"].levels == [1, 4] != plain["latency"].levels
    # divergence also has `levels`-like concurrency settings; nothing but latency changed
    assert {name: p for name, p in aimed.items() if name != "latency"} == \
        {name: p for name, p in plain.items() if name != "latency"}
    # PROBE.KEY wins over a bare KEY given alongside
    both = load_suite("latency", [], overrides={"levels": [2], "latency.levels": [3]})
    assert both.entries[0].params.levels == [3]


@pytest.mark.parametrize("overrides,fragment", [
    ({"nosuch.levels": [1]}, "command line: --param nosuch.levels: suite nightly has no probe 'nosuch'"),
    ({"latency.nosuch": 1}, "command line: --param latency.nosuch: probe latency has no parameter 'nosuch'"),
    ({"latency.levels": [0]}, "command line: --param latency.levels: "),
    ({"nosuch": 1}, "command line: --param nosuch: no probe of suite nightly accepts"),
])
def test_override_errors_name_the_command_line_not_the_suite_file(overrides, fragment):
    with pytest.raises(ConfigError) as info:
        load_suite("nightly", [], overrides=overrides)
    assert fragment in str(info.value)
    assert ".toml" not in str(info.value)


@pytest.mark.parametrize("text,fragment", [
    ('include = ["nowhere"]\n', "unknown suite 'nowhere'"),
    ('include = ["bad"]\n', "cycle"),
    ('[[probes]]\nprobe = "nosuch"\n', "probes[0].probe: unknown probe 'nosuch'"),
    ('[[probes]]\nprobe = "latency"\n[probes.params]\nlevles = [1]\n', "probes[0].params.levles: unknown key"),
    ('[[probes]]\nprobe = "latency"\n[probes.params]\nlevels = [0]\n', "probes[0].params.levels"),
    ('descripton = "x"\n', "descripton: unknown key"),
    ('probes = [\n', "TOML syntax error"),
])
def test_suite_errors_name_file_and_key(tmp_path, text, fragment):
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_suite("bad", [str(tmp_path)])
    assert fragment in str(info.value)
    assert "bad.toml" in str(info.value) or "unknown suite" in str(info.value)
