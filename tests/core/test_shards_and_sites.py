"""Where a run probes from (its site) and which slice of the targets a shard runs: pure rules."""

from __future__ import annotations

import random

import pytest

from prober.core.config import ProberConfig, load_config
from prober.core.errors import ConfigError
from prober.core.shards import parse_shard, shard_targets

pytestmark = pytest.mark.unit

NAMES = [f"target-{i:02d}" for i in range(23)]


@pytest.mark.parametrize("count", [1, 2, 4, 5, 23, 30])
def test_shards_cover_every_target_exactly_once_whatever_the_config_order(count):
    slices = [shard_targets(NAMES, index, count) for index in range(count)]
    assert sorted(name for part in slices for name in part) == sorted(NAMES)
    assert max(map(len, slices)) - min(map(len, slices)) <= 1          # dealt: within one of each other
    shuffled = random.Random(count).sample(NAMES, len(NAMES))
    assert [shard_targets(shuffled, index, count) for index in range(count)] == slices


def test_a_shard_is_dealt_from_the_sorted_names():
    assert shard_targets(["c", "a", "d", "b", "e"], 0, 2) == ["a", "c", "e"]
    assert shard_targets(["c", "a", "d", "b", "e"], 1, 2) == ["b", "d"]


@pytest.mark.parametrize("text, expected", [("0/4", (0, 4)), ("3/4", (3, 4)), (" 1 / 2 ", (1, 2)), ("0/1", (0, 1))])
def test_shard_text_is_a_0_based_index_over_a_count(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["4/4", "1/0", "0/0", "-1/4", "1", "a/b", "1/2/3", "", "1.0/2", "2/"])
def test_a_bad_shard_is_a_config_error_saying_what_is_expected(text):
    with pytest.raises(ConfigError, match=r"--shard .*expected I/N with 0 <= I < N"):
        parse_shard(text)


def test_the_site_is_the_environment_then_the_file_then_the_host(monkeypatch):
    monkeypatch.delenv("PROBER_SITE", raising=False)
    assert ProberConfig().run_site("probe-3.fra.example.net") == "probe-3"
    configured = ProberConfig.model_validate({"site": "fra"})
    assert configured.run_site("probe-3.fra.example.net") == "fra"
    monkeypatch.setenv("PROBER_SITE", "iad-2")
    assert configured.run_site("probe-3.fra.example.net") == "iad-2"      # one config file, many sites


def test_a_bad_site_names_where_it_came_from(monkeypatch, tmp_path):
    monkeypatch.setenv("PROBER_SITE", "fra/../x")
    with pytest.raises(ConfigError, match=r"environment variable PROBER_SITE: 'fra/\.\./x' is not a usable name"):
        ProberConfig().run_site("host")
    path = tmp_path / "prober.toml"
    path.write_text('site = "<b>fra"\n')
    with pytest.raises(ConfigError, match=r"prober.toml.*site"):
        load_config(path)
