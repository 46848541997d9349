"""Reading the project's TOML files (prober.toml, suites, emulator scenarios) with errors that name
the file and the key, so every one of them fails the same clear way."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from prober.core.errors import ConfigError


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    source = str(path)
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{source}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: TOML syntax error: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read: {exc}") from None


def validation_error(source: str, exc: ValidationError, prefix: str = "") -> ConfigError:
    """The first pydantic error as 'FILE: key.path: problem (and N more)'."""
    first = exc.errors()[0]
    key = prefix + ".".join(str(part) for part in first["loc"]) or "(top level)"
    problem = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return ConfigError(f"{source}: {key}: {problem}{more}")
