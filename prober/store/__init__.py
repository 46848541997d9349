"""The store: the only code that speaks SQL (docs/architecture.md). SQLite by default, PostgreSQL by URL.

    store = Store.open("sqlite:///prober.db")      # creates or upgrades the schema
    writer = store.sample_writer()                   # background, batched, durable within 1 s

Modules: engine (URL -> engine, SQLite locking, write retries), errors (the store's error types, which
every Store method raises instead of SQLAlchemy's), coltypes (UTC datetimes, JSON),
schema (current tables), migrations (versioned upgrades), rows (records -> rows), writer (the
sample writer thread), accepts (baseline accepts), store (the Store API).
"""

from prober.store.errors import StoreError, StoreNotADatabase, StoreReadOnly
from prober.store.migrations import MIGRATIONS, migrate, schema_version
from prober.store.store import Store
from prober.store.writer import SampleWriteError, SampleWriter

__all__ = ["MIGRATIONS", "SampleWriteError", "SampleWriter", "Store", "StoreError", "StoreNotADatabase",
           "StoreReadOnly", "migrate", "schema_version"]
