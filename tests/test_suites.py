import pytest

from prober.errors import ConfigError
from suites.loader import available_suites, load_suite


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
    suite = load_suite("latency", [], overrides={"levels": [2, 1], "unrelated": 5})
    assert suite.entries[0].params.levels == [1, 2]


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
