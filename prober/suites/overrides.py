"""`prober run --param KEY=VALUE` and `--param PROBE.KEY=VALUE`: parameter values from the command line.

A bare KEY goes to every probe of the suite that accepts it; PROBE.KEY goes to that probe only and
wins over a bare KEY. A key that no probe of the suite accepts is an error before anything is sent:
a typo must not quietly run the full default grid against a paid API. Errors name the command
line, not the suite file, because that is where the mistake is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from prober.core.errors import ConfigError
from prober.probes.base import Probe


class ParamOverrides:
    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values = dict(values or {})
        self._used: set[str] = set()

    def for_probe(self, probe: Probe[Any]) -> dict[str, str]:
        """Field name -> the key as the user spelled it, for the values that apply to `probe`."""
        chosen: dict[str, str] = {}
        for key in self._values:
            probe_name, _, field = key.rpartition(".")
            if probe_name and probe_name != probe.name:
                continue
            if field not in probe.Params.model_fields:
                if probe_name:
                    raise ConfigError(f"command line: --param {key}: probe {probe.name} has no parameter "
                                      f"{field!r} (it accepts: {_accepted([probe])})")
                continue
            if probe_name or field not in chosen:   # PROBE.KEY wins over KEY
                chosen[field] = key
            self._used.add(key)
        return chosen

    def values(self, spelled: dict[str, str]) -> dict[str, Any]:
        return {field: self._values[key] for field, key in spelled.items()}

    def check_all_used(self, suite_name: str, probes: Iterable[Probe[Any]]) -> None:
        """ConfigError naming the first key no probe of the suite took, and the keys they accept."""
        probes = list({probe.name: probe for probe in probes}.values())
        for key in self._values:
            if key in self._used:
                continue
            probe_name, _, _ = key.rpartition(".")
            if probe_name:
                names = ", ".join(probe.name for probe in probes)
                raise ConfigError(f"command line: --param {key}: suite {suite_name} has no probe "
                                  f"{probe_name!r} (its probes: {names})")
            raise ConfigError(f"command line: --param {key}: no probe of suite {suite_name} accepts this "
                              f"parameter (they accept: {_accepted(probes)})")


def command_line_error(exc: ValidationError, spelled: dict[str, str]) -> ConfigError | None:
    """The first validation error caused by a command-line value, as one line naming it; None when
    every error is the suite file's."""
    for error in exc.errors():
        loc = error["loc"]
        if loc and loc[0] in spelled:
            inner = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:])
            return ConfigError(f"command line: --param {spelled[loc[0]]}{inner}: {error['msg']}")
    return None


def _accepted(probes: list[Probe[Any]]) -> str:
    if len(probes) == 1:
        return ", ".join(probes[0].Params.model_fields)
    return "; ".join(f"{probe.name}: {', '.join(probe.Params.model_fields)}" for probe in probes)
