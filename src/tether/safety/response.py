"""What one control step of held torque does to a joint's velocity: the supervisor's
one-step model, solved exactly.

Per joint, ``q̈ = G·(p − c·q̇)`` with ``p = u − u_gravity`` the normalized torque beyond
gravity compensation, ``G`` the acceleration of a full action (bounded above by
``acceleration_per_action_rad_s2``, below by ``braking_deceleration_rad_s2``) and ``c``
the smallest viscous damping the joint is sure to have (``viscous_damping_per_rad_s``).
Held for one control period ``dt``, the velocity becomes exactly

    v' = v·e + p·s,    e = exp(−G·c·dt),    s = (1 − e)/c    (→ G·dt as c → 0),

a convex combination of ``v`` and the steady speed ``p/c``: it never passes the steady
speed, however large ``G·c·dt`` is. (On the built-in arm's wrist it is above 3 at the
fastest gain; explicit Euler, ``v + dt·q̈``, overshoots and oscillates there.) Inverted,
the push that takes ``v`` to ``w`` in one step is ``(w − v·e)·k`` with ``k = 1/s``.

Invariant: with ``c = 0`` every number is the undamped model's to the bit (``e = 1``,
``k = 1/(G·dt)``, ``s = G·dt``), so robots without a declared damping keep the old model.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import NamedTuple


class StepResponse(NamedTuple):
    """Per joint, at one end of the gain range (tuples of n floats)."""

    decay: tuple[float, ...]  # e: the fraction of the velocity left after one step (1)
    per_velocity: tuple[float, ...]  # k: push per rad/s of one-step velocity change (1/(rad/s))
    velocity_per_push: tuple[float, ...]  # s = 1/k: rad/s gained per unit of push (rad/s)


def step_response(
    gain_rad_s2: Sequence[float], damping_per_rad_s: Sequence[float], dt: float
) -> StepResponse:
    """The exact one-step response of each joint at acceleration gain ``gain_rad_s2``."""
    decay: list[float] = []
    per_velocity: list[float] = []
    velocity_per_push: list[float] = []
    for g, c in zip(gain_rad_s2, damping_per_rad_s, strict=True):
        # expm1 keeps 1 − e accurate when G·c·dt is small (weak gain, light damping); a
        # damping so small that G·c·dt is subnormal (imprecise) is no damping.
        rate = g * c * dt
        lost = -math.expm1(-rate)
        if rate >= sys.float_info.min:
            decay.append(math.exp(-rate))
            per_velocity.append(c / lost)
            velocity_per_push.append(lost / c)
        else:
            decay.append(1.0)
            per_velocity.append(1.0 / (g * dt))
            velocity_per_push.append(g * dt)
    return StepResponse(tuple(decay), tuple(per_velocity), tuple(velocity_per_push))
