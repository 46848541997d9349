"""The report store, built once for the report, site and dashboard tests (tests/support/report_store.py)."""

from __future__ import annotations

import pytest

from tests.support.report_store import build_report_store


@pytest.fixture(scope="session")
def report_store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    config, store = build_report_store(tmp)
    yield tmp, config, store
    store.close()
