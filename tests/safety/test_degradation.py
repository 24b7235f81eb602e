"""DegradationMachine: every transition, hysteresis, and TAKEOVER needing the operator."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from safety.builders import seven_joint_limits
from tether.safety import (
    ActionSource,
    DegradationConfig,
    DegradationError,
    DegradationLevel,
    DegradationMachine,
    DegradationTransition,
    EventKind,
    LevelThresholds,
    SafetyCheck,
    SafetyVerdict,
)

L = DegradationLevel
CONFIG = DegradationConfig(
    window_s=10.0,
    quiet_period_s=30.0,
    restricted=LevelThresholds(intervention=3, nan_output=1, per_check={"OBSTACLE": 2}),
    paused=LevelThresholds(intervention=6, robot_fault=1),
    takeover=LevelThresholds(intervention=10, backup_action=3, robot_fault=2),
)
CLIPPED = SafetyVerdict(ActionSource.CLIPPED, SafetyCheck.VELOCITY, 0.1, (0,))
OBSTACLE = SafetyVerdict(ActionSource.CLIPPED, SafetyCheck.OBSTACLE, 0.1, (0, 1))
NAN = SafetyVerdict(ActionSource.BACKUP, SafetyCheck.NON_FINITE, 0.0, (0, 1))
TAKEOVER_BACKUP = SafetyVerdict(ActionSource.BACKUP, SafetyCheck.TAKEOVER, 0.0, (0, 1))


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _machine(clock: Clock) -> tuple[DegradationMachine, list[DegradationTransition]]:
    machine = DegradationMachine(CONFIG, limits=seven_joint_limits(), clock=clock)
    seen: list[DegradationTransition] = []
    machine.add_listener(seen.append)
    return machine, seen


def test_interventions_degrade_step_by_step_and_immediately() -> None:
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(2):
        machine.observe(CLIPPED, policy_version=7)
    assert machine.level is L.NORMAL
    machine.observe(CLIPPED, policy_version=7)
    assert machine.level is L.RESTRICTED
    for _ in range(3):
        machine.observe(CLIPPED, policy_version=7)
    assert machine.level is L.PAUSED
    for _ in range(4):
        machine.observe(CLIPPED, policy_version=7)
    assert machine.level is L.TAKEOVER
    assert [(t.from_level, t.to_level) for t in seen] == [
        (L.NORMAL, L.RESTRICTED),
        (L.RESTRICTED, L.PAUSED),
        (L.PAUSED, L.TAKEOVER),
    ]
    assert all(t.trigger is EventKind.INTERVENTION and t.policy_version == 7 for t in seen)
    assert "10 intervention events" in seen[-1].reason
    assert machine.history() == tuple(seen)
    assert machine.transitions_for(7) == {L.RESTRICTED: 1, L.PAUSED: 1, L.TAKEOVER: 1}
    assert machine.transitions_for(8) == {}


def test_a_burst_can_skip_levels() -> None:
    clock = Clock()
    machine, seen = _machine(clock)
    machine.report(EventKind.ROBOT_FAULT)
    machine.report(EventKind.ROBOT_FAULT)
    assert machine.level is L.TAKEOVER
    assert [(t.from_level, t.to_level) for t in seen] == [
        (L.NORMAL, L.PAUSED),
        (L.PAUSED, L.TAKEOVER),
    ]


@pytest.mark.parametrize(
    ("feed", "level"),
    [
        (lambda m: m.observe(NAN), L.RESTRICTED),
        (lambda m: [m.observe(OBSTACLE) for _ in range(2)], L.RESTRICTED),
        (lambda m: m.report(EventKind.ROBOT_FAULT), L.PAUSED),
        (lambda m: [m.observe(NAN) for _ in range(3)], L.TAKEOVER),
    ],
)
def test_each_event_kind_counts_toward_its_own_threshold(feed: object, level: L) -> None:
    machine, _ = _machine(Clock())
    feed(machine)  # type: ignore[operator]
    assert machine.level is level


def test_moving_back_up_needs_a_quiet_period_per_level() -> None:
    clock = Clock()
    machine, seen = _machine(clock)
    machine.report(EventKind.ROBOT_FAULT)
    assert machine.level is L.PAUSED
    clock.now += 10.0  # events leave the window, but no quiet period has passed yet
    assert machine.level is L.PAUSED
    clock.now += 29.0  # quiet for 29 s only
    assert machine.level is L.PAUSED
    clock.now += 1.0
    assert machine.level is L.RESTRICTED
    clock.now += 29.0
    assert machine.level is L.RESTRICTED
    machine.observe(CLIPPED)  # one event below the threshold restarts nothing
    clock.now += 1.0
    assert machine.level is L.NORMAL
    assert seen[-1].reason == "quiet for 30.0 s"


def test_a_new_trigger_restarts_the_quiet_period() -> None:
    clock = Clock()
    machine, _ = _machine(clock)
    for _ in range(3):
        machine.observe(CLIPPED)
    clock.now += 25.0
    machine.observe(NAN)  # a RESTRICTED trigger again
    clock.now += 25.0
    assert machine.level is L.RESTRICTED  # the window emptied at +35 s: 15 s of calm
    clock.now += 20.0
    assert machine.level is L.NORMAL


def test_late_polls_catch_up_one_quiet_period_per_level() -> None:
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(6):
        machine.observe(CLIPPED)
    clock.now += 1000.0
    assert machine.level is L.NORMAL
    ups = [t for t in seen if not t.is_degradation]
    assert [t.to_level for t in ups] == [L.RESTRICTED, L.NORMAL]
    assert ups[1].time_s - ups[0].time_s == pytest.approx(30.0)


def test_takeover_is_never_left_without_the_operator() -> None:
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(3):
        machine.observe(NAN)
    assert machine.level is L.TAKEOVER
    clock.now += 1e6
    for _ in range(100):
        machine.observe(TAKEOVER_BACKUP)  # its own backups are not new symptoms
    assert machine.level is L.TAKEOVER
    with pytest.raises(DegradationError, match="operator"):
        machine.resume(operator="  ")
    record = machine.resume(operator="alice", reason="checked the arm")
    assert (record.from_level, record.to_level) == (L.TAKEOVER, L.PAUSED)
    assert record.operator == "alice"
    assert seen[-1] == record
    # The window was forgotten: the events that caused the takeover do not return it.
    assert machine.level is L.PAUSED
    assert machine.counts().count(EventKind.NAN_OUTPUT) == 0
    with pytest.raises(DegradationError, match="only valid in TAKEOVER"):
        machine.resume(operator="alice")


def test_escalate_moves_down_only() -> None:
    machine, seen = _machine(Clock())
    machine.escalate(L.PAUSED, reason="operator pause")
    assert machine.level is L.PAUSED
    machine.escalate(L.RESTRICTED, reason="no-op")
    assert machine.level is L.PAUSED
    assert seen[-1].reason == "escalated: operator pause"


def test_learning_queries_and_limits_follow_the_level() -> None:
    clock = Clock()
    machine, _ = _machine(clock)
    base = seven_joint_limits()
    assert (machine.may_publish(), machine.may_train(), machine.policy_in_control()) == (
        True,
        True,
        True,
    )
    assert machine.limits_for(L.NORMAL) == base
    assert machine.limits_for(L.RESTRICTED) == base.tightened(0.5)
    machine.escalate(L.RESTRICTED, reason="test")
    assert (machine.may_publish(), machine.may_train()) == (False, True)
    machine.escalate(L.PAUSED, reason="test")
    assert (machine.may_train(), machine.policy_in_control()) == (False, True)
    machine.escalate(L.TAKEOVER, reason="test")
    assert not machine.policy_in_control()
    with pytest.raises(DegradationError, match="limits"):
        DegradationMachine(CONFIG).limits_for(L.NORMAL)


def test_history_is_bounded_and_counts_by_check_are_kept() -> None:
    clock = Clock()
    machine = DegradationMachine(CONFIG.model_copy(update={"history_size": 2}), clock=clock)
    for _ in range(3):
        machine.escalate(L.TAKEOVER, reason="x")
        machine.resume(operator="op")
    assert len(machine.history()) == 2
    machine.observe(OBSTACLE)
    assert dict(machine.counts().interventions_by_check) == {"OBSTACLE": 1}
    clock.now += 11.0
    assert machine.counts().count(EventKind.INTERVENTION) == 0


def test_inconsistent_thresholds_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"must be >= RESTRICTED\.intervention"):
        DegradationConfig(
            restricted=LevelThresholds(intervention=10), paused=LevelThresholds(intervention=5)
        )
    with pytest.raises(ValidationError, match="per_check key"):
        LevelThresholds(per_check={"OBSTACLES": 1})
    with pytest.raises(ValidationError, match="resume_level"):
        DegradationConfig(resume_level=L.TAKEOVER)


def _fleet_stream(
    machine: DegradationMachine, clock: Clock, seconds: float, rates: dict[SafetyCheck, float]
) -> set[DegradationLevel]:
    """Two robots at 50 Hz for ``seconds``; each step is corrected by each check at its
    rate (drawn independently); the levels seen."""
    rng = np.random.default_rng(0)
    seen = {machine.level}
    for _ in range(int(seconds * 50)):
        clock.now += 0.02
        for _robot in range(2):
            checks = SafetyCheck.NONE
            for check, rate in rates.items():
                if rng.random() < rate:
                    checks |= check
            if checks:
                machine.observe(SafetyVerdict(ActionSource.CLIPPED, checks, 0.1, (0,)))
            seen.add(machine.level)
    return seen


# The shipped pretrained policy under the arm preset, at its worst measured rates (20
# episodes on the nominal arm; the obstacle stops come from the episodes whose target
# lies past the obstacle, where the policy pushes toward it on most steps).
LEARNING = {SafetyCheck.VELOCITY: 0.77, SafetyCheck.OBSTACLE: 0.13, SafetyCheck.WORKSPACE: 0.08}


def test_default_thresholds_let_a_learning_policy_on_two_robots_stay_normal() -> None:
    clock = Clock()
    machine = DegradationMachine(clock=clock)
    assert _fleet_stream(machine, clock, 60.0, LEARNING) == {L.NORMAL}
    # The old defaults (20 interventions in 10 s) restricted it within half a second.
    old = DegradationConfig(restricted=LevelThresholds(intervention=20))
    machine = DegradationMachine(old, clock=clock)
    assert L.RESTRICTED in _fleet_stream(machine, clock, 0.5, LEARNING)


@pytest.mark.parametrize(
    ("rates", "level"),
    [
        ({SafetyCheck.VELOCITY: 1.0}, L.RESTRICTED),  # every action of both robots corrected
        # Both robots stopped short of the obstacle on most steps, or on nearly all.
        ({SafetyCheck.OBSTACLE: 0.7}, L.RESTRICTED),
        ({SafetyCheck.OBSTACLE: 0.95}, L.PAUSED),
    ],
)
def test_default_thresholds_degrade_on_clearly_abnormal_rates(
    rates: dict[SafetyCheck, float], level: DegradationLevel
) -> None:
    clock = Clock()
    machine = DegradationMachine(clock=clock)
    assert level in _fleet_stream(machine, clock, 10.0, rates)


def test_corrections_under_tightened_limits_do_not_hold_the_level() -> None:
    # A policy corrected often enough to enter RESTRICTED is corrected even more often
    # under the halved limits. Those corrections must not keep it there for ever: one
    # quiet period after the NORMAL-level ones have left the window brings it back. (Had
    # they counted, the window would stay at the threshold and the level would stick.)
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(3):
        machine.observe(CLIPPED)
    assert machine.level is L.RESTRICTED
    # Once the NORMAL-level ones have left the window, one correction every 3 s: 3-4
    # in every window, at RESTRICTED's threshold and below PAUSED's.
    for tick in range(1, 501):
        clock.now += 0.1
        if tick >= 105 and (tick - 105) % 30 == 0 and machine.level is L.RESTRICTED:
            machine.observe(CLIPPED)
    assert machine.level is L.NORMAL
    assert seen[-1].reason == "quiet for 30.0 s"
    # ... and at NORMAL the same stream counts again.
    for _ in range(3):
        machine.observe(CLIPPED)
    assert machine.level is L.RESTRICTED


def test_corrections_under_tightened_limits_still_escalate() -> None:
    clock = Clock()
    machine, _ = _machine(clock)
    for _ in range(3):
        machine.observe(CLIPPED)
    for _ in range(3):
        machine.observe(CLIPPED)  # under RESTRICTED's limits: counted toward PAUSED
    assert machine.level is L.PAUSED
    counts = dict(machine.counts().by_kind)
    assert counts[EventKind.INTERVENTION] == 6


def test_corrections_under_tightened_limits_do_not_send_it_back_at_once() -> None:
    # Back at NORMAL, the window still holds corrections made under RESTRICTED's limits;
    # they say nothing about the policy under NORMAL's limits and must not re-enter
    # RESTRICTED (counted, they would: here 3, the threshold).
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(3):
        machine.observe(CLIPPED)  # NORMAL: enters RESTRICTED, leaves the window at +10 s
    clock.now += 35.0
    for _ in range(3):
        machine.observe(CLIPPED)  # under RESTRICTED's limits
    clock.now += 5.0  # quiet since +10 s: back to NORMAL at +40 s
    assert machine.level is L.NORMAL
    assert dict(machine.counts().by_kind)[EventKind.INTERVENTION] == 3
    assert [t.to_level for t in seen] == [L.RESTRICTED, L.NORMAL]


def test_a_canarys_tightened_corrections_do_not_restrict_the_fleet() -> None:
    # A canary's steps are supervised under RESTRICTED's limits even at NORMAL; their
    # corrections count toward PAUSED, never toward RESTRICTED.
    machine, _ = _machine(Clock())
    for _ in range(3):
        machine.observe(CLIPPED, tightened=True)
    assert machine.level is L.NORMAL
    for _ in range(3):
        machine.observe(CLIPPED, tightened=True)
    assert machine.level is L.PAUSED  # 6 corrections: PAUSED's own threshold
