"""The closed-form clearance agrees with the kinematics calls, and is refused where it
would not."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings, strategies as st

from safety.builders import PlanarArm, planar_limits
from tether.safety.chain import chain_clearance
from tether.safety.geometry import Clearance
from tether.safety.presets import arm_limits
from tether.sim import ArmKinematics
from tether.sim.kinematics import PlanarChain
from tether.spec import Box

LIMITS = arm_limits()
KIN = ArmKinematics()
EXACT = Clearance(LIMITS)
FAST = chain_clearance(LIMITS, KIN)
LOW = np.asarray(LIMITS.position_low_rad)
HIGH = np.asarray(LIMITS.position_high_rad)

# Anywhere in the joint range and a little beyond (predicted stops can be).
poses = st.lists(st.floats(-0.2, 1.2), min_size=4, max_size=4).map(
    lambda f: LOW + np.asarray(f) * (HIGH - LOW)
)


@settings(max_examples=300, deadline=None)
@given(q=poses)
def test_closed_form_clearances_match_the_kinematics_calls(q: np.ndarray) -> None:
    assert FAST is not None
    centers, radii = KIN.collision_spheres(q)
    assert abs(FAST.obstacles(q.tolist()) - EXACT.obstacles(centers, radii)) < 1e-12
    assert abs(FAST.workspace(q.tolist()) - EXACT.workspace(KIN.end_effector(q))) < 1e-12


class _Lying(ArmKinematics):
    """The arm's kinematics with a closed form whose forearm is 5 cm too short."""

    def planar_chain(self) -> PlanarChain | None:
        chain = super().planar_chain()
        assert chain is not None
        lengths = list(chain.link_lengths_m)
        lengths[2] -= 0.05
        return dataclasses.replace(chain, link_lengths_m=tuple(lengths))


def test_the_closed_form_is_used_only_where_it_agrees() -> None:
    assert FAST is not None
    # A closed form that disagrees with its own kinematics calls is refused.
    assert chain_clearance(LIMITS, _Lying()) is None
    # Kinematics without one, none at all, and obstacles it does not model (boxes).
    assert chain_clearance(planar_limits(), PlanarArm()) is None
    assert chain_clearance(LIMITS, None) is None
    boxed = dataclasses.replace(
        LIMITS, obstacles=(*LIMITS.obstacles, Box((0.3, 0.3, 0.0), (0.4, 0.4, 0.1)))
    )
    assert chain_clearance(boxed, KIN) is None
