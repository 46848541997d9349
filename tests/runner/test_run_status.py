"""The run's final status, exit code, problems and per-target status (prober/run/run_status.py), for
every combination of how the run stopped and how its targets ended."""

from __future__ import annotations

import itertools

import pytest

from prober.run.run_status import EXIT_INCOMPLETE, EXIT_OK, INTERRUPTED, RunStop, reconcile

pytestmark = pytest.mark.unit

CRASH = "internal error: KeyError: 'x'"
STORAGE = "samples could not be stored: 3 sample(s) could not be stored: database or disk is full"
# How each of three targets can end: ran to completion, failed with its reason, or never ran.
ENDINGS = {"complete": ("complete", None), "failed": ("failed", "budget exhausted: 10 requests"), "never": None}


def _ended(endings: tuple[str, ...]) -> dict[str, tuple[str, str | None]]:
    return {f"t{i}": ENDINGS[how] for i, how in enumerate(endings) if ENDINGS[how] is not None}


@pytest.mark.parametrize("interrupted, crash, storage", list(itertools.product([False, True], [None, CRASH],
                                                                                [None, STORAGE])))
@pytest.mark.parametrize("endings", list(itertools.product(ENDINGS, repeat=3)))
def test_every_stop_with_every_target_ending(interrupted, crash, storage, endings):
    targets = ["t0", "t1", "t2"]
    ended = _ended(endings)
    stop = RunStop(interrupted=interrupted, crash=crash, storage=storage)
    decided = reconcile(targets, ended, stop)

    stop_problems = [p for p in (INTERRUPTED if interrupted else None, crash, storage) if p]
    failed = [f"target t{i}: budget exhausted: 10 requests" for i, how in enumerate(endings) if how == "failed"]
    assert decided.problems == stop_problems + failed
    if crash or storage:
        expected_status = "failed"
    elif interrupted:
        expected_status = "interrupted"
    else:
        expected_status = "failed" if failed else "complete"
    assert decided.status == expected_status
    assert decided.exit_code == (EXIT_INCOMPLETE if stop_problems or failed else EXIT_OK)
    assert list(decided.targets) == targets          # every target, in run order
    stopped_by = stop_problems[0] if stop_problems else None
    for i, how in enumerate(endings):
        name = f"t{i}"
        if how == "failed":                          # a failed target keeps its own reason
            assert decided.targets[name] == ENDINGS["failed"]
        elif stopped_by is not None or how == "never":
            # a stopped run completed no target; one that never ran takes the run's status
            assert decided.targets[name] == (expected_status, stopped_by)
        else:
            assert decided.targets[name] == ("complete", None)
    assert stop.summarizes is (not stop_problems)
    assert decided.problems is not stop.problems     # the stop's own list is not extended
    assert stop.problems == stop_problems


def test_what_stopped_the_run_first_is_the_reason_its_targets_get():
    decided = reconcile(["a", "b"], {"a": ("complete", None)}, RunStop(interrupted=True, storage=STORAGE))
    assert decided.status == "failed"                # storage lost: a signal does not hide that
    assert decided.targets == {"a": ("failed", INTERRUPTED), "b": ("failed", INTERRUPTED)}
    assert decided.problems == [INTERRUPTED, STORAGE] and decided.exit_code == EXIT_INCOMPLETE


def test_a_clean_run_of_completed_targets_is_complete_with_exit_0():
    decided = reconcile(["a", "b"], {"a": ("complete", None), "b": ("complete", None)}, RunStop())
    assert (decided.status, decided.exit_code, decided.problems) == ("complete", EXIT_OK, [])
    assert RunStop().status is None and RunStop().summarizes
