"""tether.sim: the built-in robot, a 4-joint MuJoCo arm commanded by torque or by joint
position (``ArmEnvConfig.command_interface``; ``spec.DEFAULT_COMMAND_INTERFACE`` is the
switch).

``arm_spec()`` declares its limits, ``ArmKinematics`` answers kinematic questions about
it without stepping physics, ``ArmEnv`` (registered as ``tether/Arm-v0`` on import)
simulates it under ``ArmDynamics`` that a ``DomainRandomization`` draws per episode and
a ``DriftSchedule`` changes as a run goes on. Episodes end in an ``EpisodeOutcome``
(settled success, final distance); ``ReachController`` is the scripted controller and,
given the true dynamics, the oracle; ``run_episodes`` runs any controller on paired
tasks. See docs/sim.md.
"""

from typing import TYPE_CHECKING

import gymnasium

from tether.lazy import lazy_exports

if TYPE_CHECKING:
    from tether.sim.config import ArmEnvConfig
    from tether.sim.controllers import ReachController
    from tether.sim.drift import DriftRamp, DriftSchedule
    from tether.sim.dynamics import ArmDynamics
    from tether.sim.env import ArmEnv, ArmState
    from tether.sim.episodes import run_episodes
    from tether.sim.errors import SimConfigError, SimError
    from tether.sim.kinematics import ArmKinematics
    from tether.sim.outcome import EpisodeOutcome
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
    "EpisodeOutcome",
    "ReachController",
    "SimConfigError",
    "SimError",
    "arm_spec",
    "run_episodes",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
