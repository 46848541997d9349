"""Suite files: which probes run, with which parameters. Suites may include other suites.

A suite is looked up by name in the user's suite paths first, then among the built-in files next
to this module. Every error names the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from prober.core.errors import ConfigError
from prober.core.probe_registry import get_probe
from prober.core.tomlfile import read_toml, validation_error
from prober.probes.base import Probe, ProbeParams
from prober.probes.calibration import CalibrationParams
from prober.suites.overrides import ParamOverrides, command_line_error

BUILTIN_DIR = Path(__file__).parent
_SUITE_KEYS = {"description", "include", "probes", "calibrate"}
_ENTRY_KEYS = {"probe", "params"}


@dataclass
class SuiteEntry:
    suite: str          # the suite file the entry came from
    probe: Probe[Any]
    params: ProbeParams
    # Stable across runs of the suite: "<suite file>.<probe>", with "#2", "#3"... for a probe's
    # later entries in the same file. Samples and metrics carry it, so that two entries of one
    # probe are never pooled, and baselines compare an entry with the same entry.
    id: str = ""


@dataclass
class Suite:
    name: str
    description: str
    path: Path
    entries: list[SuiteEntry]
    # The suite file's `calibrate` table: `prober run` first measures the client's own overhead
    # with these parameters (prober/probes/calibration.py); None: no calibration.
    calibrate: CalibrationParams | None = None


def search_dirs(user_paths: list[str]) -> list[Path]:
    return [Path(p).expanduser() for p in user_paths] + [BUILTIN_DIR]


def available_suites(user_paths: list[str]) -> dict[str, Path]:
    """Suite name -> file; a user's file shadows a built-in of the same name."""
    found: dict[str, Path] = {}
    for directory in reversed(search_dirs(user_paths)):
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                found[path.stem] = path
    return dict(sorted(found.items()))


def load_suite(name: str, user_paths: list[str], overrides: dict[str, Any] | None = None) -> Suite:
    """Resolve a suite and its includes into a flat list of (probe, validated params).

    `overrides` are `prober run --param` values: KEY for every entry whose probe accepts it,
    PROBE.KEY for that probe's entries only (suites.overrides); a key no entry takes is an error.
    """
    suites = available_suites(user_paths)
    entries: list[SuiteEntry] = []
    from_command_line = ParamOverrides(overrides)
    description = _resolve(name, suites, entries, stack=[], overrides=from_command_line)
    from_command_line.check_all_used(name, (entry.probe for entry in entries))
    return Suite(name=name, description=description, path=suites[name], entries=entries,
                 calibrate=_calibration(suites[name]))


def _calibration(path: Path) -> CalibrationParams | None:
    """The top-level suite file's `calibrate` table (an included suite's is not run)."""
    raw = read_toml(path).get("calibrate")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: calibrate: must be a table")
    try:
        return CalibrationParams.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(str(path), exc, prefix="calibrate.") from None


def _resolve(name: str, suites: dict[str, Path], entries: list[SuiteEntry], stack: list[str],
             overrides: ParamOverrides) -> str:
    if name not in suites:
        known = ", ".join(suites) or "none"
        where = f"{suites[stack[-1]]}: include: " if stack else ""
        raise ConfigError(f"{where}unknown suite {name!r} (available: {known})")
    if name in stack:
        raise ConfigError(f"{suites[name]}: include: cycle {' -> '.join(stack + [name])}")
    path = suites[name]
    data = read_toml(path)
    unknown = set(data) - _SUITE_KEYS
    if unknown:
        raise ConfigError(f"{path}: {sorted(unknown)[0]}: unknown key")
    includes = data.get("include", [])
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise ConfigError(f"{path}: include: must be a list of suite names")
    for included in includes:
        _resolve(included, suites, entries, stack + [name], overrides)
    probes = data.get("probes", [])
    if not isinstance(probes, list):
        raise ConfigError(f"{path}: probes: must be an array of tables ([[probes]])")
    for index, raw in enumerate(probes):
        where = f"{path}: probes[{index}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be a table")
        unknown = set(raw) - _ENTRY_KEYS
        if unknown:
            raise ConfigError(f"{where}.{sorted(unknown)[0]}: unknown key")
        try:
            probe = get_probe(str(raw.get("probe")))
        except KeyError as exc:
            raise ConfigError(f"{where}.probe: {exc.args[0]}") from None
        params_raw = dict(raw.get("params", {}))
        spelled = overrides.for_probe(probe)
        params_raw.update(overrides.values(spelled))
        # Parameters naming files resolve relative paths against the suite file (see the context users).
        context = {"suite_dir": path.parent, "from_command_line": set(spelled)}
        try:
            params = probe.Params.model_validate(params_raw, context=context)
        except ValidationError as exc:
            raise (command_line_error(exc, spelled)
                   or validation_error(str(path), exc, prefix=f"probes[{index}].params.")) from None
        entry_id = f"{name}.{probe.name}"
        repeats = sum(1 for e in entries if e.id == entry_id or e.id.startswith(f"{entry_id}#"))
        entries.append(SuiteEntry(suite=name, probe=probe, params=params,
                                  id=entry_id if repeats == 0 else f"{entry_id}#{repeats + 1}"))
    return str(data.get("description", ""))
