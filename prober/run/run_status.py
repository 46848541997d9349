"""A run's final status from how it stopped and how each target ended. A pure function: the runner
(prober/run/runner.py) gathers the facts, this decides, and the tests try every combination.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EXIT_OK, EXIT_INCOMPLETE = 0, 3
INTERRUPTED = "interrupted by a signal"


@dataclass(frozen=True)
class RunStop:
    """What stopped the run before its targets were all sampled, if anything. `crash`: the problem
    line of an exception in prober (a bug, or a resource that could not start); `storage`: why the
    samples could not all be stored (a full disk, a store gone away)."""
    interrupted: bool = False
    crash: str | None = None
    storage: str | None = None

    @property
    def problems(self) -> list[str]:
        """The stop's problem lines, in the order they happen: a signal or a crash ends the sampling,
        and storage is found failing when the samples are flushed after it."""
        return [problem for problem in (INTERRUPTED if self.interrupted else None, self.crash, self.storage)
                if problem is not None]

    @property
    def status(self) -> str | None:
        """The run's status the stop decides: a crash or lost samples fail it, a signal alone
        interrupts it; None when nothing stopped it."""
        if self.crash is not None or self.storage is not None:
            return "failed"
        return "interrupted" if self.interrupted else None

    @property
    def summarizes(self) -> bool:
        """Whether the run's samples are summarized (and its targets judged): only when nothing stopped it."""
        return not self.problems


@dataclass(frozen=True)
class RunStatus:
    status: str
    exit_code: int
    problems: list[str]
    targets: dict[str, tuple[str, str | None]]   # per target, in run order: (status, reason)


def reconcile(targets: Sequence[str], ended: Mapping[str, tuple[str, str | None]], stop: RunStop) -> RunStatus:
    """The run's status, exit code, problems and per-target (status, reason).

    `ended`: the targets that ran to their end, "complete" or "failed" with its reason. A stopped run
    summarizes nothing, so none of its targets completed: those that failed keep their reason, the
    others take the run's status with what stopped it; a target that never ran takes the run's status.
    The run fails when any target failed, and exits 3 on any problem."""
    problems = stop.problems
    stopped_by = problems[0] if problems else None
    problems += [f"target {name}: {reason}" for name, (status, reason) in ended.items() if status == "failed"]
    status = stop.status or ("failed" if problems else "complete")
    final: dict[str, tuple[str, str | None]] = {}
    for name in targets:
        ended_as = ended.get(name)
        if ended_as is None or (stopped_by is not None and ended_as[0] != "failed"):
            final[name] = (status, stopped_by)
        else:
            final[name] = ended_as
    return RunStatus(status=status, exit_code=EXIT_INCOMPLETE if problems else EXIT_OK, problems=problems,
                     targets=final)
