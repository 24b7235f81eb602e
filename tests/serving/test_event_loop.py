"""The serving loop: uvloop by default, asyncio's own on request, busy-polling or not, and
the same answers on every one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
import pytest

from tests.serving.serving_harness import MakeServer, server_config
from tether.policy.engine import PolicyEngine
from tether.serving import event_loop
from tether.serving.client import PolicyClient
from tether.serving.config import ServerConfig
from tether.spec import RobotSpec

uvloop = pytest.importorskip("uvloop")


def _made(kind: event_loop.EventLoopKind) -> str:
    loop = event_loop.loop_factory(kind)()
    try:
        return event_loop.loop_name(loop)
    finally:
        loop.close()


def test_auto_is_uvloop() -> None:
    assert _made("auto") == "uvloop"
    assert _made("uvloop") == "uvloop"
    assert _made("asyncio") == "asyncio"
    assert ServerConfig().event_loop == "auto"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(event_loop, "_uvloop", lambda: None)
    assert _made("auto") == "asyncio"
    with pytest.raises(event_loop.EventLoopUnavailable, match="uvloop is not installed"):
        event_loop.loop_factory("uvloop")

    async def main() -> None:
        raise AssertionError("never runs")

    coro = main()
    with pytest.raises(event_loop.EventLoopUnavailable):
        event_loop.run(coro, "uvloop")
    assert coro.cr_frame is None  # closed, not left for a "never awaited" warning


def test_unknown_loops_are_refused_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="event_loop"):
        ServerConfig(event_loop="trio")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected one of"):
        event_loop.loop_factory("trio")  # type: ignore[arg-type]


def test_run_runs_the_coroutine_on_the_chosen_loop() -> None:
    async def which() -> str:
        return event_loop.loop_name(asyncio.get_running_loop())

    assert event_loop.run(which()) == "uvloop"
    assert event_loop.run(which(), "asyncio") == "asyncio"


def test_every_loop_serves_the_same_answers(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    rng = np.random.default_rng(3)
    observations = [rng.uniform(-0.2, 0.2, arm.obs_dim).astype(np.float32) for _ in range(20)]
    answers = []
    configs = [
        server_config(),
        server_config(event_loop="asyncio"),
        # Steps of one robot come well within 0.1 s of each other: both loops spin.
        server_config(busy_poll_us=100_000.0),
        server_config(event_loop="asyncio", busy_poll_us=100_000.0),
        server_config(busy_poll_us=0.0),
    ]
    for config in configs:
        running = make_server(config, engine=engine)
        name = event_loop.loop_name(running.loop)
        assert name == ("asyncio" if config.event_loop == "asyncio" else "uvloop")
        with PolicyClient(running.address) as client:
            session = client.session(arm, robot_id="arm-1", control_deadline_s=5.0)
            answers.append([session.step(o, deterministic=True).action for o in observations])
            session.close()
        poll = running.server.batcher.busy_poll
        # Busy polling ran where steps came within its budget (each step touched it), and
        # is not there where it is off.
        assert (poll is None) == (config.busy_poll_us == 0)
        if config.busy_poll_us == 100_000.0:
            assert poll is not None
            assert poll.spins > 0
        running.stop()
    for first, *others in zip(*answers, strict=True):
        for other in others:
            np.testing.assert_array_equal(first, other)


def test_a_second_robot_disarms_busy_polling(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    """Busy polling serves one robot's fast loop: while two Control sessions are open no
    step starts a spin (at 50 Hz, spins between several robots' steps made every step
    slower), and it is armed again once one of them closes."""
    running = make_server(server_config(busy_poll_us=100_000.0), engine=engine)
    obs = np.zeros(arm.obs_dim, dtype=np.float32)

    def wait_for(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 5.0
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)

    with PolicyClient(running.address) as client:
        one = client.session(arm, robot_id="arm-1", control_deadline_s=5.0)
        for _ in range(3):
            one.step(obs, deterministic=True)
        poll = running.server.batcher.busy_poll
        assert poll is not None
        assert poll.armed
        assert poll.spins > 0
        two = client.session(arm, robot_id="arm-2", control_deadline_s=5.0)
        wait_for(lambda: not poll.spinning)  # the first robot's spin ran out
        before = poll.spins
        for _ in range(5):
            one.step(obs, deterministic=True)
            two.step(obs, deterministic=True)
        assert not poll.armed
        assert poll.spins == before
        two.close()
        wait_for(lambda: poll.armed)
        assert poll.armed
        for _ in range(3):
            one.step(obs, deterministic=True)
        assert poll.spins > before
        one.close()
    running.stop()
