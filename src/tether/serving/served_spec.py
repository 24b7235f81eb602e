"""What the served policy expects of a robot, as sessions and Describe see it.

Built once per server from the bundle (its manifest's names and robot spec); a Control
session is accepted only when the robot's fingerprint, dims and joint names match it.
Invariant: ``fingerprint`` is ``tether.spec.fingerprint_of`` over exactly the names and
the command interface held here, so a client computing it from the same RobotSpec always
agrees, and a policy for torque commands is never served to a robot commanded by
position (or the other way round).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tether.serving.errors import SpecMismatch
from tether.spec import CommandInterface, RobotSpec, fingerprint_of
from tether.v1 import policy_pb2 as pb


@dataclass(frozen=True)
class ServedSpec:
    """Names, dims and control period of the robot the policy serves."""

    name: str
    observation_names: tuple[str, ...]
    action_names: tuple[str, ...]
    joint_names: tuple[str, ...]
    control_period_s: float
    command_interface: CommandInterface = "torque"
    robot_spec: RobotSpec | None = None

    @classmethod
    def from_robot_spec(cls, spec: RobotSpec) -> ServedSpec:
        return cls(
            name=spec.name,
            observation_names=spec.observation_names,
            action_names=spec.action_names,
            joint_names=spec.joint_names,
            control_period_s=spec.control_period_s,
            command_interface=spec.command_interface,
            robot_spec=spec,
        )

    @property
    def obs_dim(self) -> int:
        return len(self.observation_names)

    @property
    def act_dim(self) -> int:
        return len(self.action_names)

    @property
    def fingerprint(self) -> str:
        return fingerprint_of(
            self.observation_names,
            self.action_names,
            self.joint_names,
            command_interface=self.command_interface,
        )

    def check_session(self, open_msg: pb.SessionOpen) -> None:
        """Raise ``SpecMismatch`` showing both sides unless the robot matches this spec."""
        problems: list[str] = []
        if open_msg.spec_fingerprint != self.fingerprint:
            problems.append(
                f"spec_fingerprint: robot sent {open_msg.spec_fingerprint!r}, "
                f"policy has {self.fingerprint!r} (names and the command interface: the "
                f"policy commands {self.command_interface})"
            )
        if open_msg.obs_dim != self.obs_dim:
            problems.append(f"obs_dim: robot sent {open_msg.obs_dim}, policy has {self.obs_dim}")
        if open_msg.act_dim != self.act_dim:
            problems.append(f"act_dim: robot sent {open_msg.act_dim}, policy has {self.act_dim}")
        if tuple(open_msg.joint_names) != self.joint_names:
            problems.append(
                f"joint_names: robot sent {list(open_msg.joint_names)}, "
                f"policy has {list(self.joint_names)}"
            )
        if problems:
            raise SpecMismatch(
                f"robot {open_msg.robot_id!r} does not match the served policy "
                f"({self.name!r}): " + "; ".join(problems) + ". Serve a policy trained for "
                "this robot, or fix the robot's spec"
            )

    def to_proto(self) -> pb.RobotSpecInfo:
        return pb.RobotSpecInfo(
            name=self.name,
            fingerprint=self.fingerprint,
            obs_dim=self.obs_dim,
            act_dim=self.act_dim,
            observation_names=list(self.observation_names),
            action_names=list(self.action_names),
            joint_names=list(self.joint_names),
            control_period_s=self.control_period_s,
            spec_json=json.dumps(self.robot_spec.to_dict()) if self.robot_spec else "",
        )
