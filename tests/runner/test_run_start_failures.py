"""A failure while a run starts one of its resources (the room for its final write, the lease, its
targets' rows, the loop-lag monitor, the sample-writer process), or while it summarizes, ends the run
stored `failed` with the reason, not `running` until its lease expires; and what did start is stopped."""

from __future__ import annotations

import threading

import pytest

import prober.run.run_resources as run_resources
from prober.core.config import ProberConfig
from prober.run.lease import RunLease
from prober.run.looplag import LoopLagMonitor
from prober.run.runner import Runner
from prober.store import Store

pytestmark = pytest.mark.emulator


class InjectedFailure(RuntimeError):
    pass


def _fail(step: str):
    def failing(*args: object, **kwargs: object) -> None:
        raise InjectedFailure(f"{step} refused")
    return failing


# Each start step, in the order RunResources.start takes them, and how to make it fail.
STEPS = {
    "reserve room": lambda mp: mp.setattr(Store, "reserve_room_for_final_write", _fail("reserve room")),
    "lease": lambda mp: mp.setattr(RunLease, "start", _fail("lease")),
    "start_target": lambda mp: mp.setattr(Store, "start_target", _fail("start_target")),
    "lag monitor": lambda mp: mp.setattr(LoopLagMonitor, "start", _fail("lag monitor")),
    "writer process": lambda mp: mp.setattr(run_resources, "SampleWriterProcess", _fail("writer process")),
}


def _config(tmp_path) -> ProberConfig:
    return ProberConfig.model_validate({
        "store": {"url": f"sqlite:///{tmp_path}/p.db"}, "runner": {"progress": False},
        "targets": {"emu": {"protocol": "openai", "model": "emulator-1", "emulator": {}}}})


def _run_failing(config: ProberConfig, monkeypatch, step: str) -> dict:
    """Run a tiny latency suite with `step` failing; the stored run."""
    with pytest.raises(InjectedFailure, match=f"{step} refused"):
        Runner(config).run("latency", ["emu"], {"levels": [1], "requests_per_level": 2, "warmup": 0})
    monkeypatch.undo()
    with Store.open(config.store.url) as store:
        (listed,) = store.list_runs()
        return store.get_run(listed["id"])


@pytest.mark.parametrize("step", list(STEPS))
def test_a_start_step_that_fails_leaves_the_run_failed_with_the_reason(tmp_path, monkeypatch, step):
    STEPS[step](monkeypatch)
    run = _run_failing(_config(tmp_path), monkeypatch, step)
    reason = f"could not start: InjectedFailure: {step} refused"
    assert run["status"] == "failed"
    assert run["finished_at"] is not None
    assert run["notes"]["problems"] == [reason]
    if list(STEPS).index(step) <= list(STEPS).index("start_target"):
        assert run["target_status"] == {}            # its row was never written: nothing says `running`
    else:
        emu = run["target_status"]["emu"]
        assert (emu["status"], emu["reason"]) == ("failed", reason)
    assert run["sample_count"] == 0
    # What started before the failing step was stopped: no lease thread renews a finished run.
    assert not [t for t in threading.enumerate() if t.name == "prober-run-lease"]


def test_a_run_whose_metrics_cannot_be_written_is_failed_with_its_samples_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(Store, "write_metrics", _fail("write_metrics"))
    run = _run_failing(_config(tmp_path), monkeypatch, "write_metrics")
    reason = "internal error: InjectedFailure: write_metrics refused"
    assert (run["status"], run["notes"]["problems"]) == ("failed", [reason])
    emu = run["target_status"]["emu"]
    assert (emu["status"], emu["reason"]) == ("failed", reason)   # summarizing failed: nothing completed
    assert run["sample_count"] == 2
    assert not [t for t in threading.enumerate() if t.name == "prober-run-lease"]
