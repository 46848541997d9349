import random

import pytest

from prober.core.records import Exchange, utcnow
from prober.run.retry import retry_delay, server_retry_after, should_retry

pytestmark = pytest.mark.unit


def _exchange(error_type, message="", headers=None):
    return Exchange(protocol="openai", url="http://x", request_body={}, request_headers={},
                    started_at=utcnow(), start_ns=0, error_type=error_type, error_message=message,
                    response_headers=headers or {})


def test_retryable_errors_are_retried_until_the_limit():
    assert should_retry(_exchange("rate_limited"), attempt=1, max_retries=3)
    assert should_retry(_exchange("connection"), attempt=3, max_retries=3)
    assert not should_retry(_exchange("connection"), attempt=4, max_retries=3)


def test_client_errors_and_exhausted_quota_are_not_retried():
    assert not should_retry(_exchange("bad_request"), 1, 3)
    assert not should_retry(_exchange("auth"), 1, 3)
    assert not should_retry(_exchange(None), 1, 3)
    assert not should_retry(_exchange("rate_limited", "You exceeded your current quota (insufficient_quota)"), 1, 3)
    assert not should_retry(_exchange("server_error", headers={"x-should-retry": "false"}), 1, 3)


def test_retry_after_headers_win_over_backoff():
    assert server_retry_after({"retry-after": "2"}) == 2.0
    assert server_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert server_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_delay(1, {"retry-after": "3"}, base=0.5, cap=8, retry_after_max=60) == 3.0
    assert retry_delay(1, {"retry-after": "600"}, base=0.5, cap=8, retry_after_max=60) is None


def test_backoff_doubles_and_is_capped():
    rng = random.Random(1)
    delays = [retry_delay(a, {}, base=0.5, cap=4, retry_after_max=60, rng=rng) for a in (1, 2, 3, 4, 5)]
    assert 0.25 <= delays[0] <= 0.5
    assert 0.5 <= delays[1] <= 1.0
    assert 1.0 <= delays[2] <= 2.0
    assert all(2.0 <= d <= 4.0 for d in delays[3:])


def test_backoff_is_equal_jitter_uniform_over_the_upper_half_of_the_ceiling():
    # What the module docstring promises: uniform between half the ceiling and the ceiling (equal
    # jitter), not from 0 (full jitter). Kolmogorov-Smirnov against both laws, from scipy.
    from scipy.stats import kstest, uniform

    rng = random.Random(7)
    delays = [retry_delay(3, {}, base=0.5, cap=8, retry_after_max=60, rng=rng) for _ in range(4000)]
    assert min(delays) >= 1.0 and max(delays) <= 2.0
    assert kstest(delays, uniform(loc=1.0, scale=1.0).cdf).pvalue > 0.01
    assert kstest(delays, uniform(loc=0.0, scale=2.0).cdf).pvalue < 1e-6
