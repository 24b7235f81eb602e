"""Derives the deceleration each joint can really achieve, for ``RobotSpec``.

The safety supervisor brakes with ``joint_acceleration_limit_rad_s2``, so the number
must be true of the physics, not a wish. The declared vector ``a`` means: anywhere in
the rated envelope (weakest rated actuator gain, no payload or the heaviest rated one,
no help from damping or friction, any joint position inside the range, any velocity up
to the velocity limits), the computed-torque brake

    tau = M(q) · (−sign(q̇) ∘ a) + bias(q, q̇)

stays within every joint's torque limit, i.e. all joints can decelerate at ``a`` at
once, against gravity and the coupling between links. (Braking every joint at full
torque independently is *not* enough on this arm: the elbow's reaction can speed the
shoulder up.) We find the largest such ``a`` of a fixed per-joint shape by sampling the
envelope, then keep a safety margin.

Invariant: the result is positive on every joint, else the arm cannot even hold itself
and ``SimConfigError`` says which joint.
"""

from __future__ import annotations

import itertools
import math

import mujoco
import numpy as np
from numpy.typing import NDArray

from tether.sim.errors import SimConfigError
from tether.sim.geometry import ARM, ArmGeometry
from tether.sim.mjcf import build_model, set_payload

# Sampling finds the worst case only approximately; the margin covers what it missed
# (tests/sim/test_braking.py brakes from fresh random states to check).
DECELERATION_MARGIN = 0.8
# Declared limits are rounded down to this step (rad/s²) so they read as chosen numbers.
ROUND_STEP_RAD_S2 = 0.5


def derive_deceleration_limits(
    arm: ArmGeometry = ARM, *, samples: int = 512, seed: int = 0
) -> tuple[float, ...]:
    """Per-joint deceleration (rad/s²) all joints achieve at once in the rated envelope."""
    model = build_model(arm)
    data = mujoco.MjData(model)
    model.dof_damping[:] = 0.0
    model.dof_frictionloss[:] = 0.0
    n = len(arm.links)
    torque = arm.rated_min_actuator_gain * np.array([link.torque_limit_nm for link in arm.links])
    low = np.array([link.position_low_rad for link in arm.links])
    high = np.array([link.position_high_rad for link in arm.links])
    vmax = np.array([link.velocity_limit_rad_s for link in arm.links])
    shape = _shape(model, data, arm, torque)
    rng = np.random.default_rng(seed)
    mass = np.zeros((n, n))
    scale = np.inf
    for payload in (0.0, arm.rated_max_payload_kg):
        set_payload(model, payload)
        for _ in range(samples):
            q = rng.uniform(low, high)
            speed = rng.uniform(0.0, 1.0, n) * vmax
            for signs in itertools.product((-1.0, 1.0), repeat=n):
                direction = np.array(signs)
                data.qpos[:] = q
                data.qvel[:] = direction * speed
                mujoco.mj_forward(model, data)
                mujoco.mj_fullM(model, data, mass)
                per_unit = mass @ (-direction * shape)
                scale = min(scale, _largest_scale(per_unit, data.qfrc_bias, torque, arm))
    out = []
    for link, a in zip(arm.links, scale * shape, strict=True):
        out.append(math.floor(a * DECELERATION_MARGIN / ROUND_STEP_RAD_S2) * ROUND_STEP_RAD_S2)
        if out[-1] <= 0:
            raise SimConfigError(
                f"joint {link.joint!r} cannot brake in the rated envelope (largest common "
                f"deceleration {a:.3f} rad/s²); raise its torque limit above "
                f"{link.torque_limit_nm} N·m or shrink the rated payload"
            )
    return tuple(out)


def _shape(
    model: mujoco.MjModel, data: mujoco.MjData, arm: ArmGeometry, torque: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Each joint's own capability at home with the rated payload: torque over inertia."""
    set_payload(model, arm.rated_max_payload_kg)
    data.qpos[:] = [link.home_rad for link in arm.links]
    data.qvel[:] = 0.0
    mujoco.mj_forward(model, data)
    mass = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, mass)
    out: NDArray[np.float64] = torque / np.diag(mass)
    return out


def _largest_scale(
    per_unit: NDArray[np.float64],
    bias: NDArray[np.float64],
    torque: NDArray[np.float64],
    arm: ArmGeometry,
) -> float:
    """Largest s >= 0 with |s * per_unit + bias| <= torque on every joint (0 if none)."""
    scale = np.inf
    for i, link in enumerate(arm.links):
        if abs(bias[i]) > torque[i]:
            raise SimConfigError(
                f"joint {link.joint!r} needs {abs(bias[i]):.2f} N·m just to hold against gravity "
                f"and motion, above its rated {torque[i]:.2f} N·m; raise torque_limit_nm"
            )
        c = per_unit[i]
        if c > 0:
            scale = min(scale, (torque[i] - bias[i]) / c)
        elif c < 0:
            scale = min(scale, (-torque[i] - bias[i]) / c)
    return float(scale)
