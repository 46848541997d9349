"""Queries of `baseline_accepts`: the levels users accepted as a metric's new normal
(`prober baseline accept`), which bound the drift baseline of that metric from their time on."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa

from prober.core.records import utcnow
from prober.store.engine import write_transaction
from prober.store.schema import baseline_accepts


def add_accept(engine: sa.Engine, target: str, site: str, metric: str | None, since: dt.datetime) -> int:
    """Record an accept; returns its id."""
    def work(conn: sa.Connection) -> int:
        inserted = conn.execute(baseline_accepts.insert().values(
            target=target, site=site, metric=metric, since=since, accepted_at=utcnow())).inserted_primary_key
        assert inserted is not None                # an INSERT of one row has its key
        return int(inserted[0])

    return write_transaction(engine, work)


def revoke_accept(engine: sa.Engine, accept_id: int) -> bool:
    """Mark an accept revoked (it stays recorded); False when no such accept is in force."""
    def work(conn: sa.Connection) -> bool:
        done = conn.execute(baseline_accepts.update()
                            .where(baseline_accepts.c.id == accept_id, baseline_accepts.c.revoked_at.is_(None))
                            .values(revoked_at=utcnow()))
        return bool(done.rowcount)

    return write_transaction(engine, work)


def list_accepts(engine: sa.Engine, target: str | None = None, site: str | None = None,
                 in_force: bool = True) -> list[dict[str, Any]]:
    """Accepts, oldest first: of one target (and site) or all; only those not revoked unless
    `in_force` is False."""
    query = sa.select(baseline_accepts).order_by(baseline_accepts.c.id)
    if target is not None:
        query = query.where(baseline_accepts.c.target == target)
    if site is not None:
        query = query.where(baseline_accepts.c.site == site)
    if in_force:
        query = query.where(baseline_accepts.c.revoked_at.is_(None))
    with engine.connect() as conn:
        return [dict(row._mapping) for row in conn.execute(query)]
