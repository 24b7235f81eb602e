"""Many robots' commands through their position supervisors in one call.

``filter_commands(supervisors, observations, commands, previous)`` returns, row by row,
exactly what ``supervisors[i].filter(observations[i], commands[i], previous[i],
observation_age_s=ages[i])`` returns, in the same state afterwards; ``filter_actions``
does the same for :class:`PositionActionSupervisor` rows (normalized actions, the spec's
map computed for all rows at once, ``kernel.targets_batch``). The common rows (see
``_filter_arrays``) are read, checked and answered as arrays: one compiled call each for
their inputs and plausibility (``kernel.inputs_batch``), the joint and Cartesian stages
(``kernel.step_batch``, each row with its own robot's anchors) and ``_finish``'s
arithmetic (``kernel.finish_batch``), a verdict object built only for a corrected row,
their robots' state read from and written to their slots
(:mod:`tether.safety.position.states`) one array operation per field. Every other row
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
    """The rows ``members`` (one signature, one observation length) in one kernel call;
    the rows whose previous command is not their supervisor's own, observation unreadable
    or command non-finite are returned, untouched."""
    first = supervisors[members[0]]
    packed = first._packed
    states = first._states
    assert packed is not None
    assert states is not None
    q_start, v_start, bounds, dt = _reader(first)
    n = first._n
    whole = len(members) == len(supervisors)  # every row, in order
    chosen = supervisors if whole else [supervisors[i] for i in members]
    # Equal-length 1-D arrays end to end, then rows: np.stack's values, at a third of its cost.
    picked = observations if whole else [observations[i] for i in members]
    obs = np.concatenate(picked).reshape(len(members), -1)
    given = previous if whole else [previous[i] for i in members]
    has_previous = np.fromiter(map(operator.is_not, given, repeat(None)), np.bool_, len(members))
    command32 = commands if whole else commands[members]
    with states.lock:
        # Every row's slot, its state moved there if a single call left it outside.
        slots = np.fromiter(map(_slot_of, chosen), np.intp, len(members))
        for k in np.flatnonzero((slots < 0) | ~states.here[slots]).tolist():
            slots[k] = chosen[k]._push()
        if acting is not None:
            for k in np.flatnonzero(~states.action_here[slots]).tolist():
                acting.supervisors[members[k]]._push(int(slots[k]))
        # A row with a previous command steers from its own last command and change when
        # that command is the supervisor's own (by its bits, as _previous compares them);
        # any other previous command goes to the per-row path.
        keep = np.ones(len(members), dtype=np.bool_)
        if has_previous.any():
            own = np.flatnonzero(has_previous)
            handed = [p for p in given if p is not None]
            mine = kernel.own_rows(
                np.concatenate(handed).reshape(len(handed), n).view(np.uint32),
                slots[own],
                states.has_last,
                states.out_bits,
                acting is not None,
                states.has_action,
                states.action_bits,
                states.command_bits,
            )
            if not mine.all():
                keep[own[~mine]] = False
                obs, command32 = obs[keep], command32[keep]
                slots, has_previous = slots[keep], has_previous[keep]
        # What _read_state and _command refuse (NaN fails every comparison), and the inputs.
        inputs, usable = kernel.inputs_batch(
            obs,
            q_start,
            v_start,
            bounds,
            command32,
            dt,
            has_previous,
            slots,
            states.candidate,
            states.change,
        )
        if not usable.all():
            keep[np.flatnonzero(keep)[~usable]] = False
            inputs, command32 = inputs[usable], command32[usable]
            slots, has_previous = slots[usable], has_previous[usable]
        refused: list[int] = []
        if not keep.all():
            if not len(slots):
                return members
            refused = [members[k] for k in np.flatnonzero(~keep).tolist()]
            kept = np.flatnonzero(keep).tolist()
            members = [members[k] for k in kept]
            chosen = [chosen[k] for k in kept]
            whole = False
        rows = len(members)
        reference = inputs[:, 2 * n : 3 * n]
        command = inputs[:, 4 * n :]
        anchors = states.anchors[slots]
        table = kernel.step_batch(
            packed.joints,
            packed.geo,
            packed.obstacles,
            packed.groups,
            anchors,
            inputs,
            np.ones(rows, dtype=np.bool_),
            has_previous,
        )
        # _finish for every row in one compiled call (kernel.finish_batch): the candidate
        # is the Cartesian stage's command where it moved one, else the joint stage's; the
        # executed command is the proposal itself where both left it inside.
        out, candidate, change_made, bits_of, passed_of, untouched = kernel.finish_batch(
            table, command, command32, reference
        )
        returned = out
        if acting is not None:
            # The action returned: the proposal where the supervisor passed it, else the
            # executed command mapped back (what PositionActionSupervisor._to_action does).
            returned = acting.actions.copy() if whole else acting.actions[members]
            if not passed_of.all():
                back = ~passed_of
                mapped = (out[back].astype(np.float64) - acting.center) / acting.half
                returned[back] = mapped.astype(np.float32)
        kernel.store_batch(
            slots,
            inputs,
            anchors,
            out,
            candidate,
            change_made,
            states.has_last,
            states.has_pose,
            states.out32,
            states.candidate,
            states.change,
            states.pose,
            states.anchors,
            acting is not None,
            returned,
            states.has_action,
            states.action32,
            states.command32,
        )
    if acting is not None:
        answers = list(returned)
    elif proposed is not None:
        out_rows = list(out)
        answers = [
            proposed[i] if kept else out_rows[k]
            for k, (i, kept) in enumerate(zip(members, untouched.tolist(), strict=True))
        ]
    else:
        answers = list(out)
    # Verdicts: PASSED for a row passed with no check raised (most rows), else built.
    verdicts: list[SafetyVerdict] = [PASSED] * rows
    raised = (~passed_of) | (bits_of != 0)
    if raised.any():
        placed = table[:, :n]
        extra = table[:, 2 * n :]
        for k in np.flatnonzero(raised).tolist():
            bits = int(bits_of[k])
            if passed_of[k]:
                verdicts[k] = SafetyVerdict(ActionSource.POLICY, _flags(bits), 0.0, ())
            else:
                verdicts[k] = chosen[k]._corrected(
                    command[k].tolist(),
                    placed[k].tolist(),
                    candidate[k].tolist(),
                    bits,
                    extra[k, : kernel.OUT_JOINT_CHECKS].tolist(),
                    int(extra[k, kernel.OUT_CARTESIAN]),
                )
    if whole:
        results[:] = zip(answers, verdicts, strict=True)
    else:
        for i, answer, verdict in zip(members, answers, verdicts, strict=True):
            results[i] = (answer, verdict)
    return refused
