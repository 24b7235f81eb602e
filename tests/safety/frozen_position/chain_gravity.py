"""Gravity torques of a yawing column carrying a pitching chain, in closed form.

For the built-in arm's layout (:class:`tether.safety.kinematics.PlanarChainLike`: joint 0
yaws about the vertical, joints 1.. pitch in one vertical plane, link ``l`` at the
cumulative pitch ``θ_l = q_1 + … + q_l`` from vertical), every body's centre of mass
lies on its link's axis, so its horizontal lever about pitch joint ``j`` is
``Σ_{l=j..b−1} L_l·sin θ_l + c_b·sin θ_b``. Summed over the bodies beyond ``j``, the
holding torque is

    g_j(q) = Σ_{l ≥ j} W_l · sin θ_l,    g_0(q) = 0,

with one weight ``W_l`` per pitching link (its own first moment of mass plus its length
times the mass it carries, times gravity, with the model's sign). The weights are read
off the kinematics itself at the pose where every pitch link lies horizontal, so a
payload the kinematics models is included.

Invariant: :func:`chain_gravity` returns a ``ChainGravity`` only after it agreed with the
kinematics' own ``gravity_torque`` to 1e-9 N·m (relative to the torques' size) at probe
poses; otherwise None, and callers keep calling ``gravity_torque``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate
from typing import cast

import numpy as np

from tether.safety.kinematics import ChainKinematics, Kinematics

_PROBES = (
    (0.0, 0.0, 0.0, 0.0),
    (0.7, -0.4, 1.1, 0.3),
    (-1.9, 1.5, -0.2, -1.2),
    (2.5, 1.8, 2.3, 1.5),
    (0.1, 0.3, 1.3, 0.6),
)
_AGREEMENT = 1e-9


class ChainGravity:
    """Nominal gravity torques (N·m) of a planar chain, in plain float arithmetic."""

    __slots__ = ("_n", "_weights")

    def __init__(self, weights: Sequence[float]) -> None:
        # weights[l - 1] belongs to pitching link l (l = 1..n-1).
        self._weights = tuple(float(w) for w in weights)
        self._n = len(self._weights) + 1

    @property
    def weights_nm(self) -> tuple[float, ...]:
        return self._weights

    def torques(self, q: Sequence[float]) -> list[float]:
        """Holding torque per joint at ``q`` (N·m), the yaw joint first (always 0)."""
        sin = math.sin
        weights = self._weights
        pitch = list(accumulate(q[1 : self._n]))
        out = [0.0] * self._n
        carried = 0.0
        # From the tip inward: joint j holds every link from j on.
        for link in range(self._n - 1, 0, -1):
            carried += weights[link - 1] * sin(pitch[link - 1])
            out[link] = carried
        return out


def chain_gravity(kinematics: Kinematics | None, n_joints: int) -> ChainGravity | None:
    """A verified closed form of ``kinematics.gravity_torque``, or None (see the module)."""
    if kinematics is None or not hasattr(kinematics, "planar_chain"):
        return None
    chain = cast(ChainKinematics, kinematics).planar_chain()
    if chain is None or len(chain.link_lengths_m) != n_joints or n_joints < 2:
        return None
    if len(_PROBES[0]) != n_joints:
        return None
    try:
        flat = np.zeros(n_joints)
        flat[1] = math.pi / 2  # every pitching link horizontal: sin θ_l = 1
        at_flat = [float(x) for x in np.asarray(kinematics.gravity_torque(flat), dtype=np.float64)]
        if len(at_flat) != n_joints:
            return None
        weights = [
            at_flat[j] - (at_flat[j + 1] if j + 1 < n_joints else 0.0) for j in range(1, n_joints)
        ]
        fast = ChainGravity(weights)
        for probe in _PROBES:
            exact = np.asarray(kinematics.gravity_torque(np.asarray(probe)), dtype=np.float64)
            mine = fast.torques(probe)
            scale = 1.0 + float(np.max(np.abs(exact)))
            if exact.shape != (n_joints,) or not all(
                abs(a - float(b)) <= _AGREEMENT * scale for a, b in zip(mine, exact, strict=True)
            ):
                return None
    except (TypeError, ValueError):
        return None
    return fast
