"""The limits the supervisor enforces, built from a RobotSpec or a YAML file.

:class:`SafetyLimits` is the one description of what "safe" means for a robot: joint
position limits with a margin, velocity, acceleration and torque limits, the largest
change of the command per control step, the end-effector workspace, obstacles and the
command staleness limit, plus the numbers of the supervisor's one-step model
(acceleration produced by a full action, deceleration braking can rely on, and the
viscous damping every joint is sure to have).

Invariant: a constructed ``SafetyLimits`` is consistent (every per-joint tuple has one
finite entry per joint, limits are positive, the position range minus its margins is
non-empty); anything else raises :class:`LimitsError` at construction, never later in
the control loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field

from tether.errors import SpecError
from tether.safety.errors import LimitsError
from tether.spec import Box, ObservationLayout, Obstacle, RobotSpec, Sphere


class LimitsConfig(BaseModel):
    """How :meth:`SafetyLimits.from_spec` derives limits from a robot's declared ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    position_margin_rad: float = Field(
        default=0.05, ge=0.0, description="Distance kept from each joint's position limits (rad)"
    )
    velocity_fraction: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Fraction of the spec's joint velocity limit allowed (1)",
    )
    acceleration_limit_scale: float = Field(
        default=1.0,
        gt=0.0,
        description="Joint acceleration limit as a multiple of the spec's acceleration limit (1)",
    )
    torque_fraction: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Fraction of the spec's torque limit allowed (1)"
    )
    braking_fraction: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="Deceleration braking may rely on, as a fraction of the acceleration limit (1)",
    )
    acceleration_per_action_scale: float = Field(
        default=1.0,
        gt=0.0,
        description="Upper bound of the acceleration a full action produces, as a multiple of "
        "the spec's acceleration limit; from_spec's acceleration_per_action_rad_s2 overrides it (1)",
    )
    max_action_change_per_step: float = Field(
        default=2.0,
        gt=0.0,
        le=2.0,
        description="Largest change of a joint's normalized torque per control step; 2 = unlimited (1)",
    )
    workspace_margin_m: float = Field(
        default=0.02,
        ge=0.0,
        description="Distance the end effector keeps inside the workspace box (m)",
    )
    obstacle_margin_m: float = Field(
        default=0.03,
        ge=0.0,
        description="Clearance every collision sphere keeps from obstacles (m)",
    )
    command_staleness_s: float = Field(
        default=0.1,
        gt=0.0,
        description="Oldest observation an action may still be computed from (s)",
    )


@dataclass(frozen=True)
class SafetyLimits:
    """Per-joint and Cartesian limits of one robot (per-joint tuples have one entry per joint).

    Actions are normalized torques: ``1.0`` on joint ``i`` is ``action_scale_nm[i]``.
    ``acceleration_per_action_rad_s2`` is an upper bound of the acceleration a full action
    (beyond gravity compensation) can cause; ``braking_deceleration_rad_s2`` is the
    deceleration braking can rely on. The supervisor takes the worst of the two.
    """

    joint_names: tuple[str, ...]
    control_period_s: float
    layout: ObservationLayout
    position_low_rad: tuple[float, ...]
    position_high_rad: tuple[float, ...]
    position_margin_rad: tuple[float, ...]
    velocity_limit_rad_s: tuple[float, ...]
    acceleration_limit_rad_s2: tuple[float, ...]
    acceleration_per_action_rad_s2: tuple[float, ...]
    braking_deceleration_rad_s2: tuple[float, ...]
    torque_limit_nm: tuple[float, ...]
    action_scale_nm: tuple[float, ...]
    max_action_change_per_step: tuple[float, ...]
    home_position_rad: tuple[float, ...]
    workspace: Box | None = None
    workspace_margin_m: float = 0.02
    obstacles: tuple[Obstacle, ...] = ()
    obstacle_margin_m: float = 0.03
    command_staleness_s: float = 0.1
    observation_dim: int = 0  # exact observation length; 0 accepts any that holds the layout
    # The margin of the hard range, kept under any gain in the declared range, when
    # ``position_margin_rad`` is a tightened one (``tightened``): the supervisor steers a
    # joint back into the tightened range without braking harder than the fastest gain
    # allows, and only the hard range gets the weak-gain brake. () = position_margin_rad.
    hard_position_margin_rad: tuple[float, ...] = ()
    # The smallest viscous damping each joint is guaranteed, in normalized torque per
    # rad/s of its velocity (at the strongest actuator gain, since actions are scaled by
    # it and damping is not): the one-step model becomes ``q̈ = G·(u − u_gravity − c·q̇)``,
    # solved exactly over the step. () = no damping assumed (``q̈ = G·(u − u_gravity)``).
    # Never more than the robot is sure to have: it lets the policy push harder.
    viscous_damping_per_rad_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if n == 0:
            raise LimitsError("SafetyLimits.joint_names must name at least one joint, got none")
        _require_positive("control_period_s", self.control_period_s)
        _require_positive("command_staleness_s", self.command_staleness_s)
        for name in ("workspace_margin_m", "obstacle_margin_m"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise LimitsError(
                    f"SafetyLimits.{name} must be a finite number >= 0, got {value}; "
                    "use 0 for no margin"
                )
        for f in _PER_JOINT:
            values = getattr(self, f)
            if len(values) != n:
                raise LimitsError(
                    f"SafetyLimits.{f} needs {n} entries (one per joint {self.joint_names}), "
                    f"got {len(values)}"
                )
            if not all(math.isfinite(v) for v in values):
                raise LimitsError(f"SafetyLimits.{f} must be finite on every joint, got {values}")
        for f in _POSITIVE:
            values = getattr(self, f)
            if any(v <= 0 for v in values):
                raise LimitsError(f"SafetyLimits.{f} must be positive on every joint, got {values}")
        hard = self.hard_position_margin_rad
        if hard and (
            len(hard) != n
            or not all(
                math.isfinite(h) and 0 <= h <= m
                for h, m in zip(hard, self.position_margin_rad, strict=True)
            )
        ):
            raise LimitsError(
                f"SafetyLimits.hard_position_margin_rad must be empty or hold {n} finite "
                f"entries between 0 and position_margin_rad {self.position_margin_rad}, got "
                f"{hard}; the hard range must contain the tightened one"
            )
        damping = self.viscous_damping_per_rad_s
        if damping and (len(damping) != n or not all(math.isfinite(c) and c >= 0 for c in damping)):
            raise LimitsError(
                f"SafetyLimits.viscous_damping_per_rad_s must be empty or hold {n} finite "
                f"entries >= 0 (one per joint {self.joint_names}), got {damping}; use () "
                "when the robot's damping is not known"
            )
        if any(m < 0 for m in self.position_margin_rad):
            raise LimitsError(
                f"SafetyLimits.position_margin_rad must be >= 0 on every joint, got "
                f"{self.position_margin_rad}; a negative margin would allow leaving the limits"
            )
        for i, name in enumerate(self.joint_names):
            lo, hi = self.position_low_rad[i], self.position_high_rad[i]
            margin = self.position_margin_rad[i]
            if not lo + margin < hi - margin:
                raise LimitsError(
                    f"joint {name!r}: position limits [{lo}, {hi}] leave no room inside a "
                    f"margin of {margin} rad on each side; lower the margin or fix the limits"
                )
            if self.torque_limit_nm[i] > self.action_scale_nm[i] * (1 + 1e-9):
                raise LimitsError(
                    f"joint {name!r}: torque_limit_nm {self.torque_limit_nm[i]} exceeds "
                    f"action_scale_nm {self.action_scale_nm[i]} (what action 1.0 means); "
                    "a torque limit beyond the actuator's range cannot be enforced"
                )
            if self.max_action_change_per_step[i] > 2.0:
                raise LimitsError(
                    f"joint {name!r}: max_action_change_per_step must be at most 2 "
                    f"(the whole [-1, 1] range), got {self.max_action_change_per_step[i]}"
                )
        if self.observation_dim < 0 or (
            self.observation_dim and self.observation_dim < self.min_obs_dim
        ):
            raise LimitsError(
                f"SafetyLimits.observation_dim {self.observation_dim} is shorter than the "
                f"layout needs ({self.min_obs_dim}); use the robot's obs_dim or 0"
            )
        for f, (start, stop) in (
            ("joint_position", self.layout.joint_position),
            ("joint_velocity", self.layout.joint_velocity),
        ):
            if stop - start != n:
                raise LimitsError(
                    f"SafetyLimits.layout.{f} must span {n} entries, got ({start}, {stop})"
                )

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)

    @property
    def hard_margin_rad(self) -> tuple[float, ...]:
        """The margin of the range kept under any gain (the untightened margin)."""
        return self.hard_position_margin_rad or self.position_margin_rad

    @property
    def damping_per_rad_s(self) -> tuple[float, ...]:
        """``viscous_damping_per_rad_s`` with one entry per joint (0 where none is assumed)."""
        return self.viscous_damping_per_rad_s or (0.0,) * self.n_joints

    @property
    def min_obs_dim(self) -> int:
        """The shortest observation the layout can be read from."""
        return max(self.layout.joint_position[1], self.layout.joint_velocity[1])

    @classmethod
    def from_spec(
        cls,
        spec: RobotSpec,
        config: LimitsConfig | None = None,
        *,
        acceleration_per_action_rad_s2: Sequence[float] | None = None,
        viscous_damping_per_rad_s: Sequence[float] = (),
    ) -> SafetyLimits:
        """Limits derived from the robot's declared ones, shaped by ``config``.

        The spec's acceleration limit is read as the deceleration every joint can achieve
        (what ``tether.sim`` declares). ``acceleration_per_action_rad_s2`` is the largest
        acceleration a full action can cause on each joint (e.g. max of ``|M(q)⁻¹|·τ_max``
        over the workspace); without it, ``config.acceleration_per_action_scale`` times the
        acceleration limit is assumed, which is only right for robots whose actuators
        cannot accelerate faster than they are allowed to. ``viscous_damping_per_rad_s``
        is the smallest damping each joint is sure to have (normalized torque per rad/s);
        the default assumes none.
        """
        cfg = config or LimitsConfig()
        accel = np.asarray(spec.joint_acceleration_limit_rad_s2, dtype=np.float64)
        n = spec.n_joints
        gain = (
            _scaled(accel, cfg.acceleration_per_action_scale)
            if acceleration_per_action_rad_s2 is None
            else tuple(float(a) for a in acceleration_per_action_rad_s2)
        )
        return cls(
            joint_names=spec.joint_names,
            control_period_s=spec.control_period_s,
            layout=spec.layout,
            position_low_rad=spec.joint_position_low_rad,
            position_high_rad=spec.joint_position_high_rad,
            position_margin_rad=(cfg.position_margin_rad,) * n,
            velocity_limit_rad_s=_scaled(spec.joint_velocity_limit_rad_s, cfg.velocity_fraction),
            acceleration_limit_rad_s2=_scaled(accel, cfg.acceleration_limit_scale),
            acceleration_per_action_rad_s2=gain,
            braking_deceleration_rad_s2=_scaled(accel, cfg.braking_fraction),
            torque_limit_nm=_scaled(spec.torque_limit_nm, cfg.torque_fraction),
            action_scale_nm=spec.torque_limit_nm,
            max_action_change_per_step=(cfg.max_action_change_per_step,) * n,
            home_position_rad=spec.home_position_rad,
            workspace=spec.workspace,
            workspace_margin_m=cfg.workspace_margin_m,
            obstacles=spec.obstacles,
            obstacle_margin_m=cfg.obstacle_margin_m,
            command_staleness_s=cfg.command_staleness_s,
            observation_dim=spec.obs_dim,
            viscous_damping_per_rad_s=tuple(float(c) for c in viscous_damping_per_rad_s),
        )

    def tightened(self, factor: float) -> SafetyLimits:
        """Stricter limits for the RESTRICTED level.

        Velocity, acceleration and command-change limits scale by ``factor``; the usable
        position range and workspace shrink about their centres by ``factor``; obstacle
        clearance grows by ``1/factor``; commands must be fresher by ``factor``. Torque and
        braking stay: braking authority is what keeps the robot inside the tighter limits.
        The untightened position margin stays as ``hard_position_margin_rad``: a joint
        the tightening leaves outside the new range is steered back without reversing
        it, and only the original range gets the brake that assumes the weakest gain
        (that brake reverses the joint at the arm's true gain, and with the halved
        velocity limit braking the reversal the other way the joint chattered at full
        torque and walked across its true limit).
        """
        if not (math.isfinite(factor) and 0 < factor <= 1):
            raise LimitsError(f"tightening factor must be in (0, 1] (1 = unchanged), got {factor}")
        if factor == 1.0:
            return self
        lo = np.asarray(self.position_low_rad)
        hi = np.asarray(self.position_high_rad)
        half = (hi - lo) / 2
        usable = half - np.asarray(self.position_margin_rad)
        workspace_margin = self.workspace_margin_m
        if self.workspace is not None:
            ws_half = min(
                (h - lo_) / 2
                for lo_, h in zip(self.workspace.low, self.workspace.high, strict=True)
            )
            workspace_margin = ws_half - factor * (ws_half - self.workspace_margin_m)
        return replace(
            self,
            position_margin_rad=_tuple(half - factor * usable),
            hard_position_margin_rad=self.hard_margin_rad,
            velocity_limit_rad_s=_scaled(self.velocity_limit_rad_s, factor),
            acceleration_limit_rad_s2=_scaled(self.acceleration_limit_rad_s2, factor),
            max_action_change_per_step=_scaled(self.max_action_change_per_step, factor),
            workspace_margin_m=max(workspace_margin, self.workspace_margin_m),
            obstacle_margin_m=self.obstacle_margin_m / factor,
            command_staleness_s=self.command_staleness_s * factor,
        )

    def to_dict(self) -> dict[str, Any]:
        """A YAML/JSON-safe mapping; :meth:`from_dict` inverts it exactly."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "layout":
                out[f.name] = {k: list(v) for k, v in _layout_items(value)}
            elif f.name == "workspace":
                out[f.name] = None if value is None else _obstacle_dict(value)
            elif f.name == "obstacles":
                out[f.name] = [_obstacle_dict(o) for o in value]
            elif isinstance(value, tuple):
                out[f.name] = list(value)
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SafetyLimits:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise LimitsError(
                f"safety limits have unknown fields {unknown}; expected only {sorted(known)}"
            )
        kwargs: dict[str, Any] = {}
        try:
            for key, value in data.items():
                if key == "layout":
                    kwargs[key] = ObservationLayout(**{k: tuple(v) for k, v in value.items()})
                elif key == "workspace":
                    kwargs[key] = None if value is None else _box(value)
                elif key == "obstacles":
                    kwargs[key] = tuple(_obstacle(o) for o in value)
                elif key == "joint_names":
                    kwargs[key] = tuple(str(v) for v in value)
                elif key == "observation_dim":
                    kwargs[key] = int(value)
                elif isinstance(value, list):
                    kwargs[key] = tuple(float(v) for v in value)
                else:
                    kwargs[key] = float(value)
            return cls(**kwargs)
        except (TypeError, KeyError, SpecError) as exc:
            raise LimitsError(f"safety limits cannot be built: {exc}") from exc

    @classmethod
    def from_yaml(cls, path: str | Path) -> SafetyLimits:
        """Read limits written in :meth:`to_dict`'s form (optionally under a ``limits:`` key)."""
        return cls.from_dict(limits_mapping(path))

    def to_yaml(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def limits_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping of safety-limit fields in the YAML file at ``path`` (at the top level or
    under a ``limits:`` key), not yet checked field by field."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise LimitsError(f"cannot read safety limits from {p}: {exc}") from exc
    if isinstance(data, dict) and set(data) == {"limits"}:
        data = data["limits"]
    if not isinstance(data, dict):
        found = "nothing" if data is None else type(data).__name__
        raise LimitsError(f"{p} must hold a mapping of safety-limit fields, got {found}")
    return data


_PER_JOINT = (
    "position_low_rad",
    "position_high_rad",
    "position_margin_rad",
    "velocity_limit_rad_s",
    "acceleration_limit_rad_s2",
    "acceleration_per_action_rad_s2",
    "braking_deceleration_rad_s2",
    "torque_limit_nm",
    "action_scale_nm",
    "max_action_change_per_step",
    "home_position_rad",
)
_POSITIVE = (
    "velocity_limit_rad_s",
    "acceleration_limit_rad_s2",
    "acceleration_per_action_rad_s2",
    "braking_deceleration_rad_s2",
    "torque_limit_nm",
    "action_scale_nm",
    "max_action_change_per_step",
)


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise LimitsError(f"SafetyLimits.{name} must be a positive finite number, got {value}")


def _scaled(values: Sequence[float] | np.ndarray, factor: float) -> tuple[float, ...]:
    return tuple(float(v) * factor for v in values)


def _tuple(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _layout_items(layout: ObservationLayout) -> list[tuple[str, tuple[int, int]]]:
    return layout.items()


def _obstacle_dict(o: Obstacle) -> dict[str, Any]:
    if isinstance(o, Sphere):
        return {"kind": "sphere", "name": o.name, "center": list(o.center), "radius": o.radius}
    return {"kind": "box", "name": o.name, "low": list(o.low), "high": list(o.high)}


def _box(d: dict[str, Any]) -> Box:
    return Box(_vec3(d["low"]), _vec3(d["high"]), str(d.get("name", "box")))


def _obstacle(d: dict[str, Any]) -> Obstacle:
    kind = d.get("kind")
    if kind == "sphere":
        return Sphere(_vec3(d["center"]), float(d["radius"]), str(d.get("name", "obstacle")))
    if kind == "box":
        return _box(d)
    raise LimitsError(f"obstacle kind must be 'sphere' or 'box', got {kind!r}")


def _vec3(v: Sequence[Any]) -> tuple[float, float, float]:
    if len(v) != 3:
        raise LimitsError(f"a point needs three coordinates, got {list(v)}")
    return (float(v[0]), float(v[1]), float(v[2]))
