"""What the supervisor needs to know about an arm's geometry and statics.

:class:`Kinematics` is a structural Protocol: ``tether.sim.ArmKinematics`` implements it
from the MuJoCo model; a user with another robot supplies any object with these three
methods. Every method is a pure function of the joint positions (no simulation step),
so the supervisor may call it on predicted states. :class:`ChainKinematics` is an
optional second Protocol: the same geometry in closed form, for speed.
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


class PlanarChainLike(Protocol):
    """A yawing column carrying links that pitch in one vertical plane (the built-in arm;
    ``tether.sim.kinematics.PlanarChain`` documents the closed form)."""

    @property
    def base_height_m(self) -> float: ...
    @property
    def link_lengths_m(self) -> tuple[float, ...]: ...
    @property
    def sphere_links(self) -> tuple[int, ...]: ...
    @property
    def sphere_offsets_m(self) -> tuple[float, ...]: ...
    @property
    def sphere_radii_m(self) -> tuple[float, ...]: ...
    @property
    def end_effector_offset_m(self) -> float: ...


@runtime_checkable
class ChainKinematics(Protocol):
    """Optional, beside :class:`Kinematics`: the same spheres and end effector in closed
    form, so the supervisor's swept checks evaluate a pose in plain float arithmetic
    instead of a kinematics call and numpy glue (several times faster per pose)."""

    def planar_chain(self) -> PlanarChainLike | None:
        """The closed form, or None when this robot does not have that layout."""
        ...
