"""The optimized supervisor decides exactly what the straightforward reference decides.

``Supervisor`` computes its intervals in scalar Python and skips forward kinematics
when the reach bound proves a pose clear; ``ReferenceSupervisor`` is the elementwise
numpy version that evaluates every pose. On freshly drawn inputs (a new seed every run,
printed on failure) and in closed loop on the MuJoCo arm, drifting or not, both must
return the same float32 bytes and the same verdict on every call. The reach bound
itself is checked against the kinematics: it must never underestimate how far the
arm moves.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from safety.builders import PlanarArm, planar_limits, seven_joint_limits
from safety.equivalence import closed_loop_compare, compare, open_loop_steps
from safety.reference import ReferenceSupervisor
from tether.safety import SafetyLimits, Supervisor, SupervisorConfig
from tether.safety.backups import BackupConfig, BackupKind
from tether.safety.kinematics import Kinematics
from tether.safety.presets import arm_limits, arm_supervisor
from tether.safety.reach import ClearanceAnchor, joint_reach
from tether.sim import ArmEnv, ArmKinematics, arm_spec
from tether.sim.config import ArmEnvConfig
from tether.sim.drift import DriftSchedule
from tether.sim.geometry import ARM

# These tests exercise the torque interface, the arm's second command interface.
TORQUE = ArmEnvConfig(command_interface="torque")

SEED = int(np.random.SeedSequence().entropy % 2**32)
# Random states move fast, so their predicted paths are long and the oracle evaluates
# hundreds of poses per call; coarser sampling (path_samples is shared, so the poses
# compared are still the same) keeps these calls affordable. The closed-loop tests use
# the default spacing.
SPARSE = SupervisorConfig(sweep_spacing_m=0.05)


def _pair(
    limits: SafetyLimits, kinematics: Kinematics | None
) -> tuple[Supervisor, ReferenceSupervisor]:
    return Supervisor(limits, kinematics=kinematics, config=SPARSE), ReferenceSupervisor(
        limits, kinematics=kinematics, config=SPARSE
    )


@pytest.mark.parametrize("tighten", [1.0, 0.5])
def test_on_the_arm_every_call_matches_the_reference(tighten: float) -> None:
    limits = arm_limits() if tighten == 1.0 else arm_limits().tightened(tighten)
    kinematics = ArmKinematics(arm_spec())
    rng = np.random.default_rng(SEED)
    calls = open_loop_steps(limits, arm_spec().obs_dim, rng, 1500, kinematics)
    assert compare(*_pair(limits, kinematics), calls) == 1500, f"seed {SEED}"


@pytest.mark.parametrize("kind", ["brake", "go_home"])
def test_with_each_backup_every_call_matches_the_reference(kind: BackupKind) -> None:
    limits = arm_limits()
    kinematics = ArmKinematics(arm_spec())
    config = SPARSE.model_copy(
        update={"backup": BackupConfig(kind=kind), "load_estimation_gain": 1.5}
    )
    fast = Supervisor(limits, kinematics=kinematics, config=config)
    reference = ReferenceSupervisor(limits, kinematics=kinematics, config=config)
    calls = open_loop_steps(
        limits, arm_spec().obs_dim, np.random.default_rng(SEED), 800, kinematics
    )
    assert compare(fast, reference, calls) == 800, f"seed {SEED}"


def test_without_kinematics_and_on_a_planar_arm_every_call_matches_the_reference() -> None:
    rng = np.random.default_rng(SEED)
    seven = seven_joint_limits()
    compare(*_pair(seven, None), open_loop_steps(seven, 20, rng, 1500))
    planar = planar_limits()
    arm = PlanarArm(gravity_nm=2.0)
    compare(*_pair(planar, arm), open_loop_steps(planar, 10, rng, 1000, arm))


@pytest.mark.parametrize("drift", [False, True])
def test_in_closed_loop_on_the_arm_every_step_matches_the_reference(drift: bool) -> None:
    # The drifting arm makes the supervisor stop it and learn the load, so both
    # supervisors' state (hold, load estimate) must evolve identically too.
    schedule = DriftSchedule.demo(start_step=0, ramp_steps=500) if drift else None
    env = ArmEnv(config=TORQUE, seed=SEED, drift=schedule)
    reference = ReferenceSupervisor(arm_limits(), kinematics=ArmKinematics(arm_spec()))
    # 1,000 steps: past the end of the drift ramp; the oracle checks every pose of every
    # predicted path, which costs most of this test's time.
    assert closed_loop_compare(arm_supervisor(), reference, env, 1000, SEED) == 1000


def test_the_reach_bound_never_underestimates_how_far_the_arm_moves() -> None:
    kinematics = ArmKinematics(arm_spec())
    reach = joint_reach(kinematics)
    assert reach is not None
    rng = np.random.default_rng(SEED)
    low = np.asarray(arm_spec().joint_position_low_rad) - 1.0
    high = np.asarray(arm_spec().joint_position_high_rad) + 1.0
    tightest = 0.0
    for _ in range(2000):
        q = rng.uniform(low, high)
        q2 = q + rng.normal(0.0, [0.01, 0.1, 1.0][int(rng.integers(0, 3))], 4)
        bound = float(np.dot(reach, np.abs(q2 - q)))
        c1, _ = kinematics.collision_spheres(q)
        c2, _ = kinematics.collision_spheres(q2)
        moved = max(
            float(np.max(np.linalg.norm(c2 - c1, axis=1))),
            float(np.linalg.norm(kinematics.end_effector(q2) - kinematics.end_effector(q))),
        )
        assert moved <= bound + 1e-12, f"seed {SEED}: moved {moved} > bound {bound}"
        tightest = max(tightest, moved / bound)
    # A bound far above the true motion would make the skip useless.
    assert tightest > 0.5


def test_a_too_small_reach_breaks_the_bound() -> None:
    # The check above can fail: with the last joint's reach halved, turning only that
    # joint moves the end effector farther than the bound allows.
    kinematics = ArmKinematics(arm_spec())
    reach = joint_reach(kinematics)
    assert reach is not None
    q = np.zeros(4)
    q2 = np.array([0.0, 0.0, 0.0, 0.5])
    moved = float(np.linalg.norm(kinematics.end_effector(q2) - kinematics.end_effector(q)))
    assert moved <= reach[-1] * 0.5
    assert moved > 0.5 * reach[-1] * 0.5


def test_only_kinematics_of_a_known_geometry_get_a_reach() -> None:
    assert joint_reach(PlanarArm()) is None
    longer = ARM.__class__(
        **{**ARM.__dict__, "end_effector_offset_m": ARM.end_effector_offset_m + 0.2}
    )
    assert joint_reach(ArmKinematics(arm=longer)) is None
    assert joint_reach(ArmKinematics(arm_spec(), payload_mass_kg=0.5)) is not None


def test_an_anchor_proves_clear_only_within_its_finite_clearance() -> None:
    reach = joint_reach(ArmKinematics(arm_spec()))
    assert reach is not None
    anchor = ClearanceAnchor(reach)
    q = [0.1, 0.2, 0.3, 0.4]
    assert not anchor.proves_clear(q)
    anchor.update(q, 0.1)
    assert anchor.proves_clear(q)
    assert anchor.proves_clear([0.1 + 0.09 / reach[0], 0.2, 0.3, 0.4])
    assert not anchor.proves_clear([0.1 + 0.11 / reach[0], 0.2, 0.3, 0.4])
    anchor.update(q, -0.01)
    assert not anchor.proves_clear(q)
    # A broken model's clearance (inf or NaN) must never license a skip.
    for broken in (math.inf, math.nan):
        anchor.update(q, broken)
        assert not anchor.proves_clear(q)
