"""A bundle whose actor steps from the robot's previous command instead of naming an
absolute target.

A position-commanded robot takes absolute joint targets (normalized actions in [-1, 1],
``RobotSpec.commanded_position``), and its supervisor caps how far a target may move per
step (velocity limit × period) and how much that move may change from the previous one
(acceleration limit × period²: a few milliradians). An actor that names absolute targets
puts its own error and its sampling noise, scaled by the joint's whole range, into every
step, and the supervisor corrects almost all of them. :class:`CommandStepFrame` lets the
bundle declare instead that the actor's tanh output ``u`` (in [-1, 1] per joint) is the
change of the command's change, as a share of ``acceleration_step``:

    change = clip(previous_change + acceleration_step · u, ±velocity_step)
    target = previous_command + change

read from the observation's ``command`` and ``command_change`` slices (the robot reports
the command it is tracking). With the two steps below the supervisor's caps, any output
the actor can produce moves the command within both rate limits (the clip only brings
the change back toward a previous change that was within ``velocity_step``). An actor
naming the step itself (``change = velocity_step · u``, acceleration-clipped) cloned the
scripted controller far worse in a pilot (docs/learning.md). The wire action and the
supervisor stay absolute targets, unchanged. The engine applies the frame after
squashing, so log-probabilities are those of ``u``; a learner that replays executed wire
actions maps them back with :meth:`CommandStepFrame.outputs`.

Invariants: both maps work row by row (elementwise numpy), so a row's result does not
depend on its batch; :meth:`actions` returns float32 actions inside [-1, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tether.policy.errors import BundleSpecError

FRAME_KIND = "command_step"


@dataclass(frozen=True)
class CommandStepFrame:
    """The actor's output as the change of the previous command's change (see the module)."""

    command: tuple[int, int]
    """Observation slice of the command the robot tracks (rad)."""
    command_change: tuple[int, int]
    """Observation slice of that command's change from the one before (rad)."""
    center_rad: tuple[float, ...]
    """The target absolute action 0 commands, per joint (rad)."""
    half_range_rad: tuple[float, ...]
    """Radians per unit of absolute action, per joint (rad)."""
    acceleration_step_rad: tuple[float, ...]
    """The change of the command's change at output ±1, per joint (rad per step²)."""
    velocity_step_rad: tuple[float, ...]
    """The largest change of the command per step, per joint (rad per step)."""

    def __post_init__(self) -> None:
        n = len(self.center_rad)
        for name, span in (("command", self.command), ("command_change", self.command_change)):
            if len(span) != 2 or span[1] - span[0] != n or span[0] < 0:
                raise BundleSpecError(
                    f"action.frame.{name} must be an observation slice of {n} entries, got {span}"
                )
        for name, values in (
            ("half_range_rad", self.half_range_rad),
            ("acceleration_step_rad", self.acceleration_step_rad),
            ("velocity_step_rad", self.velocity_step_rad),
        ):
            if len(values) != n or not all(np.isfinite(v) and v > 0 for v in values):
                raise BundleSpecError(
                    f"action.frame.{name} needs {n} positive finite values, got {list(values)}"
                )
        if not all(np.isfinite(v) for v in self.center_rad):
            raise BundleSpecError(
                f"action.frame.center_rad must be finite, got {list(self.center_rad)}"
            )

    @property
    def obs_dim_needed(self) -> int:
        return max(self.command[1], self.command_change[1])

    def actions(self, observations: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Absolute normalized actions ``(B, n)`` float32 for tanh outputs ``(B, n)``."""
        obs = np.asarray(observations, dtype=np.float64)
        previous = obs[:, slice(*self.command)]
        before = obs[:, slice(*self.command_change)]
        velocity = np.asarray(self.velocity_step_rad)
        acceleration = np.asarray(self.acceleration_step_rad)
        change = before + acceleration * np.asarray(outputs, dtype=np.float64)
        target = previous + np.minimum(np.maximum(change, -velocity), velocity)
        action = (target - np.asarray(self.center_rad)) / np.asarray(self.half_range_rad)
        out: np.ndarray = np.minimum(np.maximum(action, -1.0), 1.0).astype(np.float32)
        return out

    def chunk_actions(self, observations: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        """Absolute actions ``(B, H, n)`` for a chunk's tanh outputs ``(B, H, n)``.

        Step 0 steps from the observed command and change, as :meth:`actions` does; step
        ``k`` steps from step ``k - 1``: its command (the absolute target step ``k - 1``
        sends, after the clip to [-1, 1]) and its change. So every step of a chunk moves
        within the frame's velocity and acceleration steps from the one before it, as
        consecutive single actions do.
        """
        obs = np.asarray(observations, dtype=np.float64)
        previous = obs[:, slice(*self.command)].copy()
        before = obs[:, slice(*self.command_change)].copy()
        velocity = np.asarray(self.velocity_step_rad)
        acceleration = np.asarray(self.acceleration_step_rad)
        center = np.asarray(self.center_rad)
        half = np.asarray(self.half_range_rad)
        u = np.asarray(outputs, dtype=np.float64)
        out = np.empty(u.shape, dtype=np.float32)
        for k in range(u.shape[1]):
            change = np.minimum(np.maximum(before + acceleration * u[:, k], -velocity), velocity)
            action = np.minimum(np.maximum((previous + change - center) / half, -1.0), 1.0)
            out[:, k] = action
            target = center + half * action
            before = target - previous
            previous = target
        return out

    def outputs(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """The tanh outputs ``(B, n)`` float32 in [-1, 1] closest to producing ``actions``
        (absolute normalized) from ``observations``: the inverse of :meth:`actions` where
        its clips did not bind, the nearest output in [-1, 1] where they did."""
        obs = np.asarray(observations, dtype=np.float64)
        target = np.asarray(self.center_rad) + np.asarray(self.half_range_rad) * np.asarray(
            actions, dtype=np.float64
        )
        change = target - obs[:, slice(*self.command)]
        u = (change - obs[:, slice(*self.command_change)]) / np.asarray(self.acceleration_step_rad)
        out: np.ndarray = np.minimum(np.maximum(u, -1.0), 1.0).astype(np.float32)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": FRAME_KIND,
            "command": list(self.command),
            "command_change": list(self.command_change),
            "center_rad": list(self.center_rad),
            "half_range_rad": list(self.half_range_rad),
            "acceleration_step_rad": list(self.acceleration_step_rad),
            "velocity_step_rad": list(self.velocity_step_rad),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> CommandStepFrame:
        known = {
            "kind", "command", "command_change", "center_rad", "half_range_rad",
            "acceleration_step_rad", "velocity_step_rad",
        }  # fmt: skip
        unknown = sorted(set(data) - known)
        if unknown or data.get("kind") != FRAME_KIND:
            raise BundleSpecError(
                f"{source}: field 'action.frame' must be a {FRAME_KIND!r} frame with the "
                f"fields {sorted(known)}; found kind {data.get('kind')!r}, unknown {unknown}"
            )
        try:
            return cls(
                command=(int(data["command"][0]), int(data["command"][1])),
                command_change=(int(data["command_change"][0]), int(data["command_change"][1])),
                center_rad=tuple(float(v) for v in data["center_rad"]),
                half_range_rad=tuple(float(v) for v in data["half_range_rad"]),
                acceleration_step_rad=tuple(float(v) for v in data["acceleration_step_rad"]),
                velocity_step_rad=tuple(float(v) for v in data["velocity_step_rad"]),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise BundleSpecError(f"{source}: field 'action.frame' is malformed: {exc}") from exc


def command_step_frame(
    spec: Any, *, acceleration_fraction: float, velocity_fraction: float
) -> CommandStepFrame:
    """The frame for a position-commanded ``spec`` whose observation reports its command:
    steps at the given fractions of the spec's acceleration × period² and velocity ×
    period (keep both below 1, so what the actor asks for passes the supervisor)."""
    lay = spec.layout
    if spec.command_interface != "position" or lay.command is None or lay.command_change is None:
        raise BundleSpecError(
            f"a command-step frame needs a position-commanded spec whose observation has "
            f"'command' and 'command_change' slices; {spec.name!r} ({spec.command_interface}) "
            "has not"
        )
    if not (0 < acceleration_fraction < 1 and 0 < velocity_fraction < 1):
        raise BundleSpecError(
            "command_step_frame fractions must lie in (0, 1), got acceleration "
            f"{acceleration_fraction}, velocity {velocity_fraction}"
        )
    ones = np.ones(spec.n_joints)
    low, high = spec.commanded_position(-ones), spec.commanded_position(ones)
    dt = spec.control_period_s
    return CommandStepFrame(
        command=lay.command,
        command_change=lay.command_change,
        center_rad=tuple(float(x) for x in (low + high) / 2),
        half_range_rad=tuple(float(x) for x in (high - low) / 2),
        acceleration_step_rad=tuple(
            acceleration_fraction * a * dt * dt for a in spec.joint_acceleration_limit_rad_s2
        ),
        velocity_step_rad=tuple(
            velocity_fraction * v * dt for v in spec.joint_velocity_limit_rad_s
        ),
    )
