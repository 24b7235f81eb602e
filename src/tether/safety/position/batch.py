"""Many robots' commands through their position supervisors in one call.

``filter_commands(supervisors, observations, commands, previous)`` returns, row by row,
exactly what ``supervisors[i].filter(observations[i], commands[i], previous[i],
observation_age_s=ages[i])`` returns, in the same state afterwards; ``filter_actions``
does the same for :class:`PositionActionSupervisor` rows (normalized actions, the spec's
map computed for all rows at once, ``kernel.targets_batch``). The common rows (see
``_filter_arrays``) are read, checked and answered as arrays: one compiled call each for
their inputs and plausibility (``kernel.inputs_batch``), the joint and Cartesian stages
(``kernel.step_batch``, each row with its own robot's anchors) and ``_finish``'s
arithmetic (``kernel.finish_batch``), a verdict object built only for a corrected row.
Every other row (the Python path, an unreadable or stale observation, a non-finite
command, a previous command not the supervisor's own) is read and answered as a single
call does (``PositionSupervisor._prepare``/``_finish``).

Invariants: row ``i``'s result and ``supervisors[i]``'s state after the call are
bit-identical to a single ``filter`` call's (``tests/safety/test_position_batch.py``);
one robot's unusable input never changes another row's answer; a supervisor appears in
at most one row (its state is one robot's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

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
    same = _same_map(supervisors) and actions.shape[1] == supervisors[0]._n
    positions = [s.position for s in supervisors]
    prior = [
        None if p is None else s._previous(p) for s, p in zip(supervisors, previous, strict=True)
    ]
    ages = observation_age_s if observation_age_s is not None else [None] * rows
    results: list[Result | None] = [None] * rows
    if same:
        targets = _targets(supervisors[0], actions)
        rest = _filter_arrays(positions, observations, targets, None, prior, ages, results)
        if rest:
            _filter_rows(positions, observations, targets, prior, ages, results, rest)
    else:
        commands = [s._to_target(actions[i]) for i, s in enumerate(supervisors)]
        _filter_rows(positions, observations, commands, prior, ages, results, range(rows))
    # The executed commands back in the action space: a passed action is returned as it
    # was proposed, any other mapped back (all rows at once under one map).
    policy = ActionSource.POLICY
    answers = cast(list[Result], results)
    back = [i for i, (_, verdict) in enumerate(answers) if verdict.source is not policy]
    out: list[Result] = []
    if same:
        mapped: dict[int, np.ndarray] = {}
        if back:
            first = supervisors[0]
            executed = np.array([answers[i][0] for i in back], dtype=np.float64)
            center, half = np.array(first._center), np.array(first._half)
            mapped = dict(
                zip(back, list(((executed - center) / half).astype(np.float32)), strict=True)
            )
        # _as_action of a row of a float32 (rows, n) array: the row itself.
        rows_of = list(actions)
        carried = actions.tobytes()
        width = actions.itemsize * actions.shape[1]
        for i, (supervisor, (command, verdict)) in enumerate(
            zip(supervisors, answers, strict=True)
        ):
            # supervisor._remember(action, command), inline: it runs for every row
            if verdict.source is policy:
                action = rows_of[i]
                supervisor._last_bytes = carried[i * width : (i + 1) * width]
            else:
                action = mapped[i]
                supervisor._last_bytes = action.tobytes()
            supervisor._last_command = command
            out.append((action, verdict))
        return out
    for i, (supervisor, (command, verdict)) in enumerate(zip(supervisors, answers, strict=True)):
        if verdict.source is policy:
            action = _as_action(actions[i], supervisor._n)
        else:
            action = supervisor._to_action(command)
        out.append((supervisor._remember(action, command), verdict))
    return out


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


def _filter_arrays(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any],
    commands: np.ndarray,
    proposed: Sequence[Any] | None,
    previous: Sequence[Any | None],
    ages: Sequence[float | None],
    results: list[Result | None],
) -> list[int]:
    """The common rows, read and answered as arrays; the rows left for the per-row path.

    A row is common when its supervisor runs the kernel, its observation is a float
    array, its command (row ``i`` of ``commands``, float32; ``proposed[i]`` the object
    given, returned when it passes) is finite, its observation is neither stale nor
    unreadable, and its previous command is None or the one this supervisor returned
    last: then ``_prepare`` reduces to slicing and ``_finish`` to a few array operations,
    and only a corrected row builds its verdict in Python. Each such row gets, bit for
    bit, what ``filter`` returns (and leaves the same state).
    """
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
                # the command this supervisor returned last, handed back
                or (
                    type(prev) is ndarray
                    and prev.dtype == float32
                    and prev.shape == supervisor._shape
                    and supervisor._last is not None
                    and prev.tobytes() == supervisor._last_bytes
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
            supervisors, members, observations, commands, proposed, previous, results
        )
    return rest


def _array_group(
    supervisors: Sequence[PositionSupervisor],
    members: list[int],
    observations: Sequence[Any],
    commands: np.ndarray,
    proposed: Sequence[Any] | None,
    previous: Sequence[Any | None],
    results: list[Result | None],
) -> list[int]:
    """The rows ``members`` (one signature, one observation length) in one kernel call;
    the rows whose observation is unreadable or command non-finite are returned, untouched."""
    first = supervisors[members[0]]
    packed = first._packed
    assert packed is not None
    q_start, v_start, bounds, dt = _reader(first)
    n = first._n
    # np.array of equal-length 1-D arrays: np.stack's values, at half its cost.
    obs = np.array([observations[i] for i in members], dtype=np.float64)
    command32 = commands[members]
    chosen = [supervisors[i] for i in members]
    # A row with its own previous command steers from it and its last change (_prepare).
    own = [k for k, i in enumerate(members) if previous[i] is not None]
    held = np.zeros(len(members), dtype=np.bool_)
    pairs = np.empty((0, 2 * n))
    if own:
        lasts = []
        for k in own:
            last = chosen[k]._last
            assert last is not None  # _filter_arrays checked it
            lasts.append(last[0] + last[1])
        pairs = np.array(lasts)
        held[own] = True
    # What _read_state and _command refuse (NaN fails every comparison), and the inputs.
    inputs, usable = kernel.inputs_batch(obs, q_start, v_start, bounds, command32, dt, held, pairs)
    refused: list[int] = []
    if not usable.all():
        refused = [members[k] for k in np.flatnonzero(~usable).tolist()]
        kept = np.flatnonzero(usable).tolist()
        if not kept:
            return refused
        members = [members[k] for k in kept]
        chosen = [chosen[k] for k in kept]
        inputs, command32, held = inputs[usable], command32[usable], held[usable]
    rows = len(members)
    q = inputs[:, :n]
    reference = inputs[:, 2 * n : 3 * n]
    command = inputs[:, 4 * n :]
    anchors = np.array([s._anchors for s in chosen])
    table = kernel.step_batch(
        packed.joints,
        packed.geo,
        packed.obstacles,
        packed.groups,
        anchors,
        inputs,
        np.ones(rows, dtype=np.bool_),
        held,
    )
    # _finish for every row in one compiled call (kernel.finish_batch): the candidate is
    # the Cartesian stage's command where it moved one, else the joint stage's; the
    # executed command is the proposal itself where both left it inside.
    placed = table[:, :n]
    extra = table[:, 2 * n :]
    out, candidate, change_made, bits_of, passed_of, untouched = kernel.finish_batch(
        table, command, command32, reference
    )
    checks = bits_of.tolist()
    passed = passed_of.tolist()
    candidates = candidate.tolist()
    changes = change_made.tolist()
    poses = q.tolist()
    carried = out.tobytes()
    width = out.itemsize * n
    keep = untouched.tolist()
    anchor_rows = list(anchors)
    out_rows = list(out)
    for k, (i, supervisor) in enumerate(zip(members, chosen, strict=True)):
        supervisor._anchors = anchor_rows[k]
        supervisor._last_pose = poses[k]
        supervisor._last = (candidates[k], changes[k])
        supervisor._last_bytes = carried[k * width : (k + 1) * width]
        executed = proposed[i] if proposed is not None and keep[k] else out_rows[k]
        bits = checks[k]
        if passed[k]:
            if not bits:
                results[i] = (executed, PASSED)
            else:
                results[i] = (executed, SafetyVerdict(ActionSource.POLICY, _flags(bits), 0.0, ()))
        else:
            results[i] = (
                executed,
                supervisor._corrected(
                    command[k].tolist(),
                    placed[k].tolist(),
                    candidates[k],
                    bits,
                    extra[k, : kernel.OUT_JOINT_CHECKS].tolist(),
                    int(extra[k, kernel.OUT_CARTESIAN]),
                ),
            )
    return refused
