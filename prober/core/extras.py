"""Optional backends: PostgreSQL and Parquet come with pip extras, not with `pip install llm-prober`.

A command that needs a missing one stops with one line naming the extra (exit 2), not with an
ImportError from deep inside SQLAlchemy or the exporter.
"""

from __future__ import annotations

import importlib

from prober.core.errors import ConfigError


def require_extra(module: str, extra: str, needed_by: str) -> None:
    """Import `module` (so a broken install fails here too), or raise ConfigError naming the extra.

    needed_by is the sentence's subject and verb, e.g. "PostgreSQL stores need"."""
    try:
        importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{needed_by} the {extra} extra: pip install 'llm-prober[{extra}]'") from None
