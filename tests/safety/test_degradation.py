"""DegradationMachine: every transition, hysteresis, TAKEOVER needing the operator, and
each robot's level its own (rates of its own steps; the learning-wide level aggregated)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from safety.builders import seven_joint_limits
from tether.config import describe_validation_error
from tether.safety import (
    PASSED,
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
# After CLEAN clean steps, k corrections make a rate of k / (CLEAN + k): the thresholds
# below are reached at 3 (RESTRICTED), 6 (PAUSED) and 10 (TAKEOVER) corrections, one NaN,
# two OBSTACLE stops, three backups.
CLEAN = 10
CONFIG = DegradationConfig(
    window_s=10.0,
    quiet_period_s=30.0,
    min_window_steps=CLEAN,
    restricted=LevelThresholds(
        intervention_rate=0.2, nan_output_rate=0.05, per_check_rate={"OBSTACLE": 0.15}
    ),
    paused=LevelThresholds(intervention_rate=0.35, robot_fault=1),
    takeover=LevelThresholds(intervention_rate=0.5, backup_action_rate=0.2, robot_fault=2),
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


def _machine(
    clock: Clock, *, clean: int = CLEAN
) -> tuple[DegradationMachine, list[DegradationTransition]]:
    """A machine whose default robot's window holds ``clean`` passed steps."""
    machine = DegradationMachine(CONFIG, limits=seven_joint_limits(), clock=clock)
    seen: list[DegradationTransition] = []
    machine.add_listener(seen.append)
    _clean(machine, clean)
    return machine, seen


def _clean(machine: DegradationMachine, n: int, robot: str = "") -> None:
    for _ in range(n):
        machine.observe(PASSED, robot=robot)


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
    assert "10 intervention events in the robot's 20 steps" in seen[-1].reason
    assert tuple(t for t in machine.history() if t.robot_id is not None) == tuple(seen)
    assert machine.transitions_for(7) == {L.RESTRICTED: 1, L.PAUSED: 1, L.TAKEOVER: 1}
    assert machine.transitions_for(8) == {}


def test_a_burst_can_skip_levels() -> None:
    clock = Clock()
    machine, seen = _machine(clock, clean=0)
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
    _clean(machine, CLEAN)
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
    with pytest.raises(ValidationError, match=r"must be >= RESTRICTED\.intervention_rate"):
        DegradationConfig(
            restricted=LevelThresholds(intervention_rate=0.5),
            paused=LevelThresholds(intervention_rate=0.2),
        )
    with pytest.raises(ValidationError, match="per_check_rate key"):
        LevelThresholds(per_check_rate={"OBSTACLES": 0.1})
    with pytest.raises(ValidationError, match="less than or equal to 1"):
        LevelThresholds(watchdog_miss_rate=10)
    with pytest.raises(ValidationError, match="resume_level"):
        DegradationConfig(resume_level=L.TAKEOVER)


def _fleet_stream(
    machine: DegradationMachine,
    clock: Clock,
    seconds: float,
    rates: dict[SafetyCheck, float],
    robots: int = 2,
) -> set[DegradationLevel]:
    """``robots`` robots at 50 Hz for ``seconds``; each step is corrected by each check at
    its rate (drawn independently); the levels any robot was seen at."""
    rng = np.random.default_rng(0)
    seen = {machine.level}
    for _ in range(int(seconds * 50)):
        clock.now += 0.02
        for robot in range(robots):
            checks = SafetyCheck.NONE
            for check, rate in rates.items():
                if rng.random() < rate:
                    checks |= check
            verdict = SafetyVerdict(ActionSource.CLIPPED, checks, 0.1, (0,)) if checks else PASSED
            machine.observe(verdict, robot=f"robot-{robot}")
        seen.update(machine.robot_levels().values())
    return seen


# The shipped pretrained policy under the arm preset, at its worst measured rates (20
# episodes on the nominal arm; the obstacle stops come from the episodes whose target
# lies past the obstacle, where the policy pushes toward it on most steps).
LEARNING = {SafetyCheck.VELOCITY: 0.77, SafetyCheck.OBSTACLE: 0.13, SafetyCheck.WORKSPACE: 0.08}


def test_default_thresholds_let_a_learning_policy_on_two_robots_stay_normal() -> None:
    clock = Clock()
    machine = DegradationMachine(clock=clock)
    assert _fleet_stream(machine, clock, 60.0, LEARNING) == {L.NORMAL}


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
    # they counted, the window would stay above the threshold and the level would stick.)
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(3):
        machine.observe(CLIPPED)
    assert machine.level is L.RESTRICTED
    # Then one step in four corrected at 10 Hz: 25 %, above RESTRICTED's 20 % and below
    # PAUSED's 35 %.
    for tick in range(1, 601):
        clock.now += 0.1
        machine.observe(CLIPPED if tick % 4 == 0 else PASSED)
    # Back to NORMAL 30 s after the NORMAL-level corrections fell below the threshold
    # (the clean steps dilute them at +0.3 s), and at NORMAL the same stream counts again.
    assert [t.to_level for t in seen] == [L.RESTRICTED, L.NORMAL, L.RESTRICTED]
    assert seen[1].reason == "quiet for 30.0 s"
    assert seen[1].time_s == pytest.approx(1030.2)


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
    # RESTRICTED (counted, they would: here 3 of 13 steps, above the threshold).
    clock = Clock()
    machine, seen = _machine(clock)
    for _ in range(3):
        machine.observe(CLIPPED)  # NORMAL: enters RESTRICTED, leaves the window at +10 s
    clock.now += 35.0
    _clean(machine, CLEAN)
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


# ---- each robot's level is its own --------------------------------------------------


def test_one_robots_evidence_never_moves_another() -> None:
    clock = Clock()
    machine, seen = _machine(clock, clean=0)
    _clean(machine, CLEAN, robot="bystander")
    _clean(machine, CLEAN, robot="faulty")
    for _ in range(3):
        machine.observe(NAN, robot="faulty")
    machine.report_many(EventKind.WATCHDOG_MISS, 1000, robot="faulty")
    _clean(machine, CLEAN, robot="bystander")
    assert machine.level_of("faulty") is L.TAKEOVER
    assert machine.level_of("bystander") is L.NORMAL
    assert {t.robot_id for t in seen} == {"faulty"}
    assert machine.counts("bystander").count(EventKind.NAN_OUTPUT) == 0
    assert machine.counts("bystander").steps == 2 * CLEAN


def test_a_robots_first_steps_cannot_trip_a_rate() -> None:
    clock = Clock()
    machine, _ = _machine(clock, clean=0)
    machine.observe(NAN, robot="new")  # 1 of 1 steps: 100 %, but the window is too short
    assert machine.level_of("new") is L.NORMAL
    _clean(machine, CLEAN - 1, robot="new")
    assert machine.level_of("new") is L.RESTRICTED  # judged at CLEAN steps: 10 % > 5 %


def test_rates_do_not_tighten_with_the_number_of_robots() -> None:
    """64 quiet robots, each with a watchdog miss on 1 % of its steps: the old counts in a
    window shared by all (150 misses: TAKEOVER) put every one of them in TAKEOVER."""
    clock = Clock()
    machine = DegradationMachine(DegradationConfig(session_warmup_steps=0), clock=clock)
    levels: set[DegradationLevel] = set()
    for tick in range(50 * 20):
        clock.now += 0.02
        for robot in range(64):
            name = f"robot-{robot}"
            if (tick + robot) % 100 == 0:
                machine.report(EventKind.WATCHDOG_MISS, robot=name)
            machine.observe(PASSED, robot=name)
        if tick % 50 == 0:
            levels.update(machine.robot_levels().values())
    assert levels == {L.NORMAL}
    assert machine.level is L.NORMAL


def test_the_learning_wide_level_is_decided_by_more_than_half_of_the_robots() -> None:
    clock = Clock()
    machine, _ = _machine(clock, clean=0)
    fleet: list[DegradationTransition] = []
    machine.add_fleet_listener(fleet.append)
    for robot in ("a", "b", "c", "d"):
        _clean(machine, CLEAN, robot=robot)
    machine.escalate(L.TAKEOVER, reason="e-stop", robot="a")
    machine.escalate(L.PAUSED, reason="test", robot="b")
    assert machine.level is L.NORMAL
    assert machine.may_publish()
    machine.escalate(L.RESTRICTED, reason="test", robot="c")
    assert machine.level is L.RESTRICTED  # 3 of 4 at RESTRICTED or worse
    assert not machine.may_publish()
    assert machine.may_train()
    assert [t.robot_id for t in fleet] == [None]
    assert "3 of 4 robots at RESTRICTED or worse" in fleet[0].reason
    # A robot stops counting once it left the window at NORMAL; one above NORMAL keeps
    # counting (in TAKEOVER until an operator resumes it).
    clock.now += CONFIG.window_s + 1.0
    assert machine.level is L.PAUSED  # d no longer counts: a and b are 2 of 3
    # With fraction 0, any one robot decides (the conservative setting).
    strict = DegradationMachine(CONFIG.model_copy(update={"fleet_degraded_fraction": 0.0}))
    _clean(strict, CLEAN, robot="x")
    _clean(strict, CLEAN, robot="y")
    strict.escalate(L.PAUSED, reason="test", robot="x")
    assert strict.level is L.PAUSED


def test_resume_without_a_robot_resumes_every_robot_in_takeover_and_no_other() -> None:
    machine, _ = _machine(Clock(), clean=0)
    machine.escalate(L.TAKEOVER, reason="e-stop", robot="a")
    machine.escalate(L.TAKEOVER, reason="e-stop", robot="b")
    machine.escalate(L.RESTRICTED, reason="test", robot="c")
    machine.resume(operator="ada")
    assert machine.robot_levels() == {"a": L.PAUSED, "b": L.PAUSED, "c": L.RESTRICTED}
    with pytest.raises(DegradationError, match="robot 'c' is at RESTRICTED"):
        machine.resume(operator="ada", robot="c")


def test_the_robot_table_is_bounded_and_forgets_an_idle_normal_robot_first() -> None:
    clock = Clock()
    machine = DegradationMachine(CONFIG.model_copy(update={"max_robots": 3}), clock=clock)
    machine.escalate(L.TAKEOVER, reason="e-stop", robot="stuck")
    for name in ("old", "new", "newest"):
        clock.now += 1.0
        _clean(machine, 1, robot=name)
    assert set(machine.robot_levels()) == {"stuck", "new", "newest"}


def test_old_count_keys_get_a_did_you_mean_to_the_rate_keys() -> None:
    with pytest.raises(ValidationError) as info:
        DegradationConfig.model_validate({"restricted": {"watchdog_miss": 10}})
    text = describe_validation_error(info.value, DegradationConfig)
    assert "restricted.watchdog_miss: unknown key; did you mean 'watchdog_miss_rate'?" in text


class _JudgingMachine(DegradationMachine):
    """Judges every threshold on every step (no shortcut for a quiet window)."""

    def _quiet_steps(self, state: object) -> int:
        return -1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_batch_of_steps_moves_levels_as_one_observe_per_step(seed: int) -> None:
    """observe_batch (and the quiet-window shortcut) give the transitions, in order and
    with their reasons and times, that one fully judged observe per step gives."""
    rng = np.random.default_rng(seed)
    verdicts = (PASSED, CLIPPED, OBSTACLE, NAN, TAKEOVER_BACKUP)
    weights = np.array([0.78, 0.15, 0.03, 0.02, 0.02])
    robots = [f"robot-{i}" for i in range(6)]

    class Ticking:
        """Moves on with every reading, so a row read at another moment would differ."""

        def __init__(self) -> None:
            self.now = 1000.0

        def __call__(self) -> float:
            self.now += 1e-4
            return self.now

    clocks = [Ticking(), Ticking(), Ticking()]
    machines = [cls(CONFIG, limits=seven_joint_limits(), clock=clock)
                for cls, clock in zip((DegradationMachine, DegradationMachine, _JudgingMachine),
                                      clocks, strict=True)]  # fmt: skip
    batched, single, judged = machines
    heard: list[list[DegradationTransition]] = [[], [], []]
    for machine, seen in zip(machines, heard, strict=True):
        machine.add_listener(seen.append)
    for step in range(400):
        # A bursty mix: some stretches far above every threshold, most below them all.
        p = weights if step % 60 < 40 else np.array([0.15, 0.45, 0.15, 0.15, 0.1])
        names = [robots[int(i)] for i in rng.integers(len(robots), size=int(rng.integers(1, 9)))]
        rows = [verdicts[int(i)] for i in rng.choice(len(verdicts), size=len(names), p=p)]
        tight = [bool(x) for x in rng.random(len(names)) < 0.2]
        batched.observe_batch(names, rows, tight, policy_version=step // 100)
        for machine in (single, judged):
            for name, verdict, t in zip(names, rows, tight, strict=True):
                machine.observe(verdict, policy_version=step // 100, tightened=t, robot=name)
        if step % 37 == 0:  # evidence from outside, and a look that evicts without judging
            for machine in machines:
                machine.report_many(EventKind.WATCHDOG_MISS, 2, robot=robots[step % 6])
                machine.counts(robots[(step + 1) % 6])
        if step % 150 == 149:
            for machine in machines:
                if L.TAKEOVER in machine.robot_levels().values():
                    machine.resume(operator="test")
        pause = float(rng.choice([0.02, 0.3, 2.0], p=[0.8, 0.15, 0.05]))
        for clock in clocks:
            clock.now += pause
        assert batched.robot_levels() == single.robot_levels(), step
        assert single.robot_levels() == judged.robot_levels(), step
    assert batched.history() == single.history() == judged.history()
    assert heard[0] == heard[1] == heard[2]
    moved = {t.to_level for t in judged.history()}
    assert {L.RESTRICTED, L.PAUSED, L.TAKEOVER} <= moved  # every threshold was reached
    assert any(not t.is_degradation for t in judged.history())  # and quiet periods passed


def test_observe_batch_refuses_rows_of_different_lengths() -> None:
    machine = DegradationMachine(CONFIG)
    with pytest.raises(DegradationError, match="one verdict and one tightened flag"):
        machine.observe_batch(["a", "b"], [PASSED], [False, False])


@pytest.mark.parametrize("batched", [False, True])
def test_a_passed_step_whose_window_loses_its_clean_steps_can_degrade(batched: bool) -> None:
    """Old clean steps leaving the window raise the rate of the corrections kept: the
    passed step that evicts them is judged, in a batch as alone."""
    clock = Clock()
    machine = DegradationMachine(CONFIG, limits=seven_joint_limits(), clock=clock)

    def feed(verdicts: list[SafetyVerdict]) -> None:
        if batched:
            machine.observe_batch([""] * len(verdicts), verdicts, [False] * len(verdicts))
        else:
            for verdict in verdicts:
                machine.observe(verdict)

    feed([PASSED] * 20)
    clock.now += 9.0
    feed([CLIPPED] * 4 + [PASSED] * 8)  # 4 of 32 steps: below the 20 % threshold
    assert machine.level_of("") is L.NORMAL
    clock.now += 1.5  # the first 20 steps leave the window: 4 of 13
    feed([PASSED])
    assert machine.level_of("") is L.RESTRICTED


@pytest.mark.parametrize("batched", [False, True])
def test_a_check_rate_alone_degrades_in_a_batch_as_alone(batched: bool) -> None:
    """A correction's check bit can reach its own threshold before the correction rate
    does: 4 OBSTACLE stops in 24 steps (16.7 %: over OBSTACLE's 15 %, under the 20 % for
    all corrections)."""
    machine = DegradationMachine(CONFIG, limits=seven_joint_limits(), clock=Clock())
    steps = [PASSED] * 20 + [OBSTACLE] * 3
    if batched:
        machine.observe_batch([""] * len(steps), steps, [False] * len(steps))
    else:
        for verdict in steps:
            machine.observe(verdict)
    assert machine.level_of("") is L.NORMAL
    if batched:
        machine.observe_batch([""], [OBSTACLE], [False])
    else:
        machine.observe(OBSTACLE)
    assert machine.level_of("") is L.RESTRICTED
    assert "OBSTACLE" in machine.history()[0].reason
