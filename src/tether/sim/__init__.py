"""tether.sim: the built-in robot, a 4-joint torque-controlled MuJoCo arm.

``arm_spec()`` declares its limits, ``ArmKinematics`` answers kinematic questions about
it without stepping physics, ``ArmEnv`` (registered as ``tether/Arm-v0`` on import)
simulates it under ``ArmDynamics`` that a ``DomainRandomization`` draws per episode and
a ``DriftSchedule`` changes as a run goes on. See docs/sim.md.
"""

import gymnasium

from tether.sim.config import ArmEnvConfig
from tether.sim.drift import DriftRamp, DriftSchedule
from tether.sim.dynamics import ArmDynamics
from tether.sim.env import ArmEnv, ArmState
from tether.sim.errors import SimConfigError, SimError
from tether.sim.kinematics import ArmKinematics
from tether.sim.randomization import DomainRandomization
from tether.sim.spec import arm_spec

ENV_ID = "tether/Arm-v0"

# Importing twice (e.g. after a reload) must not register twice: gymnasium warns on that.
if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="tether.sim.env:ArmEnv")

__all__ = [
    "ENV_ID",
    "ArmDynamics",
    "ArmEnv",
    "ArmEnvConfig",
    "ArmKinematics",
    "ArmState",
    "DomainRandomization",
    "DriftRamp",
    "DriftSchedule",
    "SimConfigError",
    "SimError",
    "arm_spec",
]
