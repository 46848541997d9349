"""`prober.toml`: targets, runner settings, the store URL and the suite search path.

Validation is pydantic's; every error is turned into one line naming the file and the key
(`ConfigError`), so the CLI can print it without a traceback and exit 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from prober.core.durations import DURATION_EXAMPLES, parse_duration
from prober.core.errors import ConfigError
from prober.core.findings import FINDING_CODES, unknown_codes
from prober.core.records import default_site
from prober.core.redact import is_credential_header
from prober.core.tomlfile import read_toml, validation_error
from prober.core.urls import check_base_url

DEFAULT_CONFIG_NAME = "prober.toml"
LOCAL_PORT = 8080


class _Strict(BaseModel):
    # Unknown keys are errors: a typo in a config file must not be silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=False)


class Timeouts(_Strict):
    connect: float = Field(10.0, gt=0, description="seconds to open the connection")
    read: float = Field(120.0, gt=0, description="longest silence allowed between two received bytes")
    total: float = Field(600.0, gt=0, description="longest a whole request may take")


class Pricing(_Strict):
    """The cache multipliers on the input price. The caching probe's cost_multiplier is a ratio of
    prompt costs with and without caching, in which the price per token cancels out. The prices
    per token size a run before it is sent (`prober run --dry-run`)."""

    cache_write_5m: float = Field(1.25, ge=0)
    cache_write_1h: float = Field(2.0, ge=0)
    cache_read: float = Field(0.1, ge=0)
    input_usd_per_mtok: float | None = Field(None, ge=0, description="US dollars per million input tokens")
    output_usd_per_mtok: float | None = Field(None, ge=0, description="US dollars per million output tokens")


class EmulatorTarget(_Strict):
    scenario: str | None = Field(None, description="scenario TOML file; built-in defaults when unset")


class TargetConfig(_Strict):
    name: str = ""
    protocol: Literal["anthropic", "openai", "openai-responses"]
    base_url: str | None = Field(None, description="e.g. https://api.anthropic.com; unset for the emulator")
    model: str
    api_key_env: str | None = Field(None, description="name of the environment variable holding the key")
    headers: dict[str, str] = Field(default_factory=dict)
    headers_env: dict[str, str] = Field(default_factory=dict, description="header name -> environment "
                                        "variable holding its value, for gateway keys")
    max_concurrency: int = Field(512, ge=1)
    requests_per_second: float | None = Field(None, gt=0)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    pricing: Pricing | None = None
    emulator: EmulatorTarget | None = None
    # Hosted APIs want these; compatible servers ignore them.
    anthropic_version: str = "2023-06-01"
    known: list[str] = Field(default_factory=list, description="finding codes this server is known to "
                             "produce: notices for this target, never counted or paged (docs/operations.md)")

    @field_validator("known")
    @classmethod
    def _known_codes(cls, known: list[str]) -> list[str]:
        unknown = unknown_codes(known)
        if unknown:
            raise ValueError(f"unknown finding code(s) {', '.join(map(repr, unknown))}: the codes are "
                             f"{', '.join(FINDING_CODES)}")
        return known

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for key in headers:
            if key.lower() in ("authorization", "x-api-key", "api-key"):
                raise ValueError(f"put the key in an environment variable and name it in api_key_env, "
                                 f"not in headers.{key}")
            if is_credential_header(key):
                raise ValueError(f"headers.{key} looks like a credential: put its value in an environment "
                                 f"variable and name it in headers_env = {{ \"{key}\" = \"VARIABLE\" }}")
        return headers

    @field_validator("base_url")
    @classmethod
    def _usable_url(cls, url: str | None) -> str | None:
        return None if url is None else check_base_url(url)

    @model_validator(mode="after")
    def _needs_url(self) -> TargetConfig:
        if self.emulator is None and not self.base_url:
            raise ValueError("base_url is required (or set [targets.NAME.emulator] for the bundled emulator)")
        return self

    @property
    def is_emulator(self) -> bool:
        return self.emulator is not None

    def env_headers(self, source: str = "the configuration") -> dict[str, str]:
        """headers_env resolved; a named but unset variable is a configuration error."""
        resolved = {}
        for header, variable in self.headers_env.items():
            value = os.environ.get(variable)
            if not value:
                raise ConfigError(f"{source}: targets.{self.name}.headers_env.{header}: environment variable "
                                  f"{variable} is not set")
            resolved[header] = value
        return resolved

    def api_key(self, source: str) -> str | None:
        """The key from the environment; a named but unset variable is a configuration error."""
        if not self.api_key_env:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ConfigError(f"{source}: targets.{self.name}.api_key_env: environment variable "
                              f"{self.api_key_env} is not set")
        return value


class Budget(_Strict):
    max_requests: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1, description="input plus output tokens, as reported")


class RunnerConfig(_Strict):
    max_retries: int = Field(3, ge=0)
    backoff_base: float = Field(0.5, gt=0, description="first retry delay in seconds; doubles each time")
    backoff_max: float = Field(30.0, gt=0)
    retry_after_max: float = Field(120.0, gt=0, description="a longer retry-after is not waited for")
    error_rate_ceiling: float = Field(0.5, ge=0, le=1,
                                      description="a run whose final error share is above this exits 3")
    budget: Budget = Field(default_factory=Budget)
    max_output_chars: int = Field(65536, ge=0, description="output text stored per sample")
    conformance: Literal["all", "off"] = "all"
    progress: bool = True
    lease_seconds: float = Field(600.0, ge=1, description="a running run renews its lease every tenth of "
                                 "this; a run whose lease expired is marked interrupted (prober.run.lease)")


class StoreConfig(_Strict):
    url: str = "sqlite:///prober.db"


Comparator = Literal["<", "<=", ">", ">="]


class SloRule(_Strict):
    """`[[slo]]`: the healthy condition `metric <comparator> threshold`; the rule breaks when it is false.

    A metric row matches when its name is `metric`, its labels include every `labels` entry, and
    `target` / `suite` (when set) name its target and its run's suite or its probe (so that
    suite = "latency" also covers the latency metrics of a nightly run). It fires after `for`
    consecutive matching runs break, and resolves on the first matching run that holds.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1)
    metric: str = Field(min_length=1)
    suite: str | None = None
    target: str | None = None
    labels: dict[str, Any] = Field(default_factory=dict, description="e.g. { concurrency = 16 }")
    comparator: Comparator = "<="
    threshold: float
    for_runs: int = Field(1, ge=1, alias="for", description="consecutive breaking runs before it fires")
    severity: Literal["warning", "critical"] = "warning"
    description: str = ""


class SinkConfig(_Strict):
    """`[[sinks]]`: where alerts go. Secrets (the HMAC key, a Slack URL) come from environment variables."""

    kind: Literal["webhook", "slack", "alertmanager"]
    name: str = Field("", description="unique; defaults to the kind")
    url: str | None = Field(None, description="webhook URL, Slack incoming-webhook URL, or Alertmanager base URL")
    url_env: str | None = Field(None, description="environment variable holding the URL (Slack URLs are secrets)")
    secret_env: str | None = Field(None, description="webhook only: variable holding the HMAC-SHA256 secret")
    timeout: float = Field(10.0, gt=0, description="seconds per delivery attempt")
    hold_hours: float = Field(26.0, gt=0, description="alertmanager only: endsAt of a firing alert, "
                                                      "renewed by every run while it keeps firing")

    @model_validator(mode="after")
    def _check(self) -> SinkConfig:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("set exactly one of url and url_env")
        if self.kind == "webhook" and not self.secret_env:
            raise ValueError("a webhook sink needs secret_env (the variable holding its HMAC secret)")
        if self.kind != "webhook" and self.secret_env:
            raise ValueError("secret_env is for kind = \"webhook\" only")
        self.name = self.name or self.kind
        return self

    def resolved_url(self, source: str) -> str:
        if self.url is not None:
            return self.url
        value = os.environ.get(self.url_env or "")
        if not value:
            raise ConfigError(f"{source}: sinks.{self.name}.url_env: environment variable {self.url_env} is not set")
        return value

    def secret(self, source: str) -> bytes | None:
        """The HMAC secret, read from the environment only (never stored, logged or reported)."""
        if not self.secret_env:
            return None
        value = os.environ.get(self.secret_env)
        if not value:
            raise ConfigError(f"{source}: sinks.{self.name}.secret_env: environment variable "
                              f"{self.secret_env} is not set")
        return value.encode()


# Nights a drift alert stays open on a level that persists before it becomes the new normal.
DEFAULT_NEW_NORMAL_NIGHTS = 14


class DriftConfig(_Strict):
    """`[drift]`: each run against the previous complete runs of the same suite and target."""

    enabled: bool = True
    baseline_runs: int = Field(56, ge=1, description="previous comparable runs in the baseline window")
    min_baseline_runs: int = Field(7, ge=1, description="fewer comparable runs than this: no drift test")
    # The page budget per target, split evenly over the night's tests (Bonferroni), so that quiet
    # nights page at most this often whatever the number of metrics.
    false_pages_per_90_nights: float = Field(1.0, gt=0, lt=90, description="drift pages per target "
                                             "per 90 quiet nights")
    # The smallest change worth an alert, per metric kind ("proportion": absolute difference of
    # shares; "latency": relative change of the median; "paired": change of the paired accuracy
    # difference) or per metric name, which wins over its kind.
    min_effect: dict[str, float] = Field(default_factory=dict)
    # A regression that persists stays one open alert; after this many nights prober sends one
    # "new normal" notice and re-baselines the metric on the nights since it moved.
    new_normal_nights: int = Field(DEFAULT_NEW_NORMAL_NIGHTS, ge=1, description="nights a drift alert stays "
                                   "open on a persisting level before it is the new normal")

    @field_validator("min_effect")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for key, effect in value.items():
            if effect < 0:
                raise ValueError(f"min_effect.{key} must be >= 0")
        return value


# A site or batch name is stored, shown and put in file names and URLs: a short safe word.
_PLACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]{0,99}")
_PLACE_RULE = "letters, digits and . _ : + -, starting with a letter or digit, at most 100 characters"
SITE_ENV = "PROBER_SITE"
BATCH_ENV = "PROBER_BATCH"


def check_place_name(value: str, where: str) -> str:
    """A site or batch name, or ConfigError naming where it came from."""
    if not _PLACE_NAME.fullmatch(value):
        raise ConfigError(f"{where}: {value!r} is not a usable name ({_PLACE_RULE})")
    return value


class RetentionConfig(_Strict):
    """`[retention]`: what `prober prune` drops when run without flags. Runs and metrics are kept
    for ever; raw samples are most of a store's size (docs/operations.md, "Retention")."""

    samples_older_than: str | None = Field("14d", description="drop the samples of runs older than this "
                                           "(e.g. 14d, 8w); unset keeps them")
    outputs_older_than: str | None = Field(None, description="clear the output text of samples older than "
                                           "this; unset keeps it")

    @field_validator("samples_older_than", "outputs_older_than")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) is None:
            raise ValueError(f"{value!r} is not a duration; expected e.g. {DURATION_EXAMPLES}")
        return value


class ProberConfig(_Strict):
    targets: dict[str, TargetConfig] = Field(default_factory=dict)
    site: str | None = Field(None, description="where this prober probes from; PROBER_SITE wins; default: "
                             "the first label of the host name")
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    suite_paths: list[str] = Field(default_factory=list, description="directories searched before the built-ins")
    slo: list[SloRule] = Field(default_factory=list)
    sinks: list[SinkConfig] = Field(default_factory=list)
    drift: DriftConfig = Field(default_factory=DriftConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    source: str = Field("<built-in defaults>", exclude=True)

    @field_validator("site")
    @classmethod
    def _usable_site(cls, site: str | None) -> str | None:
        if site is not None and not _PLACE_NAME.fullmatch(site):
            raise ValueError(_PLACE_RULE)
        return site

    @model_validator(mode="after")
    def _name_targets(self) -> ProberConfig:
        for name, target in self.targets.items():
            target.name = name
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> ProberConfig:
        for table, names in (("slo", [r.name for r in self.slo]), ("sinks", [s.name for s in self.sinks])):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"{table}: names must be unique (set name = ...); repeated: {', '.join(duplicates)}")
        return self

    def target(self, name: str) -> TargetConfig:
        try:
            return self.targets[name]
        except KeyError:
            known = ", ".join(sorted(self.targets)) or "none"
            hint = ""
            if name in default_config().targets:
                # `prober init` writes the built-in targets commented out: say how to get this one back.
                hint = f"; it is built in: uncomment [targets.{name}] in {self.source}"
            raise ConfigError(f"{self.source}: unknown target {name!r} (configured: {known}){hint}") from None

    def run_site(self, host: str) -> str:
        """The site a run records: $PROBER_SITE, else `site` in the file, else the host's first label.
        The environment wins so that one config file (a ConfigMap) serves every site, each setting
        its own variable."""
        from_env = os.environ.get(SITE_ENV)
        if from_env:
            return check_place_name(from_env, f"environment variable {SITE_ENV}")
        return self.site or default_site(host)

    def hash(self) -> str:
        """A stable hash of the effective configuration, stored with each run."""
        return model_hash(self)


def model_hash(model: BaseModel) -> str:
    """A stable short hash of a configuration model (secrets are never in it: only variable names)."""
    blob = json.dumps(model.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# llama-server's documented behaviour: it answers errors on /v1/messages in OpenAI's shape (a
# `code`/`message`/`type` object, not Anthropic's ErrorResponse), there and in its stream error
# events. (It also drops `output_config` on /v1/messages; that finding, structured_output_ignored,
# is not listed: on /v1/chat/completions the same server honours response_format, and a change
# there must still show.) Codes of the other protocol never apply (prober.core.findings.applies).
LOCAL_KNOWN = ["anthropic_error_body_shape"]


def default_config() -> ProberConfig:
    """What applies with no config file: the local llama-server and the in-process emulator,
    once per protocol (penalties exist only on the OpenAI protocol, so the penalty suite needs
    emulator-openai)."""
    return ProberConfig.model_validate({
        "targets": {
            "local": {"protocol": "openai", "base_url": f"http://127.0.0.1:{LOCAL_PORT}",
                      "model": "SmolLM2-135M-Instruct", "max_concurrency": 64, "known": LOCAL_KNOWN},
            "emulator": {"protocol": "anthropic", "model": "emulator-1", "emulator": {}},
            "emulator-openai": {"protocol": "openai", "model": "emulator-1", "emulator": {}},
            # The same servers through the OpenAI Responses API (POST /v1/responses).
            "local-responses": {"protocol": "openai-responses", "base_url": f"http://127.0.0.1:{LOCAL_PORT}",
                                "model": "SmolLM2-135M-Instruct", "max_concurrency": 64},
            "emulator-responses": {"protocol": "openai-responses", "model": "emulator-1", "emulator": {}},
        },
    })


def load_config(path: str | os.PathLike[str] | None = None) -> ProberConfig:
    """Load and validate a config file; with no path, ./prober.toml if present, else the defaults."""
    if path is None:
        candidate = Path(DEFAULT_CONFIG_NAME)
        if not candidate.exists():
            return default_config()
        path = candidate
    path = Path(path)
    source = str(path)
    raw = read_toml(path)
    try:
        config = ProberConfig.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(source, exc) from None
    config.source = source
    # A relative suite path means "next to this config file", so cron can run from any directory.
    config.suite_paths = [str(path.parent / Path(p).expanduser()) for p in config.suite_paths]
    return config
