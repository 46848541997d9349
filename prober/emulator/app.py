"""The emulator: routes, the life of a generation request, start/stop, and `serve`.

Endpoints:
    POST /v1/messages                 Anthropic Messages, streaming or not
    POST /v1/messages/count_tokens    {"input_tokens": N}, counted as generation counts
    POST /v1/chat/completions         OpenAI Chat Completions, streaming or not
    POST /v1/responses                OpenAI Responses, streaming or not
    GET  /v1/models                   the scenario's models (Anthropic shape if anthropic-version is sent)
    GET  /_emulator/ground_truth      one record per generation request (see ground_truth.py)
    POST /_emulator/reset             clear the ground truth and the prompt cache, restart request numbering
                                      (fault draws)
    GET  /_emulator/scenario          the scenario in force, as JSON
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import signal
from types import ModuleType
from typing import Any, cast

from prober.emulator import anthropic_wire, openai_wire, responses_wire
from prober.emulator.behaviours import Behaviour, Pipeline, ServerState, base_behaviours
from prober.emulator.engine import Player, PlayResult, Slots, content_due, stream_frames, unary_frames
from prober.emulator.faults import IMMEDIATE_ERRORS, MID_STREAM_ERROR
from prober.emulator.gateway import stamped_system_prompt
from prober.emulator.ground_truth import GroundTruth
from prober.emulator.plan import InvalidRequest, ResponsePlan
from prober.emulator.scenario import Scenario, load_scenario
from prober.emulator.server import (
    HttpError,
    HttpRequest,
    ReceiveStampingProtocol,
    full_response,
    read_request,
    start_server,
)

_JSON = [("content-type", "application/json")]
# The protocol each wire module speaks, as the ground truth records it.
_PROTOCOLS: dict[ModuleType, str] = {anthropic_wire: "anthropic", openai_wire: "openai",
                                     responses_wire: "openai-responses"}
_log = logging.getLogger(__name__)


class Emulator:
    def __init__(self, scenario: Scenario | None = None, behaviours: list[Behaviour] | None = None) -> None:
        self.scenario = scenario if scenario is not None else Scenario()
        self._pipeline = Pipeline(behaviours if behaviours is not None else base_behaviours(self.scenario))
        self._slots = Slots(self.scenario.slots)
        self._truth = GroundTruth()
        self._seq = 0             # generation requests since start or reset
        self._in_flight = 0       # generation requests queued or holding a slot
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self.host = ""
        self.port = 0
        # How many times faster than the scenario the response timeline runs (first-token delay,
        # prefill, decode), and how many tokens each streamed chunk carries. The runner raises them
        # for probes whose metrics do not measure timing (Probe.timing, prober/run/runner.py), so that
        # their suites finish in minutes (a chunk per token costs the client and the emulator a
        # loop turn each); what is answered does not change, nor the usage.
        self.pace = 1.0
        self.tokens_per_chunk = 1

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on host:port (0: any free port); returns the bound port."""
        self._server = await start_server(self._connection, host, port)
        self.host = host
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def ground_truth(self) -> list[dict[str, Any]]:
        return self._truth.records()

    def reset(self) -> None:
        self._truth.clear()
        self._seq = 0
        self._pipeline.reset()

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    # --- connections ----------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None                # asyncio.start_server runs each handler as a task
        self._connections.add(task)
        try:
            while True:
                try:
                    request = await read_request(reader)
                except HttpError as exc:
                    body = json.dumps({"error": {"type": "invalid_request_error", "message": str(exc)}}).encode()
                    writer.write(full_response(exc.status, _JSON, body, keep_alive=False))
                    break
                if request is None or not await self._dispatch(request, writer):
                    break
        except ConnectionError:
            pass
        except Exception:   # a bug here must not go unseen, nor take the server down
            _log.exception("emulator: connection handler failed")
        except asyncio.CancelledError:
            # Only stop() cancels a connection task. Ending it normally keeps Python 3.11's
            # start_server callback from logging the cancellation as an error.
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _dispatch(self, request: HttpRequest, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; returns whether the connection stays open."""
        route = (request.method, request.path.rstrip("/"))
        if route == ("POST", "/v1/messages"):
            return await self._generate(anthropic_wire, request, writer)
        if route == ("POST", "/v1/chat/completions"):
            return await self._generate(openai_wire, request, writer)
        if route == ("POST", "/v1/responses"):
            return await self._generate(responses_wire, request, writer)
        if route == ("POST", "/v1/messages/count_tokens"):
            request_id = anthropic_wire.new_request_id()
            try:
                body = anthropic_wire.count_tokens_response(request.body)
            except InvalidRequest as exc:
                return await self._send(writer, request, *anthropic_wire.error_response(
                    "invalid_request", request_id, str(exc)))
            return await self._send(writer, request, 200, [*_JSON, ("request-id", request_id)], body)
        if route == ("GET", "/v1/models"):
            wire = anthropic_wire if "anthropic-version" in request.headers else openai_wire
            return await self._send(writer, request, 200, _JSON, wire.models_response(self.scenario.models))
        if route == ("GET", "/_emulator/ground_truth"):
            return await self._send(writer, request, 200, _JSON, json.dumps(self.ground_truth()).encode())
        if route == ("POST", "/_emulator/reset"):
            self.reset()
            return await self._send(writer, request, 200, _JSON, b'{"reset":true}')
        if route == ("GET", "/_emulator/scenario"):
            return await self._send(writer, request, 200, _JSON, self.scenario.model_dump_json().encode())
        wire = anthropic_wire if request.path.startswith("/v1/messages") else openai_wire
        message = f"no route for {request.method} {request.path}"
        return await self._send(writer, request, *wire.error_response("not_found", wire.new_request_id(), message))

    async def _send(self, writer: asyncio.StreamWriter, request: HttpRequest, status: int,
                    headers: list[tuple[str, str]], body: bytes) -> bool:
        writer.write(full_response(status, headers, body, keep_alive=request.keep_alive))
        await writer.drain()
        return request.keep_alive

    # --- generation -----------------------------------------------------------------------------

    def _paced(self, plan: ResponsePlan) -> None:
        if self.pace != 1.0:
            plan.first_token_delay_s /= self.pace
            plan.prefill_s /= self.pace
            plan.token_interval_s /= self.pace
        if self.tokens_per_chunk > 1:
            k = self.tokens_per_chunk
            plan.tokens = ["".join(plan.tokens[i:i + k]) for i in range(0, len(plan.tokens), k)]
            plan.token_interval_s *= k

    async def _generate(self, wire: ModuleType, request: HttpRequest, writer: asyncio.StreamWriter) -> bool:
        loop = asyncio.get_running_loop()
        received = cast(ReceiveStampingProtocol, writer.transport.get_protocol())
        arrived = received.received_loop_time
        record = self._truth.arrived(wire.new_request_id(), _PROTOCOLS[wire],
                                     request.path, mono_ns=received.received_ns, wall_ns=received.received_wall_ns,
                                     in_flight=self._in_flight)
        try:
            gen = wire.parse_request(request.body, record.request_id)
        except InvalidRequest as exc:
            status, headers, body = wire.error_response("invalid_request", record.request_id, str(exc),
                                                        param=exc.param)
            record.status = status
            record.finished()
            return await self._send(writer, request, status, headers, body)
        if self.scenario.gateway.volatile_system_prompt:
            gen = stamped_system_prompt(gen, received.received_wall_ns)
        record.model, record.stream, record.input_tokens = gen.model, gen.stream, gen.input_tokens

        state = ServerState(seq=self._seq, in_flight=self._in_flight, active=self._slots.active,
                            queued=self._slots.queued)
        self._seq += 1
        plan = self._pipeline.plan(gen, state)
        self._paced(plan)
        record.output_tokens = plan.usage.output_tokens
        record.behaviours = plan.truth
        fault = plan.fault.kind if plan.fault else None
        record.fault = fault
        if fault in IMMEDIATE_ERRORS:
            retry_after = plan.fault.retry_after_s if plan.fault is not None and fault == "rate_limit" else None
            status, headers, body = wire.error_response(IMMEDIATE_ERRORS[fault], record.request_id,
                                                        retry_after_s=retry_after)
            record.status = status
            record.finished()
            plan.ended()
            return await self._send(writer, request, status, headers, body)

        def first_token_written() -> None:
            record.first_token_written()
            plan.first_token_written()

        encoder = wire.Encoder(gen, plan)
        record.status = encoder.error(MID_STREAM_ERROR)[0] if fault == "mid_stream_error" and not gen.stream else 200
        frames_for = stream_frames if gen.stream else unary_frames
        self._in_flight += 1
        try:
            start = await self._slots.acquire(arrived)
            result: PlayResult | None = None
            try:
                record.queue_wait_ms = (start - arrived) * 1000
                record.scheduled_ttft_ms = (content_due(plan, start, gen.stream) - arrived) * 1000
                frames = frames_for(plan, encoder, start, request.keep_alive)
                result = await Player(writer.transport, frames, first_token_written).play()
            finally:
                ended_normally = result is not None and not result.client_gone
                self._slots.release(result.last_at if result is not None and ended_normally else loop.time())
        finally:
            self._in_flight -= 1
            plan.ended()
        record.tokens_sent = result.tokens_sent
        record.client_disconnected = result.client_gone
        record.finished()
        return request.keep_alive and not result.closed


def serve(host: str = "127.0.0.1", port: int = 0, scenario_path: str | None = None) -> None:
    """Run the emulator until Ctrl-C or SIGTERM, printing its address first."""
    scenario = load_scenario(scenario_path)
    asyncio.run(_serve_until_signalled(host, port, scenario, scenario_path or "built-in defaults"))


async def _serve_until_signalled(host: str, port: int, scenario: Scenario, scenario_label: str) -> None:
    emulator = Emulator(scenario)
    await emulator.start(host, port)
    # Everything alive now lives as long as the process: keep it out of the cyclic collector, whose
    # full passes over it would otherwise stall the loop for ~10 ms in the middle of busy streams.
    gc.freeze()
    print(f"prober emulator listening on {emulator.base_url} (scenario: {scenario_label})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await emulator.stop()
