"""A deployment's safety limits from a YAML file (``tether serve --limits FILE``).

The served robot's own limits (:func:`tether.safety.for_spec.limits_for`: the built-in
arm's preset, else those the bundle's robot spec declares) are the base. The file names
only the fields it changes, in :meth:`SafetyLimits.to_dict`'s form (at the top level or
under a ``limits:`` key), and may only make the supervisor stricter:

- joint ranges inside the base's, margins, staleness and the acceleration a full action
  is assumed to cause no smaller; velocity, acceleration, braking, torque, command-change
  limits and assumed damping no larger;
- a workspace inside the base's, every obstacle of the base kept (more may be added);
- the fields that describe the robot rather than the deployment (joint names, control
  period, observation layout and length, what action 1.0 means, the tightened-range
  margin the degradation machine derives) as the base has them;
- a home position inside the resulting range and its margin;
- a workspace, obstacles or their margins only for a robot the server has kinematics
  for: on any other robot nothing would check them.

Invariant: limits read here are never looser than the base on any field. A file that
would loosen one, name another robot or ask for checks that nothing runs is refused
with a :class:`LimitsError` naming every offending field, before the server starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tether.safety.errors import LimitsError
from tether.safety.limits import SafetyLimits, limits_mapping
from tether.spec import Box

# Fields that describe the robot, not the deployment: a file may repeat them, not change them.
_ROBOT_FIELDS = (
    "joint_names",
    "control_period_s",
    "layout",
    "observation_dim",
    "action_scale_nm",
    "hard_position_margin_rad",
)
_CARTESIAN_FIELDS = ("workspace", "workspace_margin_m", "obstacles", "obstacle_margin_m")
_LOWER_IS_STRICTER = (
    "position_high_rad",
    "velocity_limit_rad_s",
    "acceleration_limit_rad_s2",
    "braking_deceleration_rad_s2",
    "torque_limit_nm",
    "max_action_change_per_step",
    "command_staleness_s",
)
_HIGHER_IS_STRICTER = (
    "position_low_rad",
    "position_margin_rad",
    "acceleration_per_action_rad_s2",
    "workspace_margin_m",
    "obstacle_margin_m",
)


def read_limits_file(path: str | Path, base: SafetyLimits, *, cartesian: bool) -> SafetyLimits:
    """``base`` with the fields of the YAML file at ``path`` applied (module docstring);
    ``cartesian``: whether the server checks this robot's workspace and obstacles."""
    p = Path(path)
    data = limits_mapping(p)
    if not data:
        raise LimitsError(
            f"{p} names no safety-limit field to change (e.g. velocity_limit_rad_s: "
            "[1.0, 1.0, 1.0, 1.0]); leave --limits out to serve the robot's own limits"
        )
    if not cartesian and (named := sorted(set(data) & set(_CARTESIAN_FIELDS))):
        raise LimitsError(
            f"{p} sets {', '.join(named)}, but the server has no kinematics for this robot "
            "and checks only its joints: nothing would keep it inside a workspace or clear "
            "of an obstacle; remove those fields"
        )
    try:
        merged = SafetyLimits.from_dict({**base.to_dict(), **data})
    except (LimitsError, ValueError, AttributeError) as exc:
        raise LimitsError(f"safety limits in {p}: {exc}") from exc
    problems = _looser(merged, base)
    if problems:
        raise LimitsError(
            f"safety limits in {p} go beyond what the served robot's own limits allow "
            f"(a limits file may only make them stricter): {'; '.join(problems)}"
        )
    return merged


def _looser(limits: SafetyLimits, base: SafetyLimits) -> list[str]:
    """Every way ``limits`` is looser than ``base``, or changes a robot field."""
    out: list[str] = []
    for name in _ROBOT_FIELDS:
        if getattr(limits, name) != getattr(base, name):
            out.append(
                f"{name} is {_shown(getattr(limits, name))}, the robot's is "
                f"{_shown(getattr(base, name))} (it describes the robot; leave it out)"
            )
    for names, looser in (
        (_LOWER_IS_STRICTER, lambda new, old: new > old),
        (_HIGHER_IS_STRICTER, lambda new, old: new < old),
    ):
        for name in names:
            out.extend(_compare(name, getattr(limits, name), getattr(base, name), looser))
    out.extend(
        _compare(
            "viscous_damping_per_rad_s",
            limits.damping_per_rad_s,
            base.damping_per_rad_s,
            lambda new, old: new > old,
        )
    )
    if base.workspace is not None and (
        limits.workspace is None
        or any(a < b for a, b in zip(limits.workspace.low, base.workspace.low, strict=True))
        or any(a > b for a, b in zip(limits.workspace.high, base.workspace.high, strict=True))
    ):
        out.append(
            f"workspace {_shown(limits.workspace)} is not inside the robot's "
            f"{_shown(base.workspace)}"
        )
    missing = [o.name for o in base.obstacles if o not in limits.obstacles]
    if missing:
        out.append(f"obstacles leave out the robot's {missing} (list them too; add yours)")
    for i, joint in enumerate(limits.joint_names):
        low, high = _usable(limits, i)
        home = limits.home_position_rad[i]
        base_low, base_high = _usable(base, i)
        already = not base_low <= base.home_position_rad[i] <= base_high
        if not low <= home <= high and not already:
            out.append(
                f"home_position_rad[{i}] ({joint}) is {home}, outside [{low}, {high}] (the "
                "joint's range inside its margin)"
            )
    return out


def _usable(limits: SafetyLimits, joint: int) -> tuple[float, float]:
    """Joint ``joint``'s range inside its margin."""
    margin = limits.position_margin_rad[joint]
    return limits.position_low_rad[joint] + margin, limits.position_high_rad[joint] - margin


def _compare(
    name: str,
    new: float | Sequence[float],
    old: float | Sequence[float],
    looser: Callable[[float, float], bool],
) -> list[str]:
    """``name``'s entries where ``new`` is looser than ``old`` (a scalar: one entry)."""
    per_joint = isinstance(new, Sequence)
    pairs = zip(
        new if isinstance(new, Sequence) else (new,),
        old if isinstance(old, Sequence) else (old,),
        strict=True,
    )
    return [
        f"{name}[{i}] is {a}, the robot's {b}" if per_joint else f"{name} is {a}, the robot's {b}"
        for i, (a, b) in enumerate(pairs)
        if looser(a, b)
    ]


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, Box):
        return f"low {list(value.low)}, high {list(value.high)}"
    return repr(value)
