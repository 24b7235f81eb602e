"""Discovery: a ``dns:`` target, round-robin and client-side health checking.

Three real servers on 127.0.0.1-3 share one port; a DNS server on loopback answers the
fleet's name with all three addresses, as a Kubernetes headless Service does. The
session's server is killed mid-run (its gRPC server stopped with no grace: open
streams aborted, connections closed): every step still answers within the watchdog
deadline, with backups meanwhile, and the session moves on to a surviving server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np

from tests.deploy.dns_stub import FleetDns
from tests.deploy.fleet import ADDRESSES, fleet
from tests.serving.serving_harness import RunningServer
from tether.serving.client import (
    ActionResult,
    AsyncPolicyClient,
    ClientOptions,
    ControlSession,
    PolicyClient,
)
from tether.spec import RobotSpec

FLEET = "tether-fleet.test"
DEADLINE_S = 0.25  # generous for a loaded 2-core machine; the point is the bound
SLACK_S = 0.15  # a step may overrun its deadline by scheduling noise, never by the hang
HANG_S = 2.5 * DEADLINE_S  # the hung server answers nothing for two control deadlines
OPTIONS = ClientOptions(retry_initial_backoff_s=0.02, retry_max_backoff_s=0.2)


def timed_step(session: ControlSession, obs: np.ndarray) -> tuple[ActionResult, float]:
    started = time.monotonic()
    result = session.step(obs)
    return result, time.monotonic() - started


def open_sessions(servers: list[RunningServer]) -> list[int]:
    return [int(s.metric("tether_sessions_open")) for s in servers]


def served_requests(server: RunningServer) -> float:
    samples = server.server.metrics.registry.collect()
    return sum(
        sample.value
        for family in samples
        if family.name == "tether_requests"
        for sample in family.samples
        if sample.name == "tether_requests_total"
    )


def test_a_dns_target_uses_round_robin_with_health_checking() -> None:
    config = OPTIONS.service_config(f"dns:///{FLEET}:50051")
    assert '"round_robin"' in config
    assert '"serviceName": "tether.v1.PolicyService"' in config
    assert "round_robin" not in OPTIONS.service_config("127.0.0.1:50051")  # pick_first
    assert "round_robin" in ClientOptions(load_balancing="round_robin").service_config("h:1")


def test_session_fails_over_when_its_server_is_killed(bundle_path: Path, arm: RobotSpec) -> None:
    obs = np.zeros(arm.obs_dim, dtype=np.float32)
    with (
        fleet(bundle_path, arm) as (port, servers),
        FleetDns(FLEET, ADDRESSES) as dns,
        PolicyClient(dns.target(port), options=OPTIONS) as client,
        client.session(arm, robot_id="arm-0", control_deadline_s=DEADLINE_S) as session,
    ):
        assert ("tether-fleet.test.", "A") in dns.queries
        for _ in range(10):
            assert not session.step(obs).from_watchdog
        victim = open_sessions(servers).index(1)

        # The session's server hangs (its event loop blocked): the robot gets backups...
        servers[victim].loop.call_soon_threadsafe(time.sleep, HANG_S)
        hung = [timed_step(session, obs) for _ in range(2)]
        assert all(r.from_watchdog and "deadline" in r.reason for r, _ in hung)
        # ...then it is killed (as a liveness probe would): streams aborted, port closed.
        servers[victim].call(servers[victim].server.stop(grace_s=0))
        killed_at = time.monotonic()
        after = []
        for _ in range(200):  # bounded: the session must be back long before
            after.append(timed_step(session, obs))
            if not after[-1][0].from_watchdog:
                break
        back_after_s = time.monotonic() - killed_at
        results = [r for r, _ in hung + after]
        timeline = [(round(t, 3), r.reason[:60]) for r, t in hung + after]
        longest_step_s = max(s for _, s in hung + after)

        assert not results[-1].from_watchdog, [r.reason for r in results]
        assert longest_step_s <= DEADLINE_S + SLACK_S, timeline  # never waited past it
        assert back_after_s <= 2 * DEADLINE_S + SLACK_S
        assert session.reopens == 1
        survivors = [n for i, n in enumerate(open_sessions(servers)) if i != victim]
        assert sorted(survivors) == [0, 1]  # on exactly one surviving server
        for _ in range(10):
            assert not session.step(obs).from_watchdog

        for i, running in enumerate(servers):  # the whole fleet goes: backups only
            if i != victim:
                running.call(running.server.stop(grace_s=0))
        alone = [timed_step(session, obs) for _ in range(20)]
        assert all(r.from_watchdog and np.all(np.isfinite(r.action)) for r, _ in alone)
        assert max(s for _, s in alone) <= DEADLINE_S + SLACK_S


def test_a_server_not_serving_gets_no_calls(bundle_path: Path, arm: RobotSpec) -> None:
    obs = np.zeros(arm.obs_dim, dtype=np.float32)
    with fleet(bundle_path, arm) as (port, servers), FleetDns(FLEET, ADDRESSES) as dns:
        sick = servers[1]
        sick.call(sick.server.set_engine(None))  # health NOT_SERVING, process still up
        with PolicyClient(dns.target(port), options=OPTIONS) as client:
            for _ in range(100):  # bounded: round-robin reaches both healthy ones soon
                client.get_action(obs, deterministic=True)
                healthy = [served_requests(s) for s in (servers[0], servers[2])]
                if min(healthy) >= 3:
                    break
            assert min(healthy) >= 3
            assert served_requests(sick) == 0


def test_async_session_fails_over_too(bundle_path: Path, arm: RobotSpec) -> None:
    obs = np.zeros(arm.obs_dim, dtype=np.float32)

    async def drive(target: str, servers: list[RunningServer]) -> list[ActionResult]:
        async with AsyncPolicyClient(target, options=OPTIONS) as client:
            session = await client.session(arm, robot_id="arm-1", control_deadline_s=DEADLINE_S)
            async with session:
                assert not (await session.step(obs)).from_watchdog
                victim = servers[open_sessions(servers).index(1)]
                await asyncio.to_thread(victim.call, victim.server.stop(grace_s=0))
                results = []
                for _ in range(200):  # bounded
                    results.append(await session.step(obs))
                    if not results[-1].from_watchdog:
                        break
                assert session.reopens == 1
                return results

    with fleet(bundle_path, arm) as (port, servers), FleetDns(FLEET, ADDRESSES) as dns:
        results = asyncio.run(drive(dns.target(port), servers))
    assert not results[-1].from_watchdog, [r.reason for r in results]
    assert len(results) <= 3
