"""Fault injection: which fault, if any, a request gets.

Each generation request draws one number from an RNG seeded by (scenario seed, request number),
so a scenario replays the same faults in the same places after a restart or a reset. The first
`fail_first_n` requests get `fail_first_kind` regardless, so a test can count retries.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from prober.emulator.plan import ErrorKind, FaultPlan, GenRequest, ResponsePlan
from prober.emulator.scenario import FAULT_KINDS, Scenario

if TYPE_CHECKING:
    from prober.emulator.behaviours import ServerState

# Faults answered at once with an error status, before the request takes a slot.
IMMEDIATE_ERRORS: dict[str, ErrorKind] = {
    "rate_limit": "rate_limit",
    "overloaded": "overloaded",
    "server_error": "server_error",
}
# The error reported inside the stream (after HTTP 200) by a mid_stream_error fault.
MID_STREAM_ERROR: ErrorKind = "overloaded"


class FaultInjection:
    def __init__(self, scenario: Scenario) -> None:
        self.faults = scenario.faults
        self.seed = scenario.seed
        self.any_rate = any(self.faults.rate(kind) > 0 for kind in FAULT_KINDS)

    def choose(self, seq: int) -> str | None:
        if seq < self.faults.fail_first_n:
            return self.faults.fail_first_kind
        if not self.any_rate:
            return None
        draw = random.Random(f"faults:{self.seed}:{seq}").random()
        threshold = 0.0
        for kind in FAULT_KINDS:
            threshold += self.faults.rate(kind)
            if draw < threshold:
                return kind
        return None

    def apply(self, request: GenRequest, plan: ResponsePlan, state: ServerState) -> None:
        kind = self.choose(state.seq)
        if kind is None:
            plan.fault = None
            return
        plan.fault = FaultPlan(
            kind=kind,
            after_tokens=self.faults.after_tokens,
            retry_after_s=self.faults.retry_after_s,
            stall_s=self.faults.stall_s,
            close_after_malformed=self.faults.malformed_then == "close",
        )
