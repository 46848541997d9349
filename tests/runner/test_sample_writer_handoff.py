"""The sample writer takes an exchange's raw events with the sample: checked in the writer process,
dropped from the exchange the probe keeps (a loop keeps every exchange until it ends, and each
garbage collection during the loop walks what it keeps)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from prober.core.records import Exchange, Run, Sample
from prober.run.sample_writer import SampleWriterProcess
from prober.store import Store

pytestmark = pytest.mark.unit


def _chunk(content: object) -> str:
    return json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]})


def _sample(run_id: str, index: int, content: object) -> Sample:
    exchange = Exchange(protocol="openai", url="http://x/v1/chat/completions", request_body={"stream": True},
                        request_headers={}, started_at=dt.datetime.now(dt.UTC), start_ns=0, status=200,
                        response_headers={"content-type": "text/event-stream"},
                        raw_events=[(None, _chunk(content)), (None, "[DONE]")])
    return Sample(run_id=run_id, target="t", probe="p", case="c", labels={}, exchange=exchange,
                  request_index=index)


def _store_with_run(tmp_path: Path) -> tuple[str, Store, str]:
    url = f"sqlite:///{tmp_path / 'prober.db'}"
    store = Store.open(url)
    run_id = uuid.uuid4().hex[:12]
    store.create_run(Run(id=run_id, suite="s", started_at=dt.datetime.now(dt.UTC), prober_version="0",
                         config_hash="h", host="h", pid=1, targets=["t"]))
    return url, store, run_id


@pytest.mark.parametrize("conformance", [True, False])
def test_raw_events_leave_with_the_sample_and_are_still_checked(tmp_path, conformance):
    url, store, run_id = _store_with_run(tmp_path)
    writer = SampleWriterProcess(url, conformance=conformance)
    try:
        conforming, broken = _sample(run_id, 0, "hi"), _sample(run_id, 1, 42)   # content must be a string
        writer.put(conforming)
        writer.put(broken)
        assert conforming.exchange.raw_events == [] and broken.exchange.raw_events == []
        writer.flush()
    finally:
        writer.close()
    findings = {row["request_index"]: row["findings"] for row in store.samples(run_id)}
    store.close()
    assert findings[0] == []
    if conformance:
        assert any("content" in finding for finding in findings[1]), findings[1]
    else:
        assert findings[1] == []


def test_samples_put_on_an_event_loop_go_in_batches_and_all_arrive(tmp_path):
    """On a running loop, put queues its samples once per loop iteration; every sample put on one
    loop or on several, whether or not the loop ran again after the put, arrives by the flush."""
    url, store, run_id = _store_with_run(tmp_path)
    writer = SampleWriterProcess(url, conformance=False)

    async def put(indexes: range, settle: bool) -> None:
        for index in indexes:
            writer.put(_sample(run_id, index, "hi"))
        if settle:
            await asyncio.sleep(0)            # the loop's next iteration queues the batch

    try:
        asyncio.run(put(range(0, 40), settle=True))
        asyncio.run(put(range(40, 50), settle=False))
        asyncio.run(put(range(50, 60), settle=True))
        writer.flush()
    finally:
        writer.close()
    indexes = sorted(row["request_index"] for row in store.samples(run_id))
    store.close()
    assert indexes == list(range(60))
