"""Many robots' commands through their position supervisors in one call.

``filter_commands(supervisors, observations, commands, previous)`` returns, row by row,
exactly what ``supervisors[i].filter(observations[i], commands[i], previous[i],
observation_age_s=ages[i])`` returns, in the same state afterwards; ``filter_actions``
does the same for :class:`PositionActionSupervisor` rows (normalized actions, the spec's
map computed for all rows at once, ``kernel.targets_batch``). The common rows (see
``_filter_arrays``) run in one compiled call (``kernel.filter_batch``): previous
commands checked by their bits, inputs read and checked for plausibility, the joint and
Cartesian stages (each row with its own robot's anchors), ``_finish``'s arithmetic and
the map back to actions, the robots' state read from and written to their slots
(:mod:`tether.safety.position.states`); a verdict object is built only for a row that
raised a check. Every other row
(the Python path, an unreadable or stale observation, a non-finite command, a previous
command not the supervisor's own) is read and answered as a single call does
(``PositionSupervisor._prepare``/``_finish``).

Invariants: row ``i``'s result and ``supervisors[i]``'s state after the call are
bit-identical to a single ``filter`` call's (``tests/safety/test_position_batch.py``;
single and batch calls mixed: ``tests/safety/test_position_states.py``);
one robot's unusable input never changes another row's answer; a supervisor appears in
at most one row (its state is one robot's).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any, NamedTuple, cast

import numpy as np

from tether.safety.position import kernel
from tether.safety.position.actions import (
    _ACTION_CLAMP,
    PositionActionSupervisor,
    _as_action,
)
from tether.safety.position.supervisor import PositionSupervisor, _Step
from tether.safety.supervisor import _flags
from tether.safety.verdict import PASSED, ActionSource, SafetyVerdict

Result = tuple[np.ndarray, SafetyVerdict]

_slot_of = operator.attrgetter("_slot")


def filter_commands(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any],
    commands: Sequence[Any],
    previous: Sequence[Any | None],
    observation_age_s: Sequence[float | None] | None = None,
) -> list[Result]:
    """Row ``i``: ``supervisors[i].filter(observations[i], commands[i], previous[i], …)``."""
    rows = len(supervisors)
    if not len(observations) == len(commands) == len(previous) == rows:
        raise ValueError(
            f"filter_commands needs one observation, command and previous command per "
            f"supervisor ({rows}); got {len(observations)}, {len(commands)} and {len(previous)}"
        )
    if len(set(map(id, supervisors))) != rows:
        raise ValueError(
            "filter_commands got the same supervisor in two rows; each row is one robot, "
            "with its own supervisor"
        )
    ages = observation_age_s if observation_age_s is not None else [None] * rows
    results: list[Result | None] = [None] * rows
    stacked = _stacked_commands(supervisors, commands)
    if stacked is not None:
        rest = _filter_arrays(supervisors, observations, stacked, commands, previous, ages, results)
        _filter_rows(supervisors, observations, commands, previous, ages, results, rest)
    else:
        _filter_rows(supervisors, observations, commands, previous, ages, results, range(rows))
    out: list[Result] = []
    for result in results:
        assert result is not None
        out.append(result)
    return out


def _stacked_commands(
    supervisors: Sequence[PositionSupervisor], commands: Sequence[Any]
) -> np.ndarray | None:
    """The commands as one float32 (rows, n) array, when every one is a float32 (n,) array."""
    n = supervisors[0]._n if supervisors else 0
    for command in commands:
        if type(command) is not np.ndarray or command.dtype != np.float32 or command.shape != (n,):
            return None
    return np.stack(commands) if commands else None


def _filter_rows(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any],
    commands: Sequence[Any] | np.ndarray,
    previous: Sequence[Any | None],
    ages: Sequence[float | None],
    results: list[Result | None],
    chosen: Iterable[int],
) -> None:
    """The rows ``chosen`` as single calls read and answer them (the kernel's part in one
    call per group of equal constants)."""
    steps: list[_Step | None] = [None] * len(supervisors)
    groups: dict[bytes, list[int]] = {}
    for i in chosen:
        supervisor = supervisors[i]
        step = supervisor._prepare(observations[i], commands[i], previous[i], ages[i], False)
        if not isinstance(step, _Step):
            results[i] = step
            continue
        packed = supervisor._packed
        if packed is None:
            numbers = supervisor._python_numbers(*step[:5], not step.replacing)
            results[i] = supervisor._finish(step, numbers)
            continue
        steps[i] = step
        groups.setdefault(packed.key, []).append(i)
    for members in groups.values():
        _run_group(supervisors, steps, members, results)


def _run_group(
    supervisors: Sequence[PositionSupervisor],
    steps: list[_Step | None],
    members: list[int],
    results: list[Result | None],
) -> None:
    """The rows ``members`` (same constants) through one ``kernel.step_batch`` call."""
    first = supervisors[members[0]]._packed
    assert first is not None
    chosen: list[_Step] = []
    for i in members:
        step = steps[i]
        assert step is not None
        chosen.append(step)
    inputs = np.array([s.q + s.v + s.reference + s.change + s.command_in for s in chosen])
    exact = np.array([not s.replacing for s in chosen])
    held = np.array([s.reference is not s.q for s in chosen])
    anchors = np.stack([supervisors[i]._anchors for i in members])
    table = kernel.step_batch(
        first.joints, first.geo, first.obstacles, first.groups, anchors, inputs, exact, held
    ).tolist()
    for k, i in enumerate(members):
        supervisor = supervisors[i]
        supervisor._anchors = anchors[k]
        results[i] = supervisor._finish(chosen[k], supervisor._unpack(table[k]))


def filter_actions(
    supervisors: Sequence[PositionActionSupervisor],
    observations: Sequence[Any],
    actions: np.ndarray,
    previous: Sequence[Any | None],
    observation_age_s: Sequence[float | None] | None = None,
) -> list[Result]:
    """Row ``i``: ``supervisors[i].filter(observations[i], actions[i], previous[i], …)``
    for normalized actions ``actions`` (float32, shape (rows, n))."""
    rows = len(supervisors)
    actions = np.asarray(actions)
    if actions.dtype != np.float32 or actions.ndim != 2 or actions.shape[0] != rows:
        raise ValueError(
            f"filter_actions needs a float32 array of shape ({rows}, n) of actions; got "
            f"{actions.dtype} {actions.shape}"
        )
    if rows == 0:
        return []
    if len(set(map(id, supervisors))) != rows:
        raise ValueError(
            "filter_actions got the same supervisor in two rows; each row is one robot, "
            "with its own supervisor"
        )
    positions = [s.position for s in supervisors]
    ages = observation_age_s if observation_age_s is not None else [None] * rows
    results: list[Result | None] = [None] * rows
    rest: Iterable[int]
    targets: np.ndarray | list[Any]
    if _same_map(supervisors) and actions.shape[1] == supervisors[0]._n:
        first = supervisors[0]
        targets = _targets(first, actions)
        acting = _Acting(supervisors, actions, np.array(first._center), np.array(first._half))
        rest = _filter_arrays(
            positions, observations, targets, None, previous, ages, results, acting
        )
    else:
        targets = [s._to_target(actions[i]) for i, s in enumerate(supervisors)]
        rest = range(rows)
    if rest:
        # Each row left as a single call runs it: the action level's own state and
        # previous action, the position supervisor's filter, the map back.
        prior: list[Any | None] = [None] * rows
        for i in rest:
            supervisor = supervisors[i]
            supervisor._pull()
            if previous[i] is not None:
                prior[i] = supervisor._previous(previous[i])
        _filter_rows(positions, observations, targets, prior, ages, results, rest)
        policy = ActionSource.POLICY
        for i in rest:
            supervisor = supervisors[i]
            answer = results[i]
            assert answer is not None
            command, verdict = answer
            if verdict.source is policy:
                action = _as_action(actions[i], supervisor._n)
            else:
                action = supervisor._to_action(command)
            results[i] = (supervisor._remember(action, command), verdict)
    return cast(list[Result], results)


def _same_map(supervisors: Sequence[PositionActionSupervisor]) -> bool:
    key = supervisors[0]._map_key
    return all(s._map_key == key for s in supervisors)


def _targets(supervisor: PositionActionSupervisor, actions: np.ndarray) -> np.ndarray:
    """``supervisor._to_target`` of every row at once, bit for bit: c + h·clamp(a) in
    float64 (the same two roundings per element), non-finite actions kept as they are
    (``kernel.targets_batch``)."""
    center = np.array(supervisor._center)
    half = np.array(supervisor._half)
    targets: np.ndarray = kernel.targets_batch(actions, center, half, _ACTION_CLAMP)
    return targets


# -- the array path -------------------------------------------------------------------------

# Per supervisor signature: where an observation's joint positions and velocities start,
# the plausible readings as one (4, n) array (low, high, -vmax, vmax), and the period.
_Reader = tuple[int, int, np.ndarray, float]
_READERS: dict[int, _Reader] = {}


def _reader(supervisor: PositionSupervisor) -> _Reader:
    reader = _READERS.get(supervisor._signature)
    if reader is None:
        low, high, vmax = (np.array(x) for x in zip(*supervisor._plausible, strict=True))
        n = supervisor._n
        q, v = supervisor._q, supervisor._v
        # The layout's (start, stop) pairs of n joints each (SafetyLimits checks them).
        assert q.step is None
        assert v.step is None
        assert q.stop - q.start == v.stop - v.start == n
        bounds = np.stack((low, high, -vmax, vmax)).astype(np.float64)
        reader = (q.start, v.start, np.ascontiguousarray(bounds), supervisor._dt)
        _READERS[supervisor._signature] = reader
    return reader


class _Acting(NamedTuple):
    """The action level of a :func:`filter_actions` call that runs rows as arrays: its
    supervisors, the proposed actions (float32, rows × n) and the map's center and half
    range (float64, as ``PositionActionSupervisor`` holds them)."""

    supervisors: Sequence[PositionActionSupervisor]
    actions: np.ndarray
    center: np.ndarray
    half: np.ndarray


def _filter_arrays(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any],
    commands: np.ndarray,
    proposed: Sequence[Any] | None,
    previous: Sequence[Any | None],
    ages: Sequence[float | None],
    results: list[Result | None],
    acting: _Acting | None = None,
) -> list[int]:
    """The common rows, read and answered as arrays; the rows left for the per-row path.

    A row is common when its supervisor runs the kernel, its observation is a float
    array, its command (row ``i`` of ``commands``, float32; ``proposed[i]`` the object
    given, returned when it passes) is finite, its observation is neither stale nor
    unreadable, and its previous command is None or the one this supervisor returned
    last (with ``acting``: its previous action the one its action supervisor returned
    last, the command behind it the position supervisor's last): then ``_prepare``
    reduces to slicing and ``_finish`` to a few array operations, and only a corrected
    row builds its verdict in Python. Each such row gets, bit for bit, what ``filter``
    returns, and its robot's state stays in its slot (``tether.safety.position.states``).
    """
    if _one_group(supervisors, observations, ages, previous):
        # Serving's batch: every row common and alike, told so by one pass per property.
        everyone = list(range(len(supervisors)))
        return _array_group(
            supervisors, everyone, observations, commands, proposed, previous, results, acting
        )
    rest: list[int] = []
    groups: dict[tuple[int, int], list[int]] = {}
    ndarray, float32 = np.ndarray, np.float32
    for i, (supervisor, obs, age, prev) in enumerate(
        zip(supervisors, observations, ages, previous, strict=True)
    ):
        signature = supervisor._signature
        if (
            signature
            and type(obs) is ndarray
            and obs.ndim == 1
            and obs.dtype.char in "fd"
            and (age is None or age <= supervisor.limits.command_staleness_s)
            and (
                prev is None
                or (
                    type(prev) is ndarray
                    and prev.dtype == float32
                    and prev.shape == supervisor._shape
                )
            )
        ):
            length = obs.shape[0]
            expected = supervisor._obs_dim
            if length == expected if expected else length >= supervisor._min_obs:
                key = (signature, length)
                group = groups.get(key)
                if group is None:
                    groups[key] = [i]
                else:
                    group.append(i)
                continue
        rest.append(i)
    for members in groups.values():
        rest += _array_group(
            supervisors, members, observations, commands, proposed, previous, results, acting
        )
    return rest


_signature_of = operator.attrgetter("_signature")
_NO_BITS = np.empty((0, 0), np.uint32)  # no previous command in the batch
_dtype_of = operator.attrgetter("dtype")
_shape_of = operator.attrgetter("shape")
_FLOAT32 = np.dtype(np.float32)
_FLOATS = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def _one_group(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any],
    ages: Sequence[float | None],
    previous: Sequence[Any | None],
) -> bool:
    """Whether every row is common (``_filter_arrays``'s test, row by row) and all rows
    form one group: one signature, one observation length."""
    first = supervisors[0]
    signature = first._signature
    if not signature or set(map(_signature_of, supervisors)) != {signature}:
        return False
    if set(map(type, observations)) != {np.ndarray}:
        return False
    shapes = set(map(_shape_of, observations))
    if len(shapes) != 1:
        return False
    (shape,) = shapes
    expected = first._obs_dim
    if len(shape) != 1 or not (shape[0] == expected if expected else shape[0] >= first._min_obs):
        return False
    if not set(map(_dtype_of, observations)) <= _FLOATS:
        return False
    # The signature fixes the staleness bound; NaN fails it.
    staleness = first.limits.command_staleness_s
    timed = [age for age in ages if age is not None]
    if timed and not all(map(operator.ge, repeat(staleness), timed)):
        return False
    handed = [prev for prev in previous if prev is not None]
    return not handed or (
        set(map(type, handed)) == {np.ndarray}
        and set(map(_dtype_of, handed)) == {_FLOAT32}
        and set(map(_shape_of, handed)) == {first._shape}
    )


def _array_group(
    supervisors: Sequence[PositionSupervisor],
    members: list[int],
    observations: Sequence[Any],
    commands: np.ndarray,
    proposed: Sequence[Any] | None,
    previous: Sequence[Any | None],
    results: list[Result | None],
    acting: _Acting | None,
) -> list[int]:
    """The rows ``members`` (one signature, one observation length) in one compiled call
    (``kernel.filter_batch``); the rows whose previous command is not their supervisor's
    own, observation unreadable or command non-finite are returned, untouched."""
    first = supervisors[members[0]]
    packed = first._packed
    states = first._states
    assert packed is not None
    assert states is not None
    q_start, v_start, bounds, dt = _reader(first)
    n = first._n
    rows = len(members)
    whole = rows == len(supervisors)  # every row, in order
    chosen = supervisors if whole else [supervisors[i] for i in members]
    # Equal-length 1-D arrays end to end, then rows: np.stack's values, at a third of its cost.
    obs = np.concatenate(observations if whole else [observations[i] for i in members])
    obs = obs.reshape(rows, -1)
    given = previous if whole else [previous[i] for i in members]
    has_previous = np.fromiter(map(operator.is_not, given, repeat(None)), np.bool_, rows)
    handed = [p for p in given if p is not None]
    handed_bits = np.concatenate(handed).view(np.uint32).reshape(-1, n) if handed else _NO_BITS
    command32 = commands if whole else commands[members]
    if acting is None:
        actions, center, half = command32, bounds[0], bounds[0]
    else:
        actions = acting.actions if whole else acting.actions[members]
        center, half = acting.center, acting.half
    slots = np.fromiter(map(_slot_of, chosen), np.intp, rows)
    with states.lock:
        while True:
            kinds, out, returned, table, checks = kernel.filter_batch(
                packed.joints, packed.geo, packed.obstacles, packed.groups,
                obs, q_start, v_start, bounds, dt, command32, has_previous, handed_bits,
                acting is not None, actions, center, half,
                slots, states.here, states.action_here,
                states.has_last, states.has_pose, states.out32, states.candidate,
                states.change, states.pose, states.anchors,
                states.has_action, states.action32, states.command32,
                states.out_bits, states.action_bits, states.command_bits,
            )  # fmt: skip
            if kinds.max(initial=0) != kernel.ROW_OUTSIDE:
                break
            # Robots whose state a single call left on the supervisor: moved to their
            # slots (claimed on a robot's first batch), then the batch again.
            for k in np.flatnonzero(kinds == kernel.ROW_OUTSIDE).tolist():
                slots[k] = chosen[k]._push()
                if acting is not None:
                    acting.supervisors[members[k]]._push(int(slots[k]))
    if acting is not None:
        answers = list(returned)
    elif proposed is not None:
        # The proposal itself where it is executed as it was (to the bit).
        out_rows = list(out)
        kept = (out.view(np.uint32) == command32.view(np.uint32)).all(axis=1).tolist()
        answers = [
            proposed[i] if same else out_rows[k]
            for k, (i, same) in enumerate(zip(members, kept, strict=True))
        ]
    else:
        answers = list(out)
    verdicts: list[SafetyVerdict | None] = [PASSED] * rows
    refused: list[int] = []
    for k in np.flatnonzero(kinds).tolist():
        kind = kinds[k]
        if kind == kernel.ROW_REFUSED:
            refused.append(members[k])
            verdicts[k] = None
        elif kind == kernel.ROW_FLAGGED:
            verdicts[k] = SafetyVerdict(ActionSource.POLICY, _flags(int(checks[k])), 0.0, ())
        else:
            row = table[k].tolist()
            cartesian = int(row[2 * n + kernel.OUT_CARTESIAN])
            verdicts[k] = chosen[k]._corrected(
                command32[k].tolist(),
                row[:n],
                row[n : 2 * n] if cartesian else row[:n],
                int(checks[k]),
                row[2 * n : 2 * n + kernel.OUT_JOINT_CHECKS],
                cartesian,
            )
    if whole and not refused:
        results[:] = zip(answers, cast(list[SafetyVerdict], verdicts), strict=True)
    else:
        for i, answer, verdict in zip(members, answers, verdicts, strict=True):
            if verdict is not None:
                results[i] = (answer, verdict)
    return refused
