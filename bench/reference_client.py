"""The reference: a plain-asyncio streaming client, as small as a correct one can be.

One connection per worker (`asyncio.open_connection`), kept alive across that worker's requests;
closed loop at concurrency c. TTFT runs from just before the request is written to the moment the
first chunk whose `delta.content` is non-empty has been read (the role-only chunk does not count).
Every event is JSON-decoded, as any real client must, and every response is read to its end.
Nothing of prober is imported here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from multiprocessing.connection import Connection
from time import perf_counter_ns

import machine
from gc_pauses import GcPauses
from sse_server import MODEL

_FILLER = " ".join(["lorem"] * 128)


def _request(host: str, port: int) -> bytes:
    body = json.dumps({"model": MODEL, "max_tokens": 64,
                       "messages": [{"role": "user", "content": f"[{secrets.token_hex(6)}] {_FILLER}"}],
                       "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}},
                      separators=(",", ":")).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
            b"accept: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
            % (host.encode(), port, len(body), body))


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes,
               sent_at: list[int] | None = None) -> float | None:
    """One request on an open connection: its TTFT in ms, or None if no content came. The time
    just before the request was written is appended to `sent_at` when given."""
    start = perf_counter_ns()
    if sent_at is not None:
        sent_at.append(start)
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected response: {head[:80]!r}")
    ttft_ns = None
    pending = b""
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")     # end of the (empty) trailer
            break
        chunk = (await reader.readexactly(size + 2))[:-2]
        arrived = perf_counter_ns()
        pending += chunk
        while (end := pending.find(b"\n\n")) >= 0:
            event, pending = pending[:end], pending[end + 2:]
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            data = json.loads(event[6:])
            if ttft_ns is None and data["choices"] and data["choices"][0]["delta"].get("content"):
                ttft_ns = arrived - start
    return None if ttft_ns is None else ttft_ns / 1e6


async def run_level(host: str, port: int, concurrency: int, count: int) -> dict:
    ttfts: list[float] = []
    errors: list[str] = []
    counter = itertools.count()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while next(counter) < count:
                try:
                    ttft = await _one(reader, writer, _request(host, port))
                except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    continue
                if ttft is None:
                    errors.append("no content chunk")
                else:
                    ttfts.append(ttft)
        finally:
            writer.close()

    cpu0 = time.process_time()
    t0 = perf_counter_ns()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
    wall = (perf_counter_ns() - t0) / 1e9
    return {"ttft_ms": ttfts, "errors": errors, "wall_s": wall, "cpu_s": time.process_time() - cpu0}


async def run_open_loop(host: str, port: int, offsets_s: list[float]) -> dict:
    """Request i is written at the start + offsets_s[i] whether or not earlier ones finished, on an
    idle kept-alive connection (the most recently used) or a new one. Send lag: the time just
    before the request was written minus when it was due."""
    ttfts: list[float] = []
    errors: list[str] = []
    lags_ms: list[float] = []
    sent: list[int] = []
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def one(due_ns: int) -> None:
        reader, writer = idle.pop() if idle else await asyncio.open_connection(host, port)
        sent_at: list[int] = []
        try:
            ttft = await _one(reader, writer, _request(host, port), sent_at)
        except (OSError, asyncio.IncompleteReadError, RuntimeError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            writer.close()
            return
        finally:
            if sent_at:
                sent.append(sent_at[0])
                lags_ms.append((sent_at[0] - due_ns) / 1e6)
        idle.append((reader, writer))
        if ttft is None:
            errors.append("no content chunk")
        else:
            ttfts.append(ttft)

    cpu0 = time.process_time()
    t0 = perf_counter_ns()
    tasks = []
    for offset in offsets_s:
        due_ns = t0 + round(offset * 1e9)
        if (wait_ns := due_ns - perf_counter_ns()) > 0:
            await asyncio.sleep(wait_ns / 1e9)
        tasks.append(asyncio.create_task(one(due_ns)))
    await asyncio.gather(*tasks)
    wall = (perf_counter_ns() - t0) / 1e9
    for _, writer in idle:
        writer.close()
    return {"ttft_ms": ttfts, "errors": errors, "wall_s": wall, "cpu_s": time.process_time() - cpu0,
            "send_lag_ms": lags_ms, "sent_ns": sorted(sent)}


def client_process(control: Connection, host: str, port: int) -> None:
    """Process entry: run each {"concurrency", "count"} command received, send the results back."""
    machine.raise_fd_limit()
    pauses = GcPauses()
    control.send("ready")
    while True:
        try:
            command = control.recv()
        except EOFError:
            return
        if command == "stop":
            return
        pauses.take()
        if "offsets_s" in command:
            result = asyncio.run(run_open_loop(host, port, command["offsets_s"]))
        else:
            result = asyncio.run(run_level(host, port, command["concurrency"], command["count"]))
        control.send({**result, **pauses.take()})
