"""The rollback monitor's check: the last-known-good served beside live before a rollback.

A small world drives the real registry, router and monitor: each episode is routed as
the server routes it and ends with an outcome drawn from what its version does on its
task under the arm's current dynamics (nominal or drifted).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.versions.builders import derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.versions.records import EpisodeOutcome, VersionSource, VersionState
from tether.versions.registry import ModelRegistry
from tether.versions.rollback import (
    RollbackCheckConfig,
    RollbackConfig,
    RollbackEvent,
    RollbackMonitor,
)
from tether.versions.routing import Role, TrafficRouter

# (success probability, mean final distance in m) of a version on the arm
Skill = Callable[[int, bool], tuple[float, float]]


def alike(version: int, drifted: bool) -> tuple[float, float]:
    """Every version does the same: well on the nominal arm, badly on the drifted one."""
    return (0.3, 0.12) if drifted else (0.95, 0.02)


def regressed(version: int, drifted: bool) -> tuple[float, float]:
    """Version 2 is far worse than version 1 under the drift (a real regression)."""
    if not drifted:
        return 0.95, 0.02
    return (0.0, 0.30) if version == 2 else (0.9, 0.03)


class World:
    """Robots that run tasks ``0..tasks-1`` in turn, each twice in a row (as ``tether run``)."""

    def __init__(
        self,
        reg: ModelRegistry[PolicyEngine],
        router: TrafficRouter,
        monitor: RollbackMonitor,
        skill: Skill,
        *,
        tasks: int = 10,
        seed: int = 0,
    ) -> None:
        self.reg, self.router, self.monitor, self.skill = reg, router, monitor, skill
        self.tasks = tasks
        self.rng = np.random.default_rng(seed)
        self.k = 0
        self.drifted = False
        self.served: list[EpisodeOutcome] = []
        self.events: list[RollbackEvent] = []

    def episode(self, task: str | None = None) -> EpisodeOutcome:
        k, self.k = self.k, self.k + 1
        task = f"task-{(k // 2) % self.tasks}" if task is None else task
        decision = self.router.route(f"robot-{k % 2}", f"ep-{k}", task)
        live = self.reg.live()
        assert live is not None
        version = live.id if decision.version is None else decision.version
        p, distance = self.skill(version, self.drifted)
        outcome = EpisodeOutcome(
            version=version,
            episode_return=float(self.rng.normal(-50.0, 5.0)),
            success=bool(self.rng.random() < p),
            steps=200,
            interventions=int(self.rng.binomial(200, 0.01)),
            backups=0,
            tightened=decision.tightened,
            trial=decision.trial,
            task_id=task,
            final_distance_m=abs(float(self.rng.normal(distance, 0.01))),
        )
        self.served.append(outcome)
        self.router.forget(f"robot-{k % 2}")  # the episode is over
        fired = self.monitor.add(outcome)
        if fired is not None:
            self.events.append(fired)
        return outcome

    def run(self, n: int) -> None:
        for _ in range(n):
            self.episode()

    def drift(self, then: int = 0) -> World:
        """The arm drifts; ``then`` episodes follow."""
        self.drifted = True
        self.run(then)
        return self


def _world(
    base: PolicyBundle, tmp_path: Path, skill: Skill, check: RollbackCheckConfig, *, tasks: int = 10
) -> World:
    """Version 1 live on the nominal arm for a full window, then version 2 promoted."""
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(make_engine(base), source=VersionSource.BUNDLE)
    reg.register(
        make_engine(derived(base, tmp_path / "v2", 2, "v2", nudged)), source=VersionSource.LEARNER
    )
    router = TrafficRouter(reg)
    config = RollbackConfig(window_episodes=15, min_episodes=8, sustain_episodes=3, check=check)
    world = World(reg, router, RollbackMonitor(reg, config, router=router), skill, tasks=tasks)
    world.run(15)
    reg.promote(2, "gate passed")
    world.run(10)  # version 2 on the nominal arm: as good as version 1 was
    assert not world.events
    return world


def _candidate_in_canary(world: World, base: PolicyBundle, tmp_path: Path) -> None:
    """A learner's version 3, through the gate's earlier stages: a canary may serve it."""
    world.reg.register(
        make_engine(derived(base, tmp_path / "v3", 3, "v3", nudged)), source=VersionSource.LEARNER
    )
    world.reg.transition(3, VersionState.CANARY, "shadow passed")


CHECKED = RollbackCheckConfig(pairs=6, fraction=0.5, max_episodes=60)


def test_a_drift_that_hurts_every_version_alike_is_checked_and_not_rolled_back(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    world = _world(base_bundle, tmp_path, alike, CHECKED).drift(120)
    assert world.events == []
    live = world.reg.live()
    assert live is not None
    assert live.id == 2
    checks = world.monitor.checks
    assert checks
    assert not any(c.rolled_back for c in checks)
    first = checks[0]
    assert (first.live, first.last_known_good, first.pairs) == (2, 1, 6)
    # The check served version 1 again, beside live, on the same tasks and at the base limits.
    in_check = [o for o in world.served if o.experiment]
    assert {o.version for o in in_check} == {1, 2}
    assert not any(o.tightened for o in in_check)
    by_task: dict[str, list[int]] = {}
    for o in in_check:
        by_task.setdefault(o.task_id, []).append(o.version)
    paired = [vs for vs in by_task.values() if sorted(vs) == [1, 2]]
    assert len(paired) >= first.pairs
    assert len(by_task) - len(paired) <= 1  # a pair the verdict left open, at most
    # Live stays and the reference is re-based: one check for the drift, not one a window.
    assert len(checks) == 1
    assert world.router.check() is None


def test_without_the_check_the_same_drift_rolls_live_back(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    """The guard the test above holds: on the windows alone the drift reads as a regression."""
    world = _world(base_bundle, tmp_path, alike, RollbackCheckConfig(pairs=0)).drift(120)
    assert [(e.from_version, e.to_version) for e in world.events] == [(2, 1)]
    assert world.events[0].check_pairs == 0
    assert world.reg.get(2).state is VersionState.REJECTED


def test_a_real_regression_is_confirmed_by_the_check_and_rolled_back(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    world = _world(base_bundle, tmp_path, regressed, CHECKED).drift(120)
    assert len(world.events) == 1
    event = world.events[0]
    assert (event.from_version, event.to_version, event.check_pairs) == (2, 1, 6)
    assert "side by side on 6 task pairs" in event.describe()
    assert any(not m.passed for m in event.measurements)
    assert [c.rolled_back for c in world.monitor.checks] == [True]
    live = world.reg.live()
    assert live is not None
    assert live.id == 1
    assert world.router.check() is None  # the rollback ended the check


def test_a_check_whose_tasks_never_repeat_gives_way_to_the_windows(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    world = _world(base_bundle, tmp_path, regressed, CHECKED).drift()
    for k in range(200):  # every episode a new task: no pair ever closes
        world.episode(task=f"fresh-{k}")
        if world.events:
            break
    assert len(world.events) == 1
    assert world.events[0].check_pairs == 0  # the windows' numbers decided
    assert world.monitor.checks == []


def test_a_check_waits_for_a_running_canary_and_ignores_its_episodes(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    world = _world(base_bundle, tmp_path, alike, CHECKED)
    _candidate_in_canary(world, base_bundle, tmp_path)
    canary = world.router.start_canary(3, 0.25, 1.0)
    world.drift(60)
    assert world.router.check() is None  # the canary holds the share
    assert world.events == []
    assert world.monitor.checks == []
    assert any(o.trial == canary.trial for o in world.served)
    world.router.stop_canary()
    world.run(60)
    assert world.events == []
    assert [c.rolled_back for c in world.monitor.checks] == [False]
    assert all(o.trial != canary.trial for o in world.served[-40:])


def test_a_regression_is_rolled_back_while_canaries_keep_the_router_busy(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    """A learner that publishes often keeps a canary running 16 episodes in every 18 (as
    tether run's does, nearly all the time): live is served mostly as the canaries'
    control, and those episodes are what shows its regression."""
    world = _world(base_bundle, tmp_path, regressed, CHECKED)
    _candidate_in_canary(world, base_bundle, tmp_path)
    world.drifted = True
    for k in range(45):  # watching only live's own turns between canaries took 67
        if k % 18 == 0:
            world.router.start_canary(3, 0.5, 1.0)
        elif k % 18 == 16:
            world.router.stop_canary()
        world.episode()
        if world.events:
            break
    print("FIRED AT", k, [(o.version, o.trial) for o in world.served[25:]])
    assert [(e.from_version, e.to_version) for e in world.events] == [(2, 1)]
    assert world.events[0].check_pairs >= CHECKED.pairs  # confirmed side by side


def test_a_live_change_during_a_check_ends_it(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    world = _world(base_bundle, tmp_path, alike, CHECKED).drift()
    for _ in range(60):
        world.episode()
        if world.router.check() is not None:
            break
    share = world.router.check()
    assert share is not None
    assert share.arm is Role.CHECK
    assert share.version == 1
    world.reg.promote(1, "operator")  # the last-known-good made live by hand
    assert world.router.check() is None
    world.run(20)
    assert world.events == []
    assert world.monitor.checks == []


@pytest.mark.parametrize("pairs", [1, -1])
def test_a_check_needs_two_pairs_or_none(pairs: int) -> None:
    with pytest.raises(ValueError, match="pairs"):
        RollbackCheckConfig(pairs=pairs)


def test_a_last_known_good_unloaded_while_its_check_waits_is_never_served(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    world = _world(base_bundle, tmp_path, alike, CHECKED)
    reg = world.reg
    for v in (3, 4):
        reg.register(
            make_engine(derived(base_bundle, tmp_path / f"v{v}", v, f"v{v}", nudged)),
            source=VersionSource.LEARNER,
        )
    reg.promote(3, "gate passed")  # version 2 is the last-known-good, 1 retired before it
    world.run(15)
    reg.transition(4, VersionState.CANARY, "shadow passed")
    world.router.start_canary(4, 0.25, 1.0)
    world.drift(60)  # the alarm (3 against 2) waits for the canary
    reg.unload(2)  # an operator unloads that last-known-good meanwhile: 1 is it now
    world.router.stop_canary()
    world.run(80)
    assert all(o.version != 2 for o in world.served[-80:])
    assert world.events == []
    assert [(c.live, c.last_known_good) for c in world.monitor.checks] == [(3, 1)]


def test_a_check_whose_last_known_good_is_unloaded_midway_ends_without_a_rollback(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    world = _world(base_bundle, tmp_path, regressed, CHECKED).drift()
    for _ in range(60):
        world.episode()
        if world.router.check() is not None:
            break
    assert world.router.check() is not None
    world.reg.unload(1)  # the only last-known-good: nothing to roll back to, nor to check
    world.run(120)
    assert world.router.check() is None  # dropped, not left holding the router's share
    assert world.events == []
    assert world.monitor.checks == []
    live = world.reg.live()
    assert live is not None
    assert live.id == 2
