"""Run ids survive a CSV round trip: a random hex id such as "6157350e3333" is read back by pandas
as infinity, which once failed the export test in CI; `new_run_id` never hands one out."""

from __future__ import annotations

import io
import uuid

import pandas as pd
import pytest

from prober.core import records
from prober.core.records import new_run_id

pytestmark = pytest.mark.unit

NUMERIC_LOOKING = ["6157350e3333", "604213889517", "000000000012"]


def _read_back(ids: list[str]) -> list[object]:
    buffer = io.StringIO()
    pd.DataFrame({"run_id": ids}).to_csv(buffer, index=False)
    return pd.read_csv(io.StringIO(buffer.getvalue()))["run_id"].tolist()


def test_the_numeric_looking_ids_do_not_survive_csv():
    # The reference: pandas' own type inference turns every one of these into a number.
    assert all(not isinstance(value, str) for value in _read_back(NUMERIC_LOOKING))


def test_numeric_looking_draws_are_discarded(monkeypatch):
    plain = "a1b2c3d4e5f6"
    draws = iter([uuid.UUID(hex=(text + "0" * 32)[:32]) for text in [*NUMERIC_LOOKING, plain]])
    monkeypatch.setattr(records.uuid, "uuid4", lambda: next(draws))
    assert new_run_id() == plain
    assert next(draws, None) is None  # each numeric-looking draw was consumed and discarded


def test_generated_ids_read_back_as_the_same_text():
    ids = [new_run_id() for _ in range(3000)]
    assert all(len(run_id) == 12 and int(run_id, 16) >= 0 for run_id in ids)
    assert _read_back(ids) == ids
