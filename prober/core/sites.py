"""Where a run says it probed from, and when that name cannot be trusted to stay put.

A run's site keys its drift baseline (prober/alerting/baseline.py compares runs of one site). Left
unset, it is the host name's first label; a container or a Kubernetes pod gets a new host name on
every start, so every run would be a new site, no baseline would ever form and `for = 2` rules
would never fire. Such names are recognisable: Docker names a container by the first 12 hex
digits of its id, and Kubernetes names a pod after its controller plus random suffixes (a
Deployment's `<name>-<pod-template-hash>-<5 chars>`, a CronJob's `<name>-<minutes since epoch>-<5
chars>`, a bare Job's `<name>-<5 chars>`).
"""

from __future__ import annotations

import os
import re

from prober.core.config import SITE_ENV, ProberConfig
from prober.core.records import default_site

# Kubernetes' random suffixes are drawn from "bcdfghjklmnpqrstvwxz2456789" (no vowels, no 0/1/3),
# which keeps this from matching ordinary names such as "probe-fra-eu".
_K8S_CHARS = "[bcdfghjklmnpqrstvwxz2456789]"
_GENERATED = (
    re.compile(r"[0-9a-f]{12}|[0-9a-f]{64}"),                                  # Docker container id
    re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),   # a UUID
    re.compile(rf".+-{_K8S_CHARS}{{8,10}}-{_K8S_CHARS}{{5}}"),                    # Deployment pod
    re.compile(rf".+-\d{{8}}-{_K8S_CHARS}{{5}}"),                                 # CronJob pod
    re.compile(rf".+-{_K8S_CHARS}{{5}}"),                                        # Job pod
)


def looks_generated(host: str) -> bool:
    """Whether a host name's first label looks made up per container or pod."""
    label = default_site(host).lower()
    # A Job pod's suffix needs a digit or an unusual consonant run to count: "probe-north" is a name.
    return any(pattern.fullmatch(label) for pattern in _GENERATED[:4]) or (
        bool(_GENERATED[4].fullmatch(label)) and any(ch.isdigit() for ch in label.rsplit("-", 1)[1]))


def site_warning(config: ProberConfig, host: str) -> str | None:
    """The warning a run prints when its site comes from a host name that will not stay put."""
    if os.environ.get(SITE_ENV) or config.site:
        return None
    if not looks_generated(host):
        return None
    return (f"site {default_site(host)!s} comes from a generated host name (a container's or a pod's): every "
            f"run would be a new site with no drift baseline; set {SITE_ENV} (or site = ... in "
            f"{config.source}) to a name that stays put")
