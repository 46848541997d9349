"""prober.targets.transport against a scripted loopback server: framing, keep-alive, timeouts, timestamps."""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
from time import perf_counter_ns

import pytest

from prober.core.config import Timeouts
from prober.targets.transport import HTTPTransport, TransportError, build_head, split_url
from tests.support.scripted_server import (
    LAST_CHUNK,
    ScriptedServer,
    chunk,
    response_bytes,
    sse_head,
)
from tests.support.timing import timing_sensitive

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(30)]


def run(coro):
    return asyncio.run(coro)


def make(server: ScriptedServer, max_connections: int = 8, **timeouts) -> tuple[HTTPTransport, bytes]:
    origin, _ = split_url(server.url)
    transport = HTTPTransport(origin, max_connections=max_connections,
                              timeouts=Timeouts(**({"connect": 2, "read": 5, "total": 10} | timeouts)))
    return transport, build_head("POST", "/v1/x", origin, {"content-type": "application/json"})


async def fetch(transport: HTTPTransport, head: bytes, body: bytes = b"{}"):
    response = await transport.send(head, body)
    try:
        return response, await response.read()
    finally:
        await response.aclose()


def test_split_url_and_head():
    origin, path = split_url("https://api.example.com/openai/v1/")
    assert origin == ("https", "api.example.com", 443) and path == "/openai/v1"
    origin, path = split_url("http://127.0.0.1:18080")
    assert origin.host_header == "127.0.0.1:18080" and path == ""
    assert split_url("http://[::1]:8000/x")[0].host_header == "[::1]:8000"
    head = build_head("POST", "/v1/messages", origin, {"x-a": "1"})
    assert head.startswith(b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1:18080\r\n")
    assert head.endswith(b"x-a: 1\r\n")
    with pytest.raises(ValueError):
        split_url("ftp://x")


def test_content_length_and_keep_alive_reuse():
    async def handler(request, writer, server):
        writer.write(response_bytes(200, b"hello " + request.body, {"X-Request-Id": "r1"}))

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            for i in range(3):
                response, body = await fetch(transport, head, b"%d" % i)
                assert (response.status, body) == (200, b"hello %d" % i)
                assert response.headers["x-request-id"] == "r1"
                assert response.reused == (i > 0)
            assert server.connections == 1 and len(server.requests) == 3
            assert server.requests[0].headers["content-length"] == "1"
            assert server.requests[0].headers["host"] == f"127.0.0.1:{server.port}"
            await transport.aclose()
    run(main())


def test_chunked_body_with_extensions_and_trailers():
    async def handler(request, writer, server):
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"5;ext=1\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n")

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            for _ in range(2):
                _response, body = await fetch(transport, head)
                assert body == b"hello 0123456789"
            assert server.connections == 1
            await transport.aclose()
    run(main())


def test_chunked_body_split_into_single_bytes():
    async def handler(request, writer, server):
        raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(b"abc") + chunk(b"de") + LAST_CHUNK
        for i in range(len(raw)):
            writer.write(raw[i:i + 1])
            await writer.drain()
            await asyncio.sleep(0.001)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            response, body = await fetch(transport, head)
            assert body == b"abcde" and response.complete
            await transport.aclose()
    run(main())


def test_body_until_close_and_connection_close_header():
    async def handler(request, writer, server):
        if request.path and len(server.requests) == 1:
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nno length")     # ends with the connection
            return False
        writer.write(response_bytes(200, b"ok", {"Connection": "close"}))
        return False

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            assert (await fetch(transport, head))[1] == b"no length"
            assert (await fetch(transport, head))[1] == b"ok"
            assert (await fetch(transport, head))[1] == b"ok"
            assert server.connections == 3
            await transport.aclose()
    run(main())


def test_server_closing_after_stream_then_next_request_succeeds():
    """llama-server: closes a keep-alive connection after a streamed response, no Connection: close."""
    async def handler(request, writer, server):
        writer.write(sse_head() + chunk(b"data: 1\n\n") + chunk(b"data: [DONE]\n\n") + LAST_CHUNK)
        await writer.drain()
        return False

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            for _ in range(4):
                _response, body = await fetch(transport, head)
                assert body == b"data: 1\n\ndata: [DONE]\n\n"
            assert len(server.requests) == 4
            await transport.aclose()
    run(main())


def test_reused_connection_dropped_before_response_is_retried_once():
    async def handler(request, writer, server):
        if request.connection == 0 and len(server.requests) == 2:
            return False                       # read the second request, then hang up silently
        writer.write(response_bytes(200, b"ok"))

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            assert (await fetch(transport, head))[1] == b"ok"
            response, body = await fetch(transport, head)
            assert body == b"ok" and not response.reused
            assert [r.connection for r in server.requests] == [0, 0, 1]
            await transport.aclose()
    run(main())


def test_fresh_connection_dropped_before_response_is_an_error():
    async def handler(request, writer, server):
        return False

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            with pytest.raises(TransportError) as info:
                await fetch(transport, head)
            assert info.value.kind == "connection"
            assert len(server.requests) == 1
            await transport.aclose()
    run(main())


def test_unread_response_is_not_reused():
    async def handler(request, writer, server):
        writer.write(response_bytes(200, b"x" * 1000))

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            response = await transport.send(head, b"{}")
            await response.aclose()             # without reading the body
            await fetch(transport, head)
            assert server.connections == 2
            await transport.aclose()
    run(main())


def test_read_timeout_on_stall():
    async def handler(request, writer, server):
        writer.write(sse_head() + chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(3)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, read=0.3)
            response = await transport.send(head, b"{}")
            assert await response.next_chunk() == b"data: 1\n\n"
            t0 = perf_counter_ns()
            with pytest.raises(TransportError) as info:
                await response.next_chunk()
            assert info.value.kind == "timeout" and "read timeout" in str(info.value)
            assert 0.25 < (perf_counter_ns() - t0) / 1e9 < 1.5
            await response.aclose()
            await transport.aclose()
    run(main())


def test_total_timeout_despite_steady_trickle():
    async def handler(request, writer, server):
        writer.write(sse_head())
        for _ in range(100):
            writer.write(chunk(b": ping\n\n"))
            await writer.drain()
            await asyncio.sleep(0.05)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, read=0.5, total=0.4)
            response = await transport.send(head, b"{}")
            with pytest.raises(TransportError) as info:
                while await response.next_chunk():
                    pass
            assert info.value.kind == "timeout" and "total" in str(info.value)
            await response.aclose()
            await transport.aclose()
    run(main())


def test_timeout_waiting_for_headers():
    async def handler(request, writer, server):
        await asyncio.sleep(3)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, read=0.2)
            with pytest.raises(TransportError) as info:
                await transport.send(head, b"{}")
            assert info.value.kind == "timeout"
            await transport.aclose()
    run(main())


def test_connection_refused():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()

    async def main():
        origin, _ = split_url(f"http://127.0.0.1:{port}")
        transport = HTTPTransport(origin, max_connections=1, timeouts=Timeouts())
        with pytest.raises(TransportError) as info:
            await transport.send(build_head("POST", "/", origin, {}), b"")
        assert info.value.kind == "connection" and "refused" in str(info.value).lower()
        await transport.aclose()
    run(main())


def test_dropped_mid_body():
    async def handler(request, writer, server):
        writer.write(sse_head() + chunk(b"data: 1\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        return False

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            response = await transport.send(head, b"{}")
            assert await response.next_chunk() == b"data: 1\n\n"
            with pytest.raises(TransportError) as info:
                await response.next_chunk()
            assert info.value.kind == "connection"
            await response.aclose()
            await transport.aclose()
    run(main())


def test_malformed_status_line_is_protocol_error():
    async def handler(request, writer, server):
        writer.write(b"HTTP/1.1 abc\r\n\r\n")

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            with pytest.raises(TransportError) as info:
                await transport.send(head, b"{}")
            assert info.value.kind == "protocol"
            await transport.aclose()
    run(main())


def test_interim_100_response_is_skipped():
    async def handler(request, writer, server):
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + response_bytes(201, b"made"))

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            response, body = await fetch(transport, head)
            assert (response.status, body) == (201, b"made")
            await transport.aclose()
    run(main())


def test_timestamps_order_and_gaps():
    async def handler(request, writer, server):
        writer.write(sse_head())
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(chunk(b"data: a\n\n"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"data: b\n\n") + LAST_CHUNK)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            response = await transport.send(head, b"{}")
            arrivals = []
            while await response.next_chunk():
                arrivals.append(response.last_ns)
            await response.aclose()
            assert response.start_ns < response.headers_ns < response.first_byte_ns
            assert response.first_byte_ns == arrivals[0]
            assert 90 < (response.first_byte_ns - response.headers_ns) / 1e6 < 400
            assert 40 < (arrivals[1] - arrivals[0]) / 1e6 < 300
            assert response.end_ns == arrivals[-1]
            assert response.started_at is not None and response.started_at.tzinfo is not None
            await transport.aclose()
    run(main())


def test_pool_bounds_in_flight_requests():
    async def handler(request, writer, server):
        await asyncio.sleep(0.05)
        writer.write(response_bytes(200, b"ok"))

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, max_connections=2)
            results = await asyncio.gather(*(fetch(transport, head) for _ in range(6)))
            assert all(body == b"ok" for _, body in results)
            assert server.max_open <= 2 and server.connections == 2
            assert sum(1 for response, _ in results if response.pool_wait_ns > 0) >= 4
            await transport.aclose()
    run(main())


def test_cancelled_request_releases_its_slot():
    async def handler(request, writer, server):
        if len(server.requests) == 1:
            await asyncio.sleep(5)
        writer.write(response_bytes(200, b"ok"))

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, max_connections=1)
            task = asyncio.create_task(fetch(transport, head))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await asyncio.wait_for(fetch(transport, head), 2))[1] == b"ok"
            await transport.aclose()
    run(main())


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", directory / "key.pem", "-out", directory / "cert.pem"],
                   check=True, capture_output=True)
    return directory / "cert.pem", directory / "key.pem"


def test_https_with_a_given_trust_store(tls_files):
    cert, key = tls_files

    async def client_connected(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(response_bytes(200, b"secure"))
        await writer.drain()
        writer.close()

    async def main():
        server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_context.load_cert_chain(cert, key)
        server = await asyncio.start_server(client_connected, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        client_context = ssl.create_default_context(cafile=str(cert))
        origin = split_url(f"https://localhost:{port}")[0]
        origin = origin._replace(host="localhost")
        transport = HTTPTransport(origin, max_connections=1, timeouts=Timeouts(connect=5),
                                  ssl_context=client_context)
        response = await transport.send(build_head("POST", "/", origin, {}), b"{}")
        assert await response.read() == b"secure"
        await response.aclose()
        await transport.aclose()
        # The default (system) trust store must refuse the self-signed certificate.
        untrusted = HTTPTransport(origin, max_connections=1, timeouts=Timeouts(connect=5))
        with pytest.raises(TransportError) as info:
            await untrusted.send(build_head("POST", "/", origin, {}), b"{}")
        assert info.value.kind == "connection"
        await untrusted.aclose()
        server.close()
        await server.wait_closed()
    run(main())


def test_stream_pushes_chunks_with_arrival_times_and_stops_early():
    async def handler(request, writer, server):
        writer.write(sse_head() + chunk(b"a"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"b"))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(chunk(b"STOP") + chunk(b"ignored"))
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(LAST_CHUNK)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server)
            for _ in range(2):
                response = await transport.send(head, b"{}")
                seen = []
                await response.stream(lambda data, ns, seen=seen: seen.append((data, ns)) or data.startswith(b"STOP"))
                assert [data for data, _ in seen] == [b"a", b"b", b"STOPignored"]
                assert 40 < (seen[1][1] - seen[0][1]) / 1e6 < 300
                assert response.first_byte_ns == seen[0][1]
                await response.drain(1.0)          # the terminator comes 20 ms later
                assert response.complete
                await response.aclose()
            assert server.connections == 1         # drained, so the connection was reused
            await transport.aclose()
    run(main())


def test_stream_errors_reach_the_awaiting_task():
    async def handler(request, writer, server):
        if len(server.requests) == 1:
            writer.write(sse_head() + chunk(b"a"))
            await writer.drain()
            await asyncio.sleep(0.05)
            return False                                  # dropped mid-body
        writer.write(sse_head() + chunk(b"a"))            # then stalls
        await writer.drain()
        await asyncio.sleep(3)

    def bad_callback(data, ns):
        raise ValueError("decoder bug")

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, read=0.3)
            response = await transport.send(head, b"{}")
            with pytest.raises(TransportError) as info:
                await response.stream(lambda data, ns: False)
            assert info.value.kind == "connection"
            await response.aclose()
            response = await transport.send(head, b"{}")
            with pytest.raises(ValueError):
                await response.stream(bad_callback)
            await response.aclose()
            response = await transport.send(head, b"{}")
            with pytest.raises(TransportError) as info:
                await response.stream(lambda data, ns: False)
            assert info.value.kind == "timeout"
            await response.aclose()
            await transport.aclose()
    run(main())


@timing_sensitive
def test_streams_arriving_together_are_stamped_before_any_is_parsed():
    # Two streams' first bytes arrive in one turn of the loop; the first one parsed takes 40 ms.
    # The other's arrival time must be when its bytes came, not after that parse: a parse inside
    # data_received would stamp it 40 ms late (the p99 TTFT overhead of a 512-stream burst).
    go = asyncio.Event()

    async def handler(request, writer, server):
        writer.write(sse_head())
        await writer.drain()
        await go.wait()
        writer.write(chunk(b"x"))
        await writer.drain()
        writer.write(LAST_CHUNK)

    async def main():
        async with ScriptedServer(handler) as server:
            transport, head = make(server, max_connections=2)
            responses = [await transport.send(head, b"{}") for _ in range(2)]
            stamps: list[int] = []

            def on_data(data: bytes, ns: int) -> bool:
                stamps.append(ns)
                if len(stamps) == 1:
                    until = perf_counter_ns() + 40_000_000
                    while perf_counter_ns() < until:      # a slow parse, holding the loop
                        pass
                return True

            streams = [asyncio.ensure_future(r.stream(on_data)) for r in responses]
            await asyncio.sleep(0.05)
            go.set()
            await asyncio.gather(*streams)
            assert len(stamps) == 2
            # Half the slow parse: the bound is the parse this test makes, not a machine's speed.
            assert abs(stamps[1] - stamps[0]) < 20_000_000, (stamps[1] - stamps[0]) / 1e6
            for response in responses:
                await response.aclose()
            await transport.aclose()
    run(main())
