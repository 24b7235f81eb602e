"""What the supervisor needs to know about an arm's geometry and statics.

:class:`Kinematics` is a structural Protocol: ``tether.sim.ArmKinematics`` implements it
from the MuJoCo model; a user with another robot supplies any object with these three
methods. Every method is a pure function of the joint positions (no simulation step),
so the supervisor may call it on predicted states.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Kinematics(Protocol):
    def end_effector(self, q: np.ndarray) -> np.ndarray:
        """End-effector position (3,) in the base frame (m) at joint positions ``q`` (rad)."""
        ...

    def collision_spheres(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Spheres covering the arm at ``q``: centers (K, 3) and radii (K,) in metres."""
        ...

    def gravity_torque(self, q: np.ndarray) -> np.ndarray:
        """Joint torques (n,) in N·m that hold the arm still against gravity at ``q``."""
        ...
