"""Admission: the token bucket's bound (property-tested), per-client isolation, memory."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tether.serving.admission import Admission, TokenBucket, client_of
from tether.serving.config import AdmissionConfig
from tether.serving.errors import AdmissionRefused, DuplicateSession


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.5, 1000),
    burst=st.floats(1, 50),
    gaps=st.lists(st.floats(0, 0.5), min_size=1, max_size=200),
)
def test_bucket_admits_at_most_burst_plus_rate_times_window(
    rate: float, burst: float, gaps: list[float]
) -> None:
    bucket = TokenBucket(rate, burst, now=0.0)
    t = 0.0
    admitted: list[float] = []
    for gap in gaps:
        t += gap
        if bucket.take(t):
            admitted.append(t)
        assert 0.0 <= bucket.tokens <= burst
    # Over every window [a, b] of admissions: count <= burst + rate * (b - a).
    for i in range(len(admitted)):
        for j in range(i, len(admitted)):
            window = admitted[j] - admitted[i]
            assert j - i + 1 <= burst + rate * window + 1e-6


def test_clock_going_backwards_mints_no_tokens() -> None:
    bucket = TokenBucket(10.0, 1.0, now=5.0)
    assert bucket.take(5.0)
    assert not bucket.take(1.0)
    assert not bucket.take(5.0)


def test_rate_defaults_to_headroom_times_control_rate() -> None:
    admission = Admission(AdmissionConfig(), control_period_s=0.02)
    assert admission.rate_hz == pytest.approx(2.0 / 0.02)


def test_one_runaway_client_does_not_starve_another() -> None:
    admission = Admission(AdmissionConfig(rate_limit_hz=10.0, burst_s=0.2), control_period_s=0.1)
    admission.admit("greedy", now=0.0)
    admission.admit("greedy", now=0.0)
    with pytest.raises(AdmissionRefused, match="'greedy' is over its rate limit of 10"):
        admission.admit("greedy", now=0.0)
    admission.admit("polite", now=0.0)  # its own bucket is full
    admission.admit("greedy", now=0.2)  # refilled after 0.1 s per token


def test_zero_rate_disables_the_limit() -> None:
    admission = Admission(AdmissionConfig(rate_limit_hz=0.0), control_period_s=0.01)
    for _ in range(1000):
        admission.admit("c", now=0.0)


def test_memory_guard_refuses_over_the_rss_limit_and_names_it() -> None:
    admission = Admission(
        AdmissionConfig(rate_limit_hz=0.0, max_rss_bytes=1), control_period_s=0.01
    )
    with pytest.raises(AdmissionRefused, match=r"RSS \d+ bytes.*max_rss_bytes"):
        admission.admit("c", now=0.0)
    roomy = Admission(
        AdmissionConfig(rate_limit_hz=0.0, max_rss_bytes=1 << 50), control_period_s=0.01
    )
    roomy.admit("c", now=0.0)


def test_bucket_table_is_bounded() -> None:
    admission = Admission(AdmissionConfig(rate_limit_hz=1.0), control_period_s=0.1)
    admission.max_clients = 5
    for i in range(50):
        admission.admit(f"client-{i}", now=0.0)
    assert len(admission._buckets) == 5


def test_a_client_is_its_peers_host_whatever_port_it_connects_from() -> None:
    assert client_of("ipv4:10.0.0.5:51234") == "ipv4:10.0.0.5"
    assert client_of("ipv6:[::1]:5000") == "ipv6:[::1]"
    assert client_of("unix:/tmp/sock") == "unix:/tmp/sock"


def test_session_bounds_are_released_when_a_session_closes() -> None:
    admission = Admission(
        AdmissionConfig(max_sessions=2, max_sessions_per_client=1), control_period_s=0.02
    )
    a = admission.open_session("s1", "arm-1", "ipv4:10.0.0.1:1000")
    with pytest.raises(AdmissionRefused, match="max_sessions_per_client"):
        admission.open_session("s2", "arm-2", "ipv4:10.0.0.1:1001")  # same host, new port
    with pytest.raises(DuplicateSession, match="'arm-1' already has a live session"):
        admission.open_session("s3", "arm-1", "ipv4:10.0.0.9:1000")
    admission.open_session("s4", "arm-2", "ipv4:10.0.0.2:1000")
    with pytest.raises(AdmissionRefused, match=r"admission\.max_sessions\)"):
        admission.open_session("s5", "arm-3", "ipv4:10.0.0.3:1000")
    admission.close_session(a)
    admission.close_session(a)  # idempotent
    assert admission.open_sessions == 1
    admission.open_session("s6", "arm-1", "ipv4:10.0.0.1:1002")
