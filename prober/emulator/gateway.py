"""What a gateway in front of the model does to a request before the model sees it (the scenario's
`[gateway]` table).

`volatile_system_prompt`: the gateway writes the time at the start of the system prompt, as a
template with `{now}` in its first line does. No two requests then share a prefix past the tool
definitions, so the prompt cache never hits, although every request still marks its breakpoints
and the usage still reports writes: the caching suite's hit rate falls to zero and its cost
multiplier rises above one, which is what the suite exists to catch.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from prober.emulator.plan import GenRequest, PromptBlock


def stamped_system_prompt(request: GenRequest, wall_ns: int) -> GenRequest:
    """`request` with "Now: <UTC time to the microsecond>" opening its system prompt (a system
    block of its own after the tools when it has none)."""
    now = dt.datetime.fromtimestamp(wall_ns / 1e9, dt.UTC).isoformat(timespec="microseconds")
    stamp = f"Now: {now}"
    blocks = list(request.blocks)
    first = next((i for i, block in enumerate(blocks) if block.section == "system"), None)
    if first is None:
        blocks.insert(sum(1 for block in blocks if block.section == "tools"), PromptBlock("system", stamp))
    else:
        blocks[first] = dataclasses.replace(blocks[first], text=f"{stamp}\n{blocks[first].text}")
    return dataclasses.replace(request, blocks=blocks)
