"""TrafficRouter: sticky A/B split per session, canary share sticky per episode, gating."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tests.versions.builders import derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.versions.errors import VersionError
from tether.versions.records import VersionSource, VersionState
from tether.versions.registry import ModelRegistry
from tether.versions.routing import (
    Role,
    RouteDecision,
    TrafficRouter,
    TrafficSplit,
    _pick,
    unit_hash,
)


def _setup(base: PolicyBundle, tmp_path: Path) -> tuple[ModelRegistry[PolicyEngine], TrafficRouter]:
    """Version 2 live, 1 retired (last-known-good), 3 a candidate."""
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(make_engine(base), source=VersionSource.BUNDLE)
    for i in (2, 3):
        b = derived(base, tmp_path / f"v{i}", i, f"v{i}", nudged)
        reg.register(make_engine(b), source=VersionSource.LEARNER)
    reg.promote(2, "test")
    return reg, TrafficRouter(reg)


def test_no_split_routes_everything_to_live(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    _, router = _setup(base_bundle, tmp_path)
    decision = router.route("robot-a", "ep-1")
    assert decision.version is None
    assert decision.role is Role.LIVE


def test_split_is_sticky_per_session_and_close_to_its_weights(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    _, router = _setup(base_bundle, tmp_path)
    router.set_split({1: 1.0, 2: 3.0})
    chosen = {}
    for s in range(2000):
        first = router.route(f"s{s}", "ep-0")
        for e in range(3):  # later episodes of the same session keep the version
            assert router.route(f"s{s}", f"ep-{e}") == first
        chosen[s] = first.version
    share_1 = sum(v == 1 for v in chosen.values()) / len(chosen)
    assert share_1 == pytest.approx(0.25, abs=0.04)
    # Sessions on version 1 are marked SPLIT; those on the live version 2 route to live.
    assert {router.route(f"s{s}", "x").role for s in range(50)} == {Role.SPLIT, Role.LIVE}


def test_changing_the_split_moves_only_sessions_whose_version_left(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    _, router = _setup(base_bundle, tmp_path)
    router.set_split({1: 1.0, 2: 1.0})
    before = {s: router.route(f"s{s}", "e").version for s in range(200)}
    router.set_split({1: 1.0, 2: 9.0})  # both stay in the split: nobody moves
    assert {s: router.route(f"s{s}", "e").version for s in range(200)} == before
    router.set_split({2: 1.0})  # version 1 left: its sessions move to 2 (live)
    assert all(router.route(f"s{s}", "e").version is None for s in range(200))


def test_split_refuses_ungated_versions_and_bad_weights(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    _, router = _setup(base_bundle, tmp_path)
    with pytest.raises(VersionError, match="candidate"):
        router.set_split({3: 1.0})
    with pytest.raises(VersionError, match="finite number"):
        router.set_split({1: float("nan")})
    with pytest.raises(VersionError, match="all zero"):
        router.set_split({1: 0.0, 2: 0.0})
    assert router.split() == TrafficSplit()


def test_promotion_clears_the_split(base_bundle: PolicyBundle, tmp_path: Path) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    router.set_split({1: 1.0, 2: 1.0})
    reg.promote(3, "test")
    assert router.split() == TrafficSplit()
    assert router.route("s", "e").version is None


def test_canary_share_is_sticky_per_episode_and_close_to_its_fraction(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    with pytest.raises(VersionError, match="canary state"):
        router.start_canary(3, 0.2, 0.8)
    reg.transition(3, VersionState.CANARY, "test")
    with pytest.raises(VersionError, match="as many episodes again"):
        router.start_canary(3, 0.6, 0.8)  # no room left for as large a control
    router.start_canary(3, 0.2, 0.8)
    canary_episodes = control_episodes = 0
    for e in range(3000):
        task = f"task-{e % 50}"
        first = router.route("robot", f"ep-{e}", task)
        assert all(router.route("robot", f"ep-{e}", task) == first for _ in range(3))
        if first.role is Role.CANARY:
            assert first.version == 3
            assert first.tightening == 0.8
            canary_episodes += 1
        elif first.role is Role.CONTROL:
            assert first.version is None  # live, whichever version that is at the batch
            assert first.tightening == 0.8  # under the canary's limits
            control_episodes += 1
        else:
            assert not first.tightened
    # A pair opens with probability 2 * fraction and its second episode closes it, so
    # paired episodes are a little over 2 * fraction of all.
    assert abs(canary_episodes - control_episodes) <= 50  # at most one open pair per task
    assert 0.15 < canary_episodes / 3000 < 0.35
    router.stop_canary()
    assert all(router.route("robot", f"ep-{e}", "t").role is Role.LIVE for e in range(3000, 3200))


def test_every_paired_task_is_run_by_the_canary_and_by_its_control_in_turn(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    reg.transition(3, VersionState.CANARY, "test")
    router.start_canary(3, 0.5, 0.8)  # every task's every turn is in the experiment
    roles: dict[str, list[Role]] = {}
    for e in range(400):
        task = f"task-{(e // 2) % 10}"  # each task twice in a row, as tether run does
        roles.setdefault(task, []).append(router.route(f"robot-{e % 3}", f"ep-{e}", task).role)
    firsts = set()
    for task_roles in roles.values():
        assert len(task_roles) == 40
        for a, b in zip(task_roles[::2], task_roles[1::2], strict=True):
            assert {a, b} == {Role.CANARY, Role.CONTROL}  # one pair: both arms, back to back
            firsts.add(a)
    assert firsts == {Role.CANARY, Role.CONTROL}  # neither arm always runs first


def test_episodes_without_a_task_id_are_never_paired(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    reg.transition(3, VersionState.CANARY, "test")
    router.start_canary(3, 0.5, 0.8)
    assert all(router.route("robot", f"ep-{e}").role is Role.LIVE for e in range(200))


def test_an_episode_keeps_its_first_steps_route_when_a_canary_starts_or_stops(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    reg.transition(3, VersionState.CANARY, "test")
    assert router.route("robot", "ep-0", "t").role is Role.LIVE
    router.start_canary(3, 0.5, 0.8)
    assert router.route("robot", "ep-0", "t").role is Role.LIVE  # began before the canary
    first = router.route("robot", "ep-1", "t")
    assert first.tightened
    router.stop_canary()
    after = router.route("robot", "ep-1", "t")
    assert after.version is None  # the canary is out: its steps go to live ...
    assert after.tightening == first.tightening  # ... under the limits the episode began with


@settings(max_examples=200, deadline=None)
@given(
    weights=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=6),
    u=st.floats(0.0, 1.0, exclude_max=True),
)
def test_pick_always_returns_a_version_of_the_split(weights: list[float], u: float) -> None:
    total = sum(weights)
    split = TrafficSplit(tuple((i, w / total) for i, w in enumerate(weights)))
    assert 0 <= _pick(split, u) < len(weights)


@given(st.text(), st.text())
def test_unit_hash_is_in_the_unit_interval(a: str, b: str) -> None:
    assert 0.0 <= unit_hash(a, b) < 1.0


def test_a_check_serves_the_last_known_good_beside_live_on_the_same_tasks(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    _, router = _setup(base_bundle, tmp_path)
    share = router.start_check(1, 0.5)  # version 1: retired, the last-known-good
    assert share is not None
    assert router.check() == share
    assert router.canary() is None
    roles: dict[str, list[RouteDecision]] = {}
    for e in range(80):
        task = f"task-{(e // 2) % 10}"
        roles.setdefault(task, []).append(router.route(f"robot-{e % 2}", f"ep-{e}", task))
    for decisions in roles.values():
        for a, b in zip(decisions[::2], decisions[1::2], strict=True):
            assert {a.role, b.role} == {Role.CHECK, Role.CONTROL}
            assert {a.version, b.version} == {1, None}  # the last-known-good, and live
            assert a.trial == b.trial == share.trial
            assert a.tightening == b.tightening == 1.0  # both at the base limits
    router.stop_check(share.trial + 1)  # another check's number: this one goes on
    assert router.check() == share
    router.stop_check(share.trial)
    assert router.route("robot-0", "ep-x", "task-0").role is Role.LIVE


def test_a_check_refuses_versions_that_are_not_a_loaded_retired_one(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    for version in (2, 3):  # live, candidate
        with pytest.raises(VersionError, match="retired"):
            router.start_check(version, 0.5)
    reg.unload(1)
    with pytest.raises(VersionError, match="unloaded"):
        router.start_check(1, 0.5)
    with pytest.raises(VersionError, match="fraction"):
        router.start_check(1, 0.6)


def test_a_canary_waits_for_a_check_and_a_check_for_a_canary(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    reg.transition(3, VersionState.CANARY, "test")
    check = router.start_check(1, 0.5)
    assert check is not None
    canary = router.start_canary(3, 0.5, 1.0)
    assert canary.trial != check.trial
    assert router.canary() is None  # waiting: the check keeps the share
    assert router.route("r", "ep-0", "t").role in (Role.CHECK, Role.CONTROL)
    router.stop_check(canary.trial)  # the canary's number stops no check
    assert router.canary() is None
    router.stop_check(check.trial)
    assert router.canary() == canary
    assert router.route("r", "ep-1", "t").role in (Role.CANARY, Role.CONTROL)
    assert router.start_check(1, 0.5) is None  # the canary holds it: ask again later
    router.stop_canary()
    assert router.start_check(1, 0.5) is not None


def test_a_live_change_ends_the_check_and_drops_a_waiting_canary(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    reg.transition(3, VersionState.CANARY, "test")
    assert router.start_check(1, 0.5) is not None
    router.start_canary(3, 0.5, 1.0)
    reg.rollback("test")  # version 1 live again
    assert router.check() is None
    assert router.canary() is None  # it was chosen against version 2
    assert router.route("r", "ep-0", "t").role is Role.LIVE


def test_an_unloaded_last_known_good_is_never_served_by_a_check(
    base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    reg, router = _setup(base_bundle, tmp_path)
    assert router.start_check(1, 0.5) is not None
    first = None
    for e in range(20):
        first = router.route("r", f"ep-{e}", f"t{e}")
        if first.role is Role.CHECK:
            break
    assert first is not None
    assert first.role is Role.CHECK
    episode = f"ep-{e}"
    reg.unload(1)
    later = router.route("r", episode, f"t{e}")  # the same episode's next step
    assert (later.version, later.role, later.trial) == (None, Role.CONTROL, first.trial)
    assert all(router.route("s", f"n-{k}", f"t{k}").role is Role.LIVE for k in range(20))
