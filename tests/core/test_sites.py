"""Which host names look generated per container or pod (prober/core/sites.py)."""

import pytest

from prober.core.config import ProberConfig
from prober.core.sites import looks_generated, site_warning

pytestmark = pytest.mark.unit

GENERATED = ["3f4e5d6c7b8a",                                   # docker run: the container id
             "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
             "prober-nightly-29423520-x7k2p",                  # a CronJob's pod
             "prober-7d9f8b6c5d-x2kqz",                        # a Deployment's pod
             "prober-x7k2p",                                   # a Job's pod
             "c2b7e1f0-1d2e-4a5b-9c8d-112233445566.svc.local"]
STABLE = ["probe-3.fra.example.net", "probe-north", "ci-runner", "laptop", "web-0", "prober-fra-2",
          "prober-nightly", "build-host-01"]


@pytest.mark.parametrize("host", GENERATED)
def test_container_and_pod_names_look_generated(host):
    assert looks_generated(host)


@pytest.mark.parametrize("host", STABLE)
def test_names_people_give_do_not(host):
    assert not looks_generated(host)


def test_the_warning_names_the_variable_and_stays_quiet_once_a_site_is_set(monkeypatch):
    monkeypatch.delenv("PROBER_SITE", raising=False)
    warning = site_warning(ProberConfig(), "prober-nightly-29423520-x7k2p")
    assert warning is not None and "PROBER_SITE" in warning and "prober-nightly-29423520-x7k2p" in warning
    assert site_warning(ProberConfig(), "probe-3.fra.example.net") is None
    assert site_warning(ProberConfig.model_validate({"site": "fra"}), "3f4e5d6c7b8a") is None
    monkeypatch.setenv("PROBER_SITE", "fra")
    assert site_warning(ProberConfig(), "3f4e5d6c7b8a") is None
