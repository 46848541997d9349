"""Requests through an HTTP proxy, as the official SDKs send them: HTTP_PROXY / HTTPS_PROXY /
NO_PROXY from the environment, plain http in absolute form, https tunnelled with CONNECT (TLS end
to end, checked against a self-signed certificate the test trusts), through a real tinyproxy."""

from __future__ import annotations

import asyncio
import json
import ssl
import time

import pytest

import prober.targets.transport
from prober.core.config import TargetConfig
from prober.core.records import ChatRequest
from prober.targets import make_adapter
from prober.targets.transport import Origin, Proxy, proxy_for
from tests.support.proxy import self_signed_certificate, tinyproxy
from tests.support.scripted_server import LAST_CHUNK, ScriptedServer, chunk, sse_head

pytestmark = pytest.mark.timeout(60)
USER = [{"role": "user", "content": "hi"}]
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def clean_proxy_environment(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


@pytest.fixture
def proxy(tmp_path):
    with tinyproxy(tmp_path) as running:
        yield running


class TLSScriptedServer(ScriptedServer):
    """The scripted server behind TLS (the certificate from `self_signed_certificate`)."""

    context: ssl.SSLContext | None = None

    async def __aenter__(self) -> TLSScriptedServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


async def openai_stream(request, writer, server):
    events = [b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
              b'[{"index":0,"delta":{"role":"assistant","content":"through"},"finish_reason":null}]}\n\n',
              b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
              b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n', b"data: [DONE]\n\n"]
    writer.write(sse_head() + b"".join(chunk(e) for e in events) + LAST_CHUNK)


def send_one(server: ScriptedServer) -> tuple:
    async def main():
        async with server:
            target = TargetConfig(protocol="openai", base_url=server.url, model="m", name="t")
            adapter = make_adapter(target, server.url, "sk-proxy-test")
            t0 = time.perf_counter_ns()
            exchange = await adapter.send(ChatRequest(messages=USER))
            wall_ms = (time.perf_counter_ns() - t0) / 1e6
            await adapter.aclose()
            return exchange, wall_ms
    return asyncio.run(main())


@pytest.mark.infra
def test_plain_http_goes_through_the_proxy(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    server = ScriptedServer(openai_stream)
    ex, _ = send_one(server)
    assert ex.ok and ex.text == "through", ex.error_message
    [request] = server.requests
    # tinyproxy forwarded it: it adds its Via header, rewrote the absolute URL to a path, and logged it.
    assert "tinyproxy" in request.headers.get("via", "")
    assert request.path == "/v1/chat/completions"
    assert f"127.0.0.1:{server.port}/v1/chat/completions" in proxy.log_text()
    assert ex.extra["proxy"] == proxy.url.removeprefix("http://")
    assert 0 < ex.extra["proxy_connect_ms"] <= ex.extra["connect_ms"]
    assert "proxy_tunnel_ms" not in ex.extra


@pytest.mark.infra
def test_https_is_tunnelled_with_connect_and_connect_time_is_apart_from_ttft(proxy, tmp_path, monkeypatch):
    cert, key = self_signed_certificate(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    # The client trusts the certificate the way the SDKs can be told to: SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setattr(prober.targets.transport, "_ssl_context", None)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")     # not for https: must not be used

    server = TLSScriptedServer(openai_stream)
    server.context = server_context
    ex, wall_ms = send_one(server)
    assert ex.ok and ex.text == "through", ex.error_message
    [request] = server.requests
    # Through a tunnel the proxy sees only CONNECT: the request reached the server untouched.
    assert "via" not in request.headers and request.headers["authorization"] == "Bearer sk-proxy-test"
    assert f"CONNECT 127.0.0.1:{server.port}" in proxy.log_text()
    # Connect, proxy connect and tunnel are measured, and none of it is inside TTFT: TTFT starts
    # once the tunnel and TLS are up, so TTFT + connect time fit within the wall time of the call.
    connect, proxy_connect, tunnel = (ex.extra[k] for k in ("connect_ms", "proxy_connect_ms", "proxy_tunnel_ms"))
    assert proxy_connect > 0 and tunnel > 0 and proxy_connect + tunnel < connect
    assert ex.ttft_ms is not None and ex.ttft_ms + connect <= wall_ms
    assert "sk-proxy-test" not in json.dumps(ex.extra)


@pytest.mark.infra
def test_no_proxy_bypasses_the_proxy(proxy, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    server = ScriptedServer(openai_stream)
    ex, _ = send_one(server)
    assert ex.ok and ex.text == "through"
    [request] = server.requests
    assert "via" not in request.headers and "proxy" not in ex.extra
    assert f"127.0.0.1:{server.port}" not in proxy.log_text()


@pytest.mark.emulator
def test_proxy_refusing_connect_is_a_connection_error_naming_the_proxy(tmp_path, monkeypatch):
    async def refuse(request, writer, server):
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        return False

    async def main():
        # A scripted "proxy" that answers CONNECT with 403.
        async with ScriptedServer(refuse) as fake_proxy:
            monkeypatch.setenv("HTTPS_PROXY", fake_proxy.url)
            target = TargetConfig(protocol="anthropic", base_url="https://api.example.invalid", model="m")
            adapter = make_adapter(target, target.base_url, None)
            exchange = await adapter.send(ChatRequest(messages=USER))
            await adapter.aclose()
            return exchange, fake_proxy

    ex, fake_proxy = asyncio.run(main())
    assert fake_proxy.requests[0].method == "CONNECT" and fake_proxy.requests[0].path == "api.example.invalid:443"
    assert ex.error_type == "connection"
    assert f"the proxy 127.0.0.1:{fake_proxy.port} refused CONNECT api.example.invalid:443" in ex.error_message


# --- which proxy, from the environment (pure) --------------------------------------------------------

HTTPS = Origin("https", "api.example.com", 443)
HTTP = Origin("http", "127.0.0.1", 8080)


@pytest.mark.parametrize("environ, origin, expected", [
    ({}, HTTPS, None),
    ({"HTTPS_PROXY": "http://p:3128"}, HTTPS, Proxy(Origin("http", "p", 3128), None)),
    ({"HTTPS_PROXY": "http://p:3128"}, HTTP, None),                          # scheme-specific
    ({"HTTP_PROXY": "p:8000"}, HTTP, Proxy(Origin("http", "p", 8000), None)),  # bare host:port is http
    ({"ALL_PROXY": "http://all:1"}, HTTPS, Proxy(Origin("http", "all", 1), None)),
    ({"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"}, HTTPS,
     Proxy(Origin("http", "lower", 2), None)),                               # lower case wins
    ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"}, HTTPS, None),  # a domain covers subdomains
    ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example.com"}, HTTPS, None),
    ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, HTTPS, None),
    ({"HTTPS_PROXY": "http://p:1", "NO_PROXY": "notexample.com,other"}, HTTPS,
     Proxy(Origin("http", "p", 1), None)),
    ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1:8080"}, HTTP, None),  # with a port
    ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1:9999"}, HTTP, Proxy(Origin("http", "p", 1), None)),
    ({"HTTPS_PROXY": "http://us%40r:p%3Ass@p:1"}, HTTPS,
     Proxy(Origin("http", "p", 1), "Basic dXNAcjpwOnNz")),                   # user "us@r", password "p:ss"
])
@pytest.mark.unit
def test_proxy_for_follows_the_sdks(environ, origin, expected):
    assert proxy_for(origin, environ) == expected


@pytest.mark.unit
def test_unusable_proxy_scheme_fails_each_request_with_its_reason(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(ValueError, match="http:// only"):
        proxy_for(HTTPS)

    async def main():
        target = TargetConfig(protocol="openai", base_url="https://api.example.invalid", model="m")
        adapter = make_adapter(target, target.base_url, None)
        exchange = await adapter.send(ChatRequest(messages=USER))
        await adapter.aclose()
        return exchange

    ex = asyncio.run(main())
    assert ex.error_type == "connection" and "socks5://127.0.0.1:1080" in ex.error_message
