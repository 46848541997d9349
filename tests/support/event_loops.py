"""The `run_on` fixture: a test that takes it runs once on each event loop prober can run on."""

from __future__ import annotations

import pytest

from prober.run import event_loop


@pytest.fixture(params=event_loop.CHOICES)
def run_on(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """event_loop.run, with $PROBER_EVENT_LOOP set to one loop per parameter (asyncio, uvloop)."""
    monkeypatch.setenv(event_loop.ENV, request.param)
    return event_loop.run
