"""Runs measure on uvloop where it is installed (the lock installs it), on asyncio's own loop when
$PROBER_EVENT_LOOP says so, and the loop a run measured on is stored with it."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from prober.core.errors import ConfigError
from prober.run import event_loop
from prober.store import Store
from tests.runner.test_run_lifecycle import SLOW, _write_config
from tests.support.cli import prober
from tests.support.emulated import emulator_process


def _run_latency(tmp_path, base_url, choice: str | None):
    config = _write_config(tmp_path, base_url)
    env = {key: value for key, value in os.environ.items() if key != event_loop.ENV}
    if choice is not None:
        env[event_loop.ENV] = choice
    return prober("run", "--suite", "latency", "--target", "emu", "--config", str(config),
                  "--param", "levels=[2]", "--param", "requests_per_level=4", "--param", "warmup=0",
                  cwd=tmp_path, env=env)


@pytest.mark.emulator
@pytest.mark.parametrize("choice,stored", [(None, "uvloop "), ("asyncio", "asyncio"), ("uvloop", "uvloop ")])
def test_a_run_stores_the_loop_it_measured_on(tmp_path, choice, stored):
    with emulator_process(tmp_path, SLOW) as base_url:
        result = _run_latency(tmp_path, base_url, choice)
    assert result.returncode == 0, result.stderr
    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        (run,) = store.list_runs()
        assert run["notes"]["event_loop"].startswith(stored)
        assert len(store.samples(run["id"])) == 4


@pytest.mark.emulator
def test_an_unknown_loop_is_one_line_and_exit_2_before_anything_is_stored(tmp_path):
    with emulator_process(tmp_path, SLOW) as base_url:
        result = _run_latency(tmp_path, base_url, "tokio")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: $PROBER_EVENT_LOOP is 'tokio': use one of uvloop, asyncio"
    with Store.open(f"sqlite:///{tmp_path}/p.db") as store:
        assert store.list_runs() == []


@pytest.mark.unit
def test_the_loop_run_uses_is_the_one_chosen(monkeypatch):
    async def kind():
        return event_loop.describe(asyncio.get_running_loop())

    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.run(kind()).startswith("uvloop ")
    assert event_loop.chosen() == event_loop.run(kind())
    monkeypatch.setenv(event_loop.ENV, " AsyncIO ")
    assert event_loop.run(kind()) == event_loop.chosen() == "asyncio"


@pytest.mark.unit
def test_without_uvloop_runs_fall_back_to_asyncio_unless_uvloop_was_asked_for(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvloop", None)      # import uvloop now raises ImportError
    monkeypatch.delenv(event_loop.ENV, raising=False)
    assert event_loop.chosen() == "asyncio"
    monkeypatch.setenv(event_loop.ENV, "uvloop")
    with pytest.raises(ConfigError, match="uvloop, which is not installed"):
        event_loop.chosen()


@pytest.mark.unit
def test_a_bad_choice_closes_the_coroutine_it_was_given(monkeypatch):
    async def main():
        return 1

    monkeypatch.setenv(event_loop.ENV, "tokio")
    coroutine = main()
    with pytest.raises(ConfigError):
        event_loop.run(coroutine)
    assert coroutine.cr_frame is None          # closed: no "never awaited" warning later
