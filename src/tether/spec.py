"""What a robot is, as far as every layer is concerned.

A :class:`RobotSpec` names the joints, the control period, where each quantity sits in
the observation vector, and the physical limits. The simulated arm builds one, the
policy bundle records its fingerprint, the serving edge refuses sessions whose
fingerprint differs, and the safety supervisor turns it into ``SafetyLimits``. It is
the single description of the robot; nothing copies its fields by hand.

A spec also says how the robot is commanded (``command_interface``): ``"torque"``
(normalized joint torques) or ``"position"`` (normalized joint-position targets tracked
by a joint impedance controller with the spec's per-joint stiffness and damping). The
interface is part of the fingerprint, so a policy trained for one can never be served to
a robot of the other; a spec written before the field existed reads as torque, with the
fingerprint it always had.

Invariant: a constructed spec is internally consistent (lengths agree, low < high,
limits positive, a position robot has its impedance gains); anything else raises
:class:`~tether.errors.SpecError` at construction.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tether.errors import SpecError

Vec3 = tuple[float, float, float]
CommandInterface = Literal["torque", "position"]
COMMAND_INTERFACES: tuple[CommandInterface, ...] = ("torque", "position")
# What each interface calls a joint's action: "<joint>_torque", "<joint>_position".
_ACTION_SUFFIX: dict[str, str] = {"torque": "torque", "position": "position"}


@dataclass(frozen=True)
class Sphere:
    """A spherical obstacle in the robot's base frame (metres)."""

    center: Vec3
    radius: float
    name: str = "obstacle"
    kind: Literal["sphere"] = "sphere"

    def __post_init__(self) -> None:
        _check_vec3("Sphere.center", self.center)
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise SpecError(f"Sphere.radius must be a positive finite number, got {self.radius}")


@dataclass(frozen=True)
class Box:
    """An axis-aligned box in the robot's base frame (metres): an obstacle or a workspace."""

    low: Vec3
    high: Vec3
    name: str = "box"
    kind: Literal["box"] = "box"

    def __post_init__(self) -> None:
        _check_vec3("Box.low", self.low)
        _check_vec3("Box.high", self.high)
        bad = [i for i in range(3) if not self.low[i] < self.high[i]]
        if bad:
            raise SpecError(
                f"Box {self.name!r} needs low < high on every axis; axes {bad} have "
                f"low={self.low} high={self.high}"
            )

    def contains(self, point: np.ndarray, margin: float = 0.0) -> bool:
        p = np.asarray(point, dtype=np.float64)
        return bool(
            np.all(p >= np.asarray(self.low) + margin)
            and np.all(p <= np.asarray(self.high) - margin)
        )


Obstacle = Sphere | Box


@dataclass(frozen=True)
class ObservationLayout:
    """Where each quantity lives in the flat observation vector, as ``(start, stop)``."""

    joint_position: tuple[int, int]
    joint_velocity: tuple[int, int]
    end_effector: tuple[int, int]
    target: tuple[int, int]
    # A position-commanded robot may report the command it is tracking (rad, the last one
    # it received) and that command's change from the one before (rad): a policy that
    # steps from its previous command reads them here. None: not in the observation.
    command: tuple[int, int] | None = None
    command_change: tuple[int, int] | None = None

    def slices(self) -> dict[str, slice]:
        """Every quantity the observation holds, by name (absent optional ones left out)."""
        return {name: slice(*span) for name, span in self.items()}

    def items(self) -> list[tuple[str, tuple[int, int]]]:
        """``(name, (start, stop))`` of every quantity present, in field order."""
        out = [
            ("joint_position", self.joint_position),
            ("joint_velocity", self.joint_velocity),
            ("end_effector", self.end_effector),
            ("target", self.target),
        ]
        for name, span in (("command", self.command), ("command_change", self.command_change)):
            if span is not None:
                out.append((name, span))
        return out


@dataclass(frozen=True)
class RobotSpec:
    """Names, units, observation layout, limits and command interface of one robot.

    Actions are normalized in ``[-1, 1]``. With ``command_interface="torque"`` action
    ``1.0`` on joint ``i`` is ``torque_limit_nm[i]`` newton-metres. With ``"position"``
    it is an absolute joint-position target: ``-1`` and ``1`` are the ends of the
    joint's range widened by ``position_command_overreach_rad`` on both sides
    (:meth:`commanded_position`, :meth:`action_for_position`), tracked by
    ``τ = Kp (q_cmd − q) − Kd q̇ + g(q)`` with ``Kp = joint_stiffness_nm_rad`` and
    ``Kd = joint_damping_nm_s_rad``, saturated at ``torque_limit_nm``.
    """

    name: str
    joint_names: tuple[str, ...]
    control_period_s: float
    observation_names: tuple[str, ...]
    layout: ObservationLayout
    joint_position_low_rad: tuple[float, ...]
    joint_position_high_rad: tuple[float, ...]
    joint_velocity_limit_rad_s: tuple[float, ...]
    joint_acceleration_limit_rad_s2: tuple[float, ...]
    torque_limit_nm: tuple[float, ...]
    home_position_rad: tuple[float, ...]
    workspace: Box
    obstacles: tuple[Obstacle, ...] = ()
    action_names: tuple[str, ...] = field(default=())
    command_interface: CommandInterface = "torque"
    joint_stiffness_nm_rad: tuple[float, ...] = ()
    joint_damping_nm_s_rad: tuple[float, ...] = ()
    position_command_overreach_rad: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if n == 0:
            raise SpecError("RobotSpec.joint_names must name at least one joint, got none")
        if not (math.isfinite(self.control_period_s) and self.control_period_s > 0):
            raise SpecError(
                f"RobotSpec.control_period_s must be positive, got {self.control_period_s}"
            )
        if self.command_interface not in COMMAND_INTERFACES:
            raise SpecError(
                f"RobotSpec.command_interface must be one of {COMMAND_INTERFACES}, "
                f"got {self.command_interface!r}"
            )
        if not self.action_names:
            suffix = _ACTION_SUFFIX[self.command_interface]
            object.__setattr__(
                self, "action_names", tuple(f"{j}_{suffix}" for j in self.joint_names)
            )
        if len(self.action_names) != n:
            raise SpecError(
                f"RobotSpec.action_names needs {n} entries (one per joint), got {len(self.action_names)}"
            )
        per_joint = {
            "joint_position_low_rad": self.joint_position_low_rad,
            "joint_position_high_rad": self.joint_position_high_rad,
            "joint_velocity_limit_rad_s": self.joint_velocity_limit_rad_s,
            "joint_acceleration_limit_rad_s2": self.joint_acceleration_limit_rad_s2,
            "torque_limit_nm": self.torque_limit_nm,
            "home_position_rad": self.home_position_rad,
        }
        for fname, values in per_joint.items():
            if len(values) != n:
                raise SpecError(
                    f"RobotSpec.{fname} needs {n} entries (one per joint), got {len(values)}"
                )
            if not all(math.isfinite(v) for v in values):
                raise SpecError(f"RobotSpec.{fname} must be finite, got {values}")
        for fname in (
            "joint_velocity_limit_rad_s",
            "joint_acceleration_limit_rad_s2",
            "torque_limit_nm",
        ):
            if any(v <= 0 for v in per_joint[fname]):
                raise SpecError(
                    f"RobotSpec.{fname} must be positive on every joint, got {per_joint[fname]}"
                )
        for i, (lo, hi) in enumerate(
            zip(self.joint_position_low_rad, self.joint_position_high_rad, strict=True)
        ):
            if not lo < hi:
                raise SpecError(
                    f"RobotSpec joint {self.joint_names[i]!r}: position low ({lo}) must be below high ({hi})"
                )
            home = self.home_position_rad[i]
            if not lo <= home <= hi:
                raise SpecError(
                    f"RobotSpec joint {self.joint_names[i]!r}: home {home} is outside [{lo}, {hi}]"
                )
        self._check_gains(n)
        widths = {"end_effector": 3, "target": 3}
        for fname, (start, stop) in self.layout.items():
            want = widths.get(fname, n)
            if stop - start != want or start < 0 or stop > len(self.observation_names):
                raise SpecError(
                    f"RobotSpec.layout.{fname} must span {want} entries inside the "
                    f"{len(self.observation_names)}-long observation, got ({start}, {stop})"
                )

    def _check_gains(self, n: int) -> None:
        gains = {
            "joint_stiffness_nm_rad": self.joint_stiffness_nm_rad,
            "joint_damping_nm_s_rad": self.joint_damping_nm_s_rad,
        }
        if self.command_interface == "torque":
            given = [name for name, values in gains.items() if values]
            if given:
                raise SpecError(
                    f"RobotSpec {given} are impedance gains of the position interface; a "
                    "torque-commanded spec must leave them empty (or set "
                    "command_interface='position')"
                )
            if self.position_command_overreach_rad:
                raise SpecError(
                    "RobotSpec.position_command_overreach_rad belongs to the position "
                    "interface; a torque-commanded spec must leave it 0"
                )
            return
        reach = self.position_command_overreach_rad
        if not (math.isfinite(reach) and reach >= 0):
            raise SpecError(
                f"RobotSpec.position_command_overreach_rad must be finite and >= 0 rad, got {reach}"
            )
        for fname, values in gains.items():
            if len(values) != n:
                raise SpecError(
                    f"RobotSpec.{fname} needs {n} entries (one per joint) for the position "
                    f"interface, got {len(values)}"
                )
            if not all(math.isfinite(v) for v in values) or any(v < 0 for v in values):
                raise SpecError(f"RobotSpec.{fname} must be finite and >= 0, got {values}")
        if any(v <= 0 for v in self.joint_stiffness_nm_rad):
            raise SpecError(
                "RobotSpec.joint_stiffness_nm_rad must be positive on every joint (a joint "
                f"without stiffness cannot track a position), got {self.joint_stiffness_nm_rad}"
            )

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)

    @property
    def obs_dim(self) -> int:
        return len(self.observation_names)

    @property
    def act_dim(self) -> int:
        return len(self.joint_names)

    def fingerprint(self) -> str:
        """A short hash of what a client and a policy must agree on: dims, names and
        the command interface."""
        return fingerprint_of(
            self.observation_names,
            self.action_names,
            self.joint_names,
            command_interface=self.command_interface,
        )

    # -- the position interface's mapping --------------------------------------------------

    def commanded_position(self, action: np.ndarray) -> np.ndarray:
        """Joint-position targets (rad, ``(..., n)``) of normalized actions in [-1, 1].

        Absolute targets: ``-1`` is ``joint_position_low_rad`` and ``1`` is
        ``joint_position_high_rad``, each moved outwards by
        ``position_command_overreach_rad``, linear between; actions outside [-1, 1] are
        clipped first. The overreach is what the arm's controller accepts, not what is
        safe: a command beyond the range drives the joint into its limit, which is what
        the supervisor's joint-range check is for.
        """
        low, high = self._position_range("commanded_position")
        a = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        target: np.ndarray = (low + high) / 2 + a * (high - low) / 2
        return target

    def action_for_position(self, joint_position_rad: np.ndarray) -> np.ndarray:
        """The normalized action (``(..., n)``) that commands ``joint_position_rad``.

        The inverse of :meth:`commanded_position` inside the range; a position outside it
        maps beyond [-1, 1] (nothing is clipped, so a caller can see how far outside).
        """
        low, high = self._position_range("action_for_position")
        q = np.asarray(joint_position_rad, dtype=np.float64)
        action: np.ndarray = (2 * q - (low + high)) / (high - low)
        return action

    def _position_range(self, what: str) -> tuple[np.ndarray, np.ndarray]:
        if self.command_interface != "position":
            raise SpecError(
                f"RobotSpec.{what} maps actions of the position interface; spec "
                f"{self.name!r} is commanded by {self.command_interface}"
            )
        return self._command_range

    @functools.cached_property
    def _command_range(self) -> tuple[np.ndarray, np.ndarray]:
        # The env maps every command through here: build the arrays once per spec.
        reach = self.position_command_overreach_rad
        low = np.array(self.joint_position_low_rad) - reach
        high = np.array(self.joint_position_high_rad) + reach
        low.flags.writeable = high.flags.writeable = False
        return low, high

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; :meth:`from_dict` inverts it exactly."""
        out: dict[str, Any] = _to_jsonable(self)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RobotSpec:
        try:
            lay = data["layout"]
            obstacles: list[Obstacle] = []
            for ob in data.get("obstacles", []):
                if ob.get("kind") == "sphere":
                    obstacles.append(
                        Sphere(tuple(ob["center"]), float(ob["radius"]), ob.get("name", "obstacle"))
                    )
                elif ob.get("kind") == "box":
                    obstacles.append(
                        Box(tuple(ob["low"]), tuple(ob["high"]), ob.get("name", "box"))
                    )
                else:
                    raise SpecError(
                        f"obstacle kind must be 'sphere' or 'box', got {ob.get('kind')!r}"
                    )
            ws = data["workspace"]
            return cls(
                name=str(data["name"]),
                joint_names=tuple(data["joint_names"]),
                control_period_s=float(data["control_period_s"]),
                observation_names=tuple(data["observation_names"]),
                layout=ObservationLayout(
                    joint_position=tuple(lay["joint_position"]),
                    joint_velocity=tuple(lay["joint_velocity"]),
                    end_effector=tuple(lay["end_effector"]),
                    target=tuple(lay["target"]),
                    command=_span(lay.get("command")),
                    command_change=_span(lay.get("command_change")),
                ),
                joint_position_low_rad=_floats(data["joint_position_low_rad"]),
                joint_position_high_rad=_floats(data["joint_position_high_rad"]),
                joint_velocity_limit_rad_s=_floats(data["joint_velocity_limit_rad_s"]),
                joint_acceleration_limit_rad_s2=_floats(data["joint_acceleration_limit_rad_s2"]),
                torque_limit_nm=_floats(data["torque_limit_nm"]),
                home_position_rad=_floats(data["home_position_rad"]),
                workspace=Box(tuple(ws["low"]), tuple(ws["high"]), ws.get("name", "workspace")),
                obstacles=tuple(obstacles),
                action_names=tuple(data.get("action_names", ())),
                # Written before the position interface existed: torque, as it was.
                command_interface=data.get("command_interface", "torque"),
                joint_stiffness_nm_rad=_floats(data.get("joint_stiffness_nm_rad", ())),
                joint_damping_nm_s_rad=_floats(data.get("joint_damping_nm_s_rad", ())),
                position_command_overreach_rad=float(
                    data.get("position_command_overreach_rad", 0.0)
                ),
            )
        except KeyError as exc:
            raise SpecError(f"robot spec is missing the field {exc.args[0]!r}") from exc


def fingerprint_of(
    observation_names: Sequence[str],
    action_names: Sequence[str],
    joint_names: Sequence[str] = (),
    *,
    command_interface: str = "torque",
) -> str:
    """The fingerprint a client sends when it opens a session (see ``RobotSpec.fingerprint``).

    The torque interface hashes exactly what it hashed before interfaces existed, so
    every torque bundle and client keeps its fingerprint; any other interface is hashed
    in, so it can never match a torque fingerprint with the same names.
    """
    doc: dict[str, Any] = {
        "obs": list(observation_names),
        "act": list(action_names),
        "joints": list(joint_names),
    }
    if command_interface != "torque":
        doc["command_interface"] = command_interface
    payload = json.dumps(doc, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _floats(values: Sequence[Any]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def _check_vec3(name: str, v: Sequence[float]) -> None:
    if len(v) != 3 or not all(math.isfinite(float(x)) for x in v):
        raise SpecError(f"{name} must be three finite numbers, got {v}")


def _span(value: Any) -> tuple[int, int] | None:
    return None if value is None else (int(value[0]), int(value[1]))


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, ObservationLayout):
        # Absent optional quantities are left out, so a spec without them writes the
        # document it wrote before they existed.
        return {name: list(span) for name, span in obj.items()}
    if hasattr(obj, "__dataclass_fields__"):
        return {k: _to_jsonable(getattr(obj, k)) for k in obj.__dataclass_fields__}
    if isinstance(obj, tuple | list):
        return [_to_jsonable(v) for v in obj]
    return obj
