"""A real gateway: LiteLLM's proxy (tests/support/gateway.py) in front of the local llama-server,
probed by `prober run` direct and through the gateway in the same run, on the OpenAI route
(/v1/chat/completions), the Anthropic route (/v1/messages) and the Responses route (/v1/responses,
which LiteLLM forwards to the upstream's own; caching and latency there: the Responses API takes no
penalties).

What prober reports about the gateway is what the test asserts:
- cache fields: the cache-read usage field each route's direct samples carry, and whether the
  gateway's samples of the same suite still carry it (compared in the stored usage);
- sampling parameters: the penalty suite's `penalty_ignored` check, direct against gateway, with
  LiteLLM's `drop_params: true` on both routes, and a model whose `additional_drop_params`
  drops penalties that llama-server's chat route honours;
- TTFT: the gateway's overhead at p50 and p99 against direct, from `prober compare` (printed:
  sequential targets on a shared machine differ by more than the overhead), and that the gateway
  streams (the answer's tokens are not held back until the end).
And the gateway made no connection off the loopback interface, and its key never reached the store.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from prober.store import Store
from tests.support.cli import prober
from tests.support.gateway import KEY_ENV, Gateway, litellm_gateway

pytestmark = [pytest.mark.infra, pytest.mark.timeout(1800)]

MODEL = "SmolLM2-135M-Instruct"
# Small grids: the whole test takes minutes on 2 shared cores. Penalties at 1.5, the strongest the
# real penalty test uses; presence is left out: at 80 tokens it leaves llama-server's answers equal
# to the baseline's in some runs even where it is applied (tests/probes/test_penalty_real.py).
PENALTY = {"modes": ["unconstrained"], "n_records": [3], "temperatures": [0.0], "repeats": 2,
           "baseline_repeats": 3, "max_tokens": 80,
           "penalties": {"frequency_penalty": [1.5], "repetition_penalty": [1.5]}}
CACHING = {"cases": ["repeat"], "requests": 6, "prefix_tokens": 384, "max_tokens": 2}
LATENCY = {"levels": [1], "requests_per_level": 40, "warmup": 2, "input_tokens": 64, "max_tokens": 16}
# target -> (protocol, where, model)
TARGETS = {"direct-chat": ("openai", "direct", MODEL), "gateway-chat": ("openai", "gateway", "chat"),
           "direct-messages": ("anthropic", "direct", MODEL), "gateway-messages": ("anthropic", "gateway", "messages"),
           "gateway-chat-dropping": ("openai", "gateway", "chat-dropping"),
           "direct-responses": ("openai-responses", "direct", MODEL),
           "gateway-responses": ("openai-responses", "gateway", "chat")}
# (direct, through the gateway, the suite both ran)
ROUTES = (("direct-chat", "gateway-chat", "gateway"), ("direct-messages", "gateway-messages", "gateway"),
          ("direct-responses", "gateway-responses", "gateway-responses"))
PENALTY_TARGETS = [t for t in TARGETS if TARGETS[t][0] != "openai-responses"]


def _toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _suite(probes: dict[str, dict]) -> str:
    return "".join(f'[[probes]]\nprobe = "{name}"\n[probes.params]\n'
                   + "".join(f"{k} = {_toml_value(v)}\n" for k, v in params.items())
                   for name, params in probes.items())


def _config(tmp_path: Path, upstream: str, gateway: Gateway) -> Path:
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "gateway.toml").write_text('description = "caching, penalty and latency, small grids"\n'
                                         + _suite({"caching": CACHING, "penalty": PENALTY, "latency": LATENCY}))
    (suites / "gateway-penalty.toml").write_text('description = "the penalty grid alone"\n'
                                                 + _suite({"penalty": PENALTY}))
    (suites / "gateway-responses.toml").write_text('description = "caching and latency, small grids"\n'
                                                   + _suite({"caching": CACHING, "latency": LATENCY}))
    targets = ""
    for name, (protocol, where, model) in TARGETS.items():
        base_url = gateway.base_url if where == "gateway" else upstream
        key = f'api_key_env = "{KEY_ENV}"\n' if where == "gateway" else ""
        targets += f'[targets.{name}]\nprotocol = "{protocol}"\nbase_url = "{base_url}"\nmodel = "{model}"\n{key}\n'
    config = tmp_path / "prober.toml"
    config.write_text(f'suite_paths = ["suites"]\n\n[store]\nurl = "sqlite:///{tmp_path}/p.db"\n\n{targets}')
    return config


def _run(tmp_path: Path, config: Path, gateway: Gateway, suite: str, *targets: str) -> str:
    args = [arg for target in targets for arg in ("--target", target)]
    run = prober("run", "--suite", suite, *args, "--config", str(config), cwd=tmp_path,
                 env={KEY_ENV: gateway.key}, timeout=1500)
    assert run.returncode == 0, run.stdout + run.stderr
    found = re.search(r"run ([0-9a-f]{12})", run.stdout + run.stderr)
    assert found, run.stdout
    return found.group(1)


def _value(metrics: list[dict], target: str, name: str, **labels: object) -> float | None:
    found = [m["value"] for m in metrics if m["target"] == target and m["name"] == name
             and all(m["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (target, name, labels, found)
    return found[0]


def _cache_read(row: dict) -> int | None:
    """The cache-read field as the wire reported it, None where the usage lacks it (a Responses
    sample's usage is stored in chat completions' names: `input_tokens_details.cached_tokens`
    becomes `prompt_tokens_details.cached_tokens`)."""
    usage = row["usage"] or {}
    if row["protocol"] == "anthropic":
        return usage.get("cache_read_input_tokens")
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


def test_litellm_between_prober_and_llama_server(tmp_path, llama_servers):
    upstream = llama_servers.get().base_url
    with litellm_gateway(upstream, tmp_path / "litellm") as gateway:
        config = _config(tmp_path, upstream, gateway)
        main = _run(tmp_path, config, gateway, "gateway", *(t for *pair, suite in ROUTES if suite == "gateway"
                                                           for t in pair))
        dropping = _run(tmp_path, config, gateway, "gateway-penalty", "gateway-chat-dropping")
        responses = _run(tmp_path, config, gateway, "gateway-responses", "direct-responses", "gateway-responses")
        overhead = {}
        for direct, through, suite in ROUTES:
            compared = prober("compare", "--target", direct, "--target", through, "--since", "1d", "--suite",
                              suite, "-m", "ttft_p50_ms", "-m", "ttft_p99_ms", "-m", "e2e_p50_ms",
                              "--format", "json", "--config", str(config), cwd=tmp_path)
            assert compared.returncode == 0, compared.stdout + compared.stderr
            overhead[through] = json.loads(compared.stdout)
        outbound, seen = gateway.outbound_connects(), gateway.connects_seen()
        cpu_s, peak_mb = gateway.usage()
    print(f"LiteLLM's proxy: {cpu_s:.1f} CPU s, peak {peak_mb:.0f} MB over the test")

    store = Store.open(f"sqlite:///{tmp_path}/p.db")
    try:
        rows = store.samples(main) + store.samples(dropping) + store.samples(responses)
        metrics = [m for run in (main, dropping, responses) for m in store.metrics(run)]
    finally:
        store.close()
    assert rows and [(r["target"], r["error_message"]) for r in rows if r["error_type"]] == []

    # Offline: every connection the proxy opened went to llama-server on loopback, none to a
    # cost map, telemetry, update check or DNS server.
    assert seen > 0 and outbound == [], outbound
    # The gateway's key is a secret: not one byte of it in the store.
    assert gateway.key.encode() not in (tmp_path / "p.db").read_bytes()

    # Cache fields: llama-server reports its prefix-cache reads on every route; LiteLLM passes
    # them on every one, so the repeat case hits as often through it as direct.
    caching = [r for r in rows if r["case"] == "repeat"]
    for direct, through, _ in ROUTES:
        reads = {t: [_cache_read(r) for r in caching if r["target"] == t] for t in (direct, through)}
        print(f"cache reads {direct}: {reads[direct]}; {through}: {reads[through]}")
        assert None not in reads[direct] and max(reads[direct]) >= 64, reads
        assert None not in reads[through] and max(reads[through]) >= 64, reads
        assert _value(metrics, through, "cache_read_reported", case="usage") == 1.0
        assert _value(metrics, through, "hit_rate", case="repeat") >= 0.8

    # LiteLLM raises a Responses request's max_output_tokens to at least 16: the caching case asks
    # for 2, which direct answers keep to and the gateway's exceed.
    longest = {t: max(r["usage"]["completion_tokens"] for r in caching if r["target"] == t)
               for t in ("direct-responses", "gateway-responses")}
    print(f"repeat case, most output tokens (max_tokens {CACHING['max_tokens']}): {longest}")
    assert longest["direct-responses"] <= CACHING["max_tokens"] < longest["gateway-responses"], longest

    # Sampling parameters. Direct, llama-server honours both penalties on its chat route and
    # ignores them on /v1/messages. Through the gateway with drop_params, the chat route passes
    # them on (repeat_penalty too, a llama.cpp name); the config's additional_drop_params drops them.
    ignored = {t: {p: _value(metrics, t, "penalty_ignored", penalty=p)
                   for p in ("frequency_penalty", "repetition_penalty")} for t in PENALTY_TARGETS}
    print(f"penalty_ignored: {ignored}")
    assert ignored["direct-chat"] == {"frequency_penalty": 0, "repetition_penalty": 0}
    assert ignored["gateway-chat"] == {"frequency_penalty": 0, "repetition_penalty": 0}
    assert ignored["gateway-chat-dropping"] == {"frequency_penalty": 1, "repetition_penalty": 1}
    assert ignored["direct-messages"] == ignored["gateway-messages"] == {"frequency_penalty": 1,
                                                                        "repetition_penalty": 1}
    for target in PENALTY_TARGETS:
        # Dropped quietly (a 200), not refused; and nothing injected when the request omits them.
        assert _value(metrics, target, "penalty_unsupported", penalty="frequency_penalty") == 0
        assert _value(metrics, target, "penalties_applied_when_omitted") == 0

    # TTFT: the gateway's overhead against direct in the same run (`prober compare`, B - A), at p50
    # and p99. The targets run one after another, so the machine's load may differ between them.
    for direct, through, _ in ROUTES:
        compared = {c["name"]: c for c in overhead[through]["compared"]}
        added = {name: compared[name]["b"] - compared[name]["a"] for name in ("ttft_p50_ms", "ttft_p99_ms")}
        print(f"{through} against {direct}: TTFT p50 {compared['ttft_p50_ms']['a']:.1f} -> "
              f"{compared['ttft_p50_ms']['b']:.1f} ms (+{added['ttft_p50_ms']:.1f}), p99 "
              f"{compared['ttft_p99_ms']['a']:.1f} -> {compared['ttft_p99_ms']['b']:.1f} ms "
              f"(+{added['ttft_p99_ms']:.1f}); n {compared['ttft_p50_ms']['n_a']}/{compared['ttft_p50_ms']['n_b']}")
        # One more hop through a Python proxy adds tens of ms (docs/operations.md), far less than
        # the machine's own drift between two targets run one after another: CI runs measured -21
        # ms on /v1/messages, and on a loaded machine direct 1,632 ms against 287 ms through the
        # gateway. So the overhead is reported, not judged; compare gave both sides in full.
        assert compared["ttft_p50_ms"]["n_a"] == compared["ttft_p50_ms"]["n_b"] == LATENCY["requests_per_level"]
        # The gateway streams: within its own requests, the answer's 16 tokens reach the client
        # over at least a tenth of the request's time (a proxy that buffered the answer would send
        # them at once, after the whole of it).
        e2e, ttft = compared["e2e_p50_ms"]["b"], compared["ttft_p50_ms"]["b"]
        assert e2e - ttft > 0.1 * e2e, (e2e, ttft)
