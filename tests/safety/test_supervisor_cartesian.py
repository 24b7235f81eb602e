"""Cartesian checks with a planar two-link arm: obstacle and workspace.

The arm is simulated with the supervisor's own model at the fastest gain the limits
allow (the case that overshoots most); clearance is measured with zero margin, i.e.
actual contact. Each property is also shown to fail without the supervisor.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from safety.builders import GAIN_HI, PlanarArm, observation, planar_limits, step_model
from tether.safety import SafetyCheck, SafetyLimits, Supervisor, SupervisorConfig
from tether.safety.geometry import Clearance

LIMITS = planar_limits()
ARM = PlanarArm()
# Without margins: a clearance below zero means real contact, or really outside.
CONTACT = Clearance(dataclasses.replace(LIMITS, obstacle_margin_m=0.0, workspace_margin_m=0.0))


def _push(
    push: np.ndarray,
    start: np.ndarray,
    guarded: bool,
    steps: int = 300,
    limits: SafetyLimits = LIMITS,
    load: np.ndarray | None = None,
    config: SupervisorConfig | None = None,
) -> tuple[float, float, SafetyCheck]:
    """Push with a constant action; the smallest obstacle and workspace clearance seen.

    ``load`` is torque the true robot needs to hold still that the kinematics omits.
    """
    supervisor = Supervisor(limits, kinematics=ARM, config=config)
    q, v = start.astype(np.float64), np.zeros(2)
    previous: np.ndarray | None = None
    worst_obstacle = worst_workspace = np.inf
    fired = SafetyCheck.NONE
    for _ in range(steps):
        u = push.astype(np.float32)
        if guarded:
            u, verdict = supervisor.filter(observation(LIMITS, q, v, size=10), u, previous)
            fired |= verdict.checks
            previous = u
        q, v = step_model(LIMITS, q, v, u, np.full(2, GAIN_HI), load)
        worst_obstacle = min(worst_obstacle, CONTACT.obstacles(*ARM.collision_spheres(q)))
        worst_workspace = min(worst_workspace, CONTACT.workspace(ARM.end_effector(q)))
    return worst_obstacle, worst_workspace, fired


def test_motion_toward_the_obstacle_stops_before_contact() -> None:
    toward = np.array([1.0, 0.0])  # tips the arm toward +x, where the obstacle is
    obstacle, _, fired = _push(toward, np.array([0.1, 0.0]), guarded=True)
    assert obstacle > 0
    assert fired & SafetyCheck.OBSTACLE
    obstacle, _, _ = _push(toward, np.array([0.1, 0.0]), guarded=False)
    assert obstacle < 0


def test_motion_out_of_the_workspace_stops_at_its_boundary() -> None:
    outward = np.array([-1.0, 0.0])  # tips the arm toward -x, out of the box
    _, workspace, fired = _push(outward, np.array([-0.1, 0.0]), guarded=True)
    assert workspace > 0
    assert fired & SafetyCheck.WORKSPACE
    _, workspace, _ = _push(outward, np.array([-0.1, 0.0]), guarded=False)
    assert workspace < 0


def test_a_tight_rate_limit_does_not_weaken_the_stop() -> None:
    # The rate limit would let the command change by only 0.02 per step; braking to a
    # stop before the obstacle needs more, and the supervisor may always brake.
    slow = planar_limits(max_action_change_per_step=0.02)
    obstacle, _, fired = _push(np.array([1.0, 0.0]), np.array([0.1, 0.0]), True, limits=slow)
    assert obstacle > 0
    assert fired & SafetyCheck.OBSTACLE


@pytest.mark.parametrize(("estimation_gain", "touches"), [(0.5, False), (0.0, True)])
def test_an_unmodelled_load_toward_the_obstacle_is_learnt_while_stopping(
    estimation_gain: float, touches: bool
) -> None:
    # A doing-nothing policy; the load drags the arm toward the obstacle. Stops that
    # assume the modelled gravity creep into it; stops that learn the load hold.
    load = np.array([-0.3, 0.0])
    config = SupervisorConfig(load_estimation_gain=estimation_gain)
    obstacle, _, fired = _push(
        np.zeros(2), np.array([0.3, 0.0]), True, steps=600, load=load, config=config
    )
    assert fired & SafetyCheck.OBSTACLE
    assert (obstacle < 0) is touches


def _pose_inside_the_obstacle_margin() -> np.ndarray:
    """A pose whose clearance breaches the margin but does not touch the obstacle."""
    margin = Clearance(LIMITS)
    for angle in np.linspace(0.0, 1.5, 3001):
        q = np.array([angle, 0.0])
        if margin.obstacles(*ARM.collision_spheres(q)) < 0:
            assert CONTACT.obstacles(*ARM.collision_spheres(q)) > 0
            return q
    raise AssertionError("the planar arm never comes near its obstacle")


@pytest.mark.parametrize(("push", "allowed"), [(-0.05, True), (0.05, False)])
def test_inside_the_margin_only_motion_away_from_the_obstacle_is_allowed(
    push: float, allowed: bool
) -> None:
    q = _pose_inside_the_obstacle_margin()
    supervisor = Supervisor(LIMITS, kinematics=ARM)
    action = np.array([push, 0.0], dtype=np.float32)
    out, verdict = supervisor.filter(observation(LIMITS, q, np.zeros(2), size=10), action)
    if allowed:
        assert out.tobytes() == action.tobytes()
        assert not verdict.checks
    else:
        assert verdict.checks & SafetyCheck.OBSTACLE
        assert out[0] <= 0.0
