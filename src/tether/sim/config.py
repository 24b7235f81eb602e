"""``ArmEnvConfig``: the task the built-in arm is asked to do, in one validated model.

Dynamics are not here (see ``ArmDynamics``, ``DomainRandomization``, ``DriftSchedule``);
this is the command interface, the episode, the target, the reward and what counts as
success.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tether.sim.spec import DEFAULT_COMMAND_INTERFACE
from tether.spec import CommandInterface


class ArmEnvConfig(BaseModel):
    """Episode length, target sampling and reward weights of ``tether/Arm-v0``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command_interface: CommandInterface = Field(
        default=DEFAULT_COMMAND_INTERFACE,
        description="How the arm is commanded: 'torque' (normalized motor torques) or "
        "'position' (normalized joint-position targets under the joint impedance "
        "controller) (name)",
    )
    episode_steps: int = Field(
        default=200,
        ge=1,
        le=100_000,
        description="Control steps per episode, then truncation (steps)",
    )
    success_radius_m: float = Field(
        default=0.05,
        gt=0.0,
        description="End-effector distance to the target that counts as reached (m)",
    )
    settle_steps: int = Field(
        default=10,
        ge=1,
        description="An episode succeeds when the end effector stays within the success "
        "radius over this many last steps: settled, not passing through (steps)",
    )
    end_when_settled: bool = Field(
        default=True,
        description="End the episode early (as a truncation: the task is done, the state is "
        "not terminal) once the end effector has stayed within the success radius with "
        "every joint slower than settle_speed_rad_s over the last settle_steps steps; "
        "otherwise every episode runs episode_steps (flag)",
    )
    settle_speed_rad_s: float = Field(
        default=0.1,
        gt=0.0,
        description="Joint speed below which the arm counts as at rest for end_when_settled "
        "(rad/s)",
    )
    distance_weight: float = Field(
        default=1.0,
        ge=0.0,
        description="Reward per metre of end-effector distance, subtracted (1/m)",
    )
    effort_weight: float = Field(
        default=0.01,
        ge=0.0,
        description="Torque interface: reward per unit of squared normalized torque, "
        "subtracted (1)",
    )
    command_change_weight: float = Field(
        default=0.05,
        ge=0.0,
        description="Position interface: reward per unit of squared change of the "
        "normalized command from the previous step, subtracted (1)",
    )
    success_bonus: float = Field(
        default=1.0,
        ge=0.0,
        description="Torque interface: reward added on each step within the success radius; "
        "position interface: the peak of the smooth bonus "
        "success_bonus * exp(-(distance / success_radius_m)^2) per step (1)",
    )
    contact_penalty: float = Field(
        default=1.0,
        ge=0.0,
        description="Reward subtracted on each step the arm touches the obstacle (1)",
    )
    initial_position_noise_rad: float = Field(
        default=0.1,
        ge=0.0,
        description="Half-width of the uniform spread around home at reset (rad)",
    )
    # 0.08: beyond the built-in supervisor's 6 cm obstacle margin with 2 cm to settle in.
    # At 5 cm the sampler drew targets whose pose lay 1 cm outside that margin; the way
    # there runs along it, and the shipped policy stalled on the margin 20 cm short, one
    # tiny correction a step, until its robot went RESTRICTED.
    target_obstacle_clearance_m: float = Field(
        default=0.08,
        ge=0.0,
        description="Gap kept between the arm at a target's sampled pose and the obstacle; "
        "keep it beyond the supervisor's obstacle margin, or targets lie where a supervised "
        "arm cannot settle (m)",
    )
    target_min_height_m: float = Field(
        default=0.05, description="Lowest target height above the base plane (m)"
    )
