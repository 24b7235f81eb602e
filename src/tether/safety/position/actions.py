"""The position supervisor in a policy's action space: normalized actions in, normalized
actions out.

A position-commanded robot's policy speaks normalized actions in [-1, 1]; its spec maps
them to joint targets (``RobotSpec.commanded_position``: affine per joint, ``-1`` and
``1`` the ends of the joint's range widened by ``position_command_overreach_rad``).
:class:`PositionActionSupervisor` maps each proposed action and previous action to
radians by that same map (without its clipping, so an action beyond [-1, 1] reaches the
supervisor as the target beyond the range it asks for, and is corrected there), runs
:class:`PositionSupervisor` on them, and maps the executed command back. So serving, the
gate and ``tether run`` call it exactly as they call the torque supervisor. A common
call (a float32 action, a float observation, a previous action None or float32) runs
all of that in one compiled call, as a batch of one row
(``tether.safety.position.kernel.filter_batch``); any call the kernel leaves alone takes
the steps above in Python, with the same result.

Invariants:

- an action the supervisor passes untouched is returned bit-identical (the proposed
  array itself when it is a float32 array of the right shape);
- a corrected action maps to a target inside every limit: it is placed a float32-safe
  inset inside its interval (``envelope.inset``), more than the ~1e-7 rad that the
  float32 action's rounding and the robot's own float64 map can move it;
- the previous action the robot hands back, when it is the one returned last, reaches
  the position supervisor as its own last command, so the acceleration check uses the
  command's true last change.
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any

import numpy as np

from tether.errors import SpecError
from tether.safety.limits import SafetyLimits
from tether.safety.position import kernel
from tether.safety.position.states import NO_BITS
from tether.safety.position.supervisor import PositionSupervisor
from tether.safety.verdict import PASSED, ActionSource, SafetyCheck, SafetyVerdict
from tether.spec import RobotSpec

# Actions beyond this are clamped before the map (rad = center + a·half), so the map
# never overflows; 1e6 is far outside [-1, 1] and still maps far outside every range.
_ACTION_CLAMP = 1e6

# One row with or without a previous action, for the compiled single call. Left writable
# (nothing writes them): numba compiles a read-only array as another signature.
_HANDED = np.ones(1, np.bool_)
_NOT_HANDED = np.zeros(1, np.bool_)


class PositionActionSupervisor:
    """:class:`PositionSupervisor` behind a spec's action map; see the module docstring."""

    def __init__(self, supervisor: PositionSupervisor, spec: RobotSpec) -> None:
        if spec.command_interface != "position":
            raise SpecError(
                f"PositionActionSupervisor needs a position-commanded spec; {spec.name!r} is "
                f"commanded by {spec.command_interface}"
            )
        if spec.n_joints != supervisor.limits.n_joints:
            raise SpecError(
                f"spec {spec.name!r} has {spec.n_joints} joints, the supervisor's limits "
                f"{supervisor.limits.n_joints}"
            )
        self.position = supervisor
        self.spec = spec
        low, high = (np.asarray(x) for x in _command_range(spec))
        self._center = ((low + high) / 2).tolist()
        self._half = ((high - low) / 2).tolist()
        self._n = spec.n_joints
        # Equal keys: the same map (tether.safety.position.batch maps such rows at once);
        # the map as the compiled kernel takes it.
        self._map_key = _map_key(self._center, self._half)
        self._map = (np.array(self._center), np.array(self._half), _ACTION_CLAMP)
        self._shape = (self._n,)
        self._start_robot()

    def _start_robot(self) -> None:
        # The last action returned, its bytes, and the position supervisor's command it
        # came from (handed back as that supervisor's own previous command).
        self._last_bytes = b""
        self._last_command: np.ndarray | None = None

    @property
    def limits(self) -> SafetyLimits:
        return self.position.limits

    # The acceleration check judges a command's change against the one before; with a
    # previous command that is not this supervisor's own last, that change is unknown and
    # the measured velocity stands in for it. A caller that judges rows of many robots
    # with one supervisor (the gate's shadow stage) cannot count that check.
    checks_needing_history: SafetyCheck = SafetyCheck.ACCELERATION

    def fresh(self) -> PositionActionSupervisor:
        """A supervisor of another robot of this spec under the same limits; see
        :meth:`PositionSupervisor.fresh`."""
        other = copy.copy(self)
        other.position = self.position.fresh()
        other._start_robot()
        return other

    def __deepcopy__(self, memo: dict[int, Any]) -> PositionActionSupervisor:
        """Another supervisor continuing this robot from where it is now, on its own (see
        :meth:`PositionSupervisor.__deepcopy__`)."""
        self._pull()
        twin = copy.copy(self)
        twin.position = copy.deepcopy(self.position, memo)
        if self._last_command is not None:
            twin._last_command = self._last_command.copy()
        return twin

    def with_limits(self, limits: SafetyLimits) -> PositionActionSupervisor:
        """The same supervisor enforcing ``limits``, with fresh robot state."""
        return PositionActionSupervisor(self.position.with_limits(limits), self.spec)

    def take_state(self, other: PositionActionSupervisor) -> None:
        """Continue the robot ``other`` has been supervising."""
        if other is self:
            return
        other._pull()
        self._pull()
        self.position.take_state(other.position)
        self._last_bytes = other._last_bytes
        self._last_command = other._last_command

    def filter(
        self,
        observation: Any,
        proposed_action: Any,
        previous_action: Any | None = None,
        *,
        observation_age_s: float | None = None,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The normalized action to execute (float32, shape (n,)) and what was done to it
        (distances in the verdict are in rad, as the position supervisor measures them)."""
        position = self.position
        if (
            type(proposed_action) is np.ndarray
            and proposed_action.dtype == np.float32
            and proposed_action.shape == self._shape
            and position._common(observation, observation_age_s, previous_action)
        ):
            answer = self._filter_compiled(observation, proposed_action, previous_action)
            if answer is not None:
                return answer
        return self._filter_per_row(
            observation, proposed_action, previous_action, observation_age_s
        )

    def _filter_per_row(
        self,
        observation: Any,
        proposed_action: Any,
        previous_action: Any | None,
        observation_age_s: float | None,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """``filter`` step by step: the map, the position supervisor's per-row path, the
        map back (any call; what the compiled call computes for a common one)."""
        self._pull()
        command, verdict = self.position.filter(
            observation,
            self._to_target(proposed_action),
            self._previous(previous_action),
            observation_age_s=observation_age_s,
        )
        if verdict.source is ActionSource.POLICY:
            return self._remember(_as_action(proposed_action, self._n), command), verdict
        return self._remember(self._to_action(command), command), verdict

    def _filter_compiled(
        self, observation: np.ndarray, action: np.ndarray, previous: np.ndarray | None
    ) -> tuple[np.ndarray, SafetyVerdict] | None:
        """``filter`` of a common call (``PositionSupervisor._common``, a float32 action)
        in one compiled call, the robot's state in its slot (``kernel.filter_batch`` with
        one row); None when the kernel leaves the call to the per-row path (a previous
        action not this supervisor's own, an unreadable observation, a non-finite action),
        having changed nothing."""
        position = self.position
        states = position._states
        assert states is not None
        with states.lock:
            slot = position._slot
            if (
                previous is not None
                and (slot < 0 or not states.action_here[slot])
                and previous.tobytes() != self._last_bytes
            ):
                # Not the action it returned last (one supervisor judging many robots'
                # rows, the gate's shadow stage): the per-row path, the state left on the
                # supervisor rather than moved in for a call the kernel would refuse.
                return None
            if previous is None:
                has_previous, handed = _NOT_HANDED, NO_BITS
            else:
                has_previous, handed = _HANDED, previous.view(np.uint32)[None]
            while True:
                returned = states.run(
                    position, observation[None], action[None], has_previous, handed,
                    self._map, position._slot_row,
                )  # fmt: skip
                kind, checks = states.codes[0].tolist()
                if kind != kernel.ROW_OUTSIDE:
                    break
                # The state on the supervisor (a per-row call came last): into its slot.
                self._push(position._push())
            if kind == kernel.ROW_PASSED:
                return action, PASSED
            if kind == kernel.ROW_REFUSED:
                return None
            verdict = position._kernel_verdict(kind, checks, states.report[0])
        return (action if kind == kernel.ROW_FLAGGED else returned[0]), verdict

    def backup_action(
        self, observation: Any, previous_action: Any | None = None
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The backup action for this state (TAKEOVER, a client watchdog's miss)."""
        self._pull()
        command, verdict = self.position.backup_action(observation, self._previous(previous_action))
        return self._remember(self._to_action(command), command), verdict

    # -- the map --------------------------------------------------------------------------

    def _to_target(self, action: Any) -> Any:
        """The joint targets (rad, float32 as commands are) an action asks for; anything not a
        shape-(n,) numeric array goes on unchanged, for the supervisor to reject."""
        values = _values(action, self._n)
        if values is None:
            return action
        out: list[float] = []
        for x, c, h in zip(values, self._center, self._half, strict=True):
            if not math.isfinite(x):
                out.append(x)  # NaN and ±inf stay what they are: non-finite
            else:
                out.append(
                    c + h * (-_ACTION_CLAMP if x < -_ACTION_CLAMP else min(x, _ACTION_CLAMP))
                )
        return np.array(out, dtype=np.float32)

    def _pull(self) -> None:
        """The last action and command back on this supervisor, if the batch path left
        them in its robot's slot (``tether.safety.position.states``)."""
        position = self.position
        slot = position._slot
        if slot < 0:
            return
        states = position._states
        assert states is not None
        if not states.move_out(slot, kernel.FLAG_ACTION_HERE):
            return
        if states.has_action[slot]:
            self._last_bytes = states.action32[slot].tobytes()
            self._last_command = states.command32[slot].copy()
        else:
            self._last_bytes = b""
            self._last_command = None

    def _push(self, slot: int) -> None:
        """The last action and command moved into ``slot``, this robot's; the caller
        holds the states' lock."""
        states = self.position._states
        assert states is not None
        if states.action_here[slot]:
            return
        command = self._last_command
        states.has_action[slot] = command is not None
        if command is not None:
            states.action32[slot] = np.frombuffer(self._last_bytes, np.float32)
            states.command32[slot] = command
        states.action_here[slot] = True

    def _previous(self, previous: Any | None) -> Any | None:
        if previous is None:
            return None
        if (
            self._last_command is not None
            and type(previous) is np.ndarray
            and previous.tobytes() == self._last_bytes
            and previous.dtype == np.float32
        ):
            return self._last_command
        return self._to_target(previous)

    def _to_action(self, command: np.ndarray) -> np.ndarray:
        values = command.tolist()
        return np.array(
            [(x - c) / h for x, c, h in zip(values, self._center, self._half, strict=True)],
            dtype=np.float32,
        )

    def _remember(self, action: np.ndarray, command: np.ndarray) -> np.ndarray:
        self._last_bytes = action.tobytes()
        self._last_command = command
        return action


_MAP_KEYS: dict[tuple[tuple[float, ...], tuple[float, ...]], int] = {}
_MAP_KEYS_LOCK = threading.Lock()


def _map_key(center: list[float], half: list[float]) -> int:
    with _MAP_KEYS_LOCK:
        return _MAP_KEYS.setdefault((tuple(center), tuple(half)), len(_MAP_KEYS) + 1)


def _command_range(spec: RobotSpec) -> tuple[np.ndarray, np.ndarray]:
    """The targets actions ``-1`` and ``1`` command on each joint (the spec's own map)."""
    ones = np.ones(spec.n_joints)
    return spec.commanded_position(-ones), spec.commanded_position(ones)


def _values(action: Any, n: int) -> list[float] | None:
    if type(action) is np.ndarray and action.dtype.char in "fd":
        return action.tolist() if action.shape == (n,) else None
    try:
        array = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array.tolist() if array.shape == (n,) else None


def _as_action(proposed: Any, n: int) -> np.ndarray:
    """A passed action as the float32 array it was (itself, when it is one)."""
    if type(proposed) is np.ndarray and proposed.dtype == np.float32 and proposed.shape == (n,):
        return proposed
    return np.asarray(proposed, dtype=np.float32).reshape(n)
