"""tether.sim: the built-in robot, a 4-joint torque-controlled MuJoCo arm.

``arm_spec()`` declares its limits, ``ArmKinematics`` answers kinematic questions about
it without stepping physics (see docs/sim.md and docs/architecture.md).
"""

from tether.sim.errors import SimConfigError, SimError
from tether.sim.kinematics import ArmKinematics
from tether.sim.spec import arm_spec

__all__ = ["ArmKinematics", "SimConfigError", "SimError", "arm_spec"]
