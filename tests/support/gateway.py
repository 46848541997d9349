"""LiteLLM's proxy, a real gateway, in front of an upstream server (llama-server in the tests).

scripts/install-gateway.sh (run by `make test`) installs it into a venv of its own under the cache,
pinned by requirements/litellm-lock.txt. It is started offline: the model cost map from the
package (LITELLM_LOCAL_MODEL_COST_MAP), no telemetry, no database, no Hugging Face look-ups. It
runs under strace, which records every connect() it makes, so a test can show that it reached
nothing but the loopback interface.

Each model_list entry is one way users route through it:
- `chat`: the OpenAI route, `openai/` provider to the upstream's /v1/chat/completions;
- `messages`: the Anthropic route, `anthropic/` provider to the upstream's /v1/messages;
- `chat-dropping`: the OpenAI route with the penalties named in `additional_drop_params`, the
  per-model list LiteLLM drops on top of what `drop_params` drops.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prober.local.server import cache_dir
from tests.support.llama import free_port
from tests.support.processes import listening

# Penalties the `chat-dropping` model drops (every wire name the penalty suite sends).
DROPPED_BY_CONFIG = ("frequency_penalty", "repetition_penalty", "repeat_penalty")
# The key prober sends to the gateway (LiteLLM's master key), through this variable.
KEY_ENV = "PROBER_GATEWAY_KEY"
# A cold start imports the whole proxy (about 50 s of wall on 2 loaded cores).
START_TIMEOUT_S = 300.0
_LOOPBACK = ("127.", "::1", "::ffff:127.")


def litellm_venv() -> Path:
    return Path(os.environ.get("PROBER_LITELLM_VENV") or cache_dir() / "litellm-venv")


def litellm_binary() -> Path:
    binary = litellm_venv() / "bin" / "litellm"
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: run `make gateway` (scripts/install-gateway.sh)")
    return binary


@dataclass
class Gateway:
    port: int
    key: str
    log: Path
    connects: Path
    pid: int = 0      # strace's: the proxy is its child

    def usage(self) -> tuple[float, float]:
        """The proxy's CPU seconds so far and its peak resident memory in MB (from /proc)."""
        (child,) = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
        ticks = os.sysconf("SC_CLK_TCK")
        fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / ticks
        status = Path(f"/proc/{child}/status").read_text()
        peak_kb = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        return cpu, peak_kb / 1024

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def outbound_connects(self) -> list[str]:
        """Every connect() strace saw to an address off the loopback interface (IPv4 or IPv6),
        DNS included: the resolver here is not on loopback."""
        found = []
        for line in self.connects.read_text(errors="replace").splitlines():
            if "AF_INET" not in line:
                continue
            address = re.search(r'inet_(?:addr|pton)\((?:AF_INET6, )?"([^"]+)"', line)
            if address is None or not address.group(1).startswith(_LOOPBACK):
                found.append(line)
        return found

    def connects_seen(self) -> int:
        """How many inet connect() calls strace recorded: zero would mean it recorded nothing."""
        return sum("AF_INET" in line for line in self.connects.read_text(errors="replace").splitlines())


def config(upstream: str) -> dict:
    """LiteLLM's config (JSON is YAML): every model to `upstream`, the key from KEY_ENV."""
    def model(name: str, provider: str, api_base: str, **extra: object) -> dict:
        return {"model_name": name, "litellm_params": {"model": f"{provider}/SmolLM2-135M-Instruct",
                                                       "api_base": api_base, "api_key": "none", **extra}}
    return {
        "model_list": [model("chat", "openai", f"{upstream}/v1"),
                       model("messages", "anthropic", upstream),
                       model("chat-dropping", "openai", f"{upstream}/v1",
                             additional_drop_params=list(DROPPED_BY_CONFIG))],
        "litellm_settings": {"drop_params": True, "telemetry": False, "num_retries": 0,
                             "request_timeout": 600},
        # One upstream error would otherwise bench the model for a while ("all deployments in
        # cooldown", a 429 of the gateway's own) and turn the samples after it into errors.
        "router_settings": {"disable_cooldowns": True},
        "general_settings": {"master_key": f"os.environ/{KEY_ENV}", "disable_spend_logs": True},
    }


def offline_environment(key: str) -> dict[str, str]:
    """The proxy's environment: nothing it would fetch at start, no telemetry, no update checks."""
    return {**os.environ, KEY_ENV: key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
            "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True", "LITELLM_MODE": "PRODUCTION",
            "DISABLE_SCHEMA_UPDATE": "True", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TIKTOKEN_CACHE_DIR": str(litellm_venv() / "tiktoken-cache"), "NO_COLOR": "1"}


@contextmanager
def litellm_gateway(upstream: str, workdir: Path) -> Iterator[Gateway]:
    """The proxy on a free port in front of `upstream`, under strace; stopped on the way out."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "litellm.yaml"
    path.write_text(json.dumps(config(upstream), indent=1))
    gateway = Gateway(free_port(), "sk-prober-" + secrets.token_hex(16), workdir / "litellm.log",
                      workdir / "connects.strace")
    args = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", str(gateway.connects),
            str(litellm_binary()), "--config", str(path), "--host", "127.0.0.1", "--port", str(gateway.port),
            "--num_workers", "1"]
    with gateway.log.open("wb") as log:
        # A session of its own: strace, stopped, detaches and leaves the proxy running, so the
        # whole group is stopped.
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=offline_environment(gateway.key),
                                   cwd=workdir, start_new_session=True)
    gateway.pid = process.pid
    started = False
    try:
        with listening(process, gateway.port, "LiteLLM's proxy", START_TIMEOUT_S):
            started = True
            yield gateway
    except RuntimeError:
        if started:
            raise
        log = gateway.log.read_text(errors="replace")
        raise RuntimeError(f"LiteLLM's proxy did not start:\n{log[-4000:]}") from None
    finally:
        _stop_group(process)


def _stop_group(process: subprocess.Popen) -> None:
    """SIGTERM to the group (uvicorn shuts down cleanly), SIGKILL to what is left after 10 s."""
    for signal_number in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + 10
        try:
            os.killpg(process.pid, signal_number)
            while time.monotonic() < deadline:
                process.poll()                    # reaps strace, the group's leader
                os.killpg(process.pid, 0)         # raises once no process of the group is left
                time.sleep(0.1)
        except ProcessLookupError:
            break
    process.wait()
