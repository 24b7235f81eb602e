"""Many robots' commands through their position supervisors in one call.

``filter_commands(supervisors, observations, commands, previous)`` returns, row by row,
exactly what ``supervisors[i].filter(observations[i], commands[i], previous[i],
observation_age_s=ages[i])`` returns, in the same state afterwards; ``filter_actions``
does the same for :class:`PositionActionSupervisor` rows (normalized actions). The
common rows (see ``_filter_arrays``) run in one compiled call (``kernel.filter_batch``):
the action map, previous commands checked by their bits, inputs read and checked for
plausibility, the joint and Cartesian stages (each row with its own robot's anchors),
``_finish``'s arithmetic and the map back to actions, the robots' state read from and
written to their slots (:mod:`tether.safety.position.states`); a verdict object is built
only for a row that raised a check. Every other row (the Python path, an unreadable or
stale observation, a non-finite command, a previous command not the supervisor's own)
is answered as its single call answers it (for commands ``PositionSupervisor._prepare``
and ``_finish``, the rows of equal constants through one ``kernel.step_batch``; for
actions the per-row path of the row's own ``filter``).

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
from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.states import NO_BITS
from tether.safety.position.supervisor import PositionSupervisor, _Step
from tether.safety.verdict import PASSED, SafetyVerdict

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
    _one_row_each(supervisors, "filter_commands")
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
            numbers = supervisor._python_numbers(*step[:6], not step.replacing)
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
    inputs = np.array([s.q + s.v + s.reference + s.change + s.command_in + s.sag for s in chosen])
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
    observations: Sequence[Any] | np.ndarray,
    actions: np.ndarray,
    previous: Sequence[Any | None],
    observation_age_s: Sequence[float | None] | None = None,
) -> list[Result]:
    """Row ``i``: ``supervisors[i].filter(observations[i], actions[i], previous[i], …)``
    for normalized actions ``actions`` (float32, shape (rows, n)). ``observations`` may be
    one float array (rows, m), which spares checking and joining the rows one by one."""
    rows = len(supervisors)
    actions = np.asarray(actions)
    if actions.dtype != np.float32 or actions.ndim != 2 or actions.shape[0] != rows:
        raise ValueError(
            f"filter_actions needs a float32 array of shape ({rows}, n) of actions; got "
            f"{actions.dtype} {actions.shape}"
        )
    if rows == 0:
        return []
    _one_row_each(supervisors, "filter_actions")
    positions = list(map(_position_of, supervisors))
    ages = observation_age_s if observation_age_s is not None else [None] * rows
    results: list[Result | None] = [None] * rows
    rest: Iterable[int] = range(rows)
    first = supervisors[0]
    if actions.shape[1] == first._n and len(set(map(_map_key_of, supervisors))) == 1:
        acting = _Acting(supervisors, first._map)
        rest = _filter_arrays(
            positions, observations, actions, None, previous, ages, results, acting
        )
    for i in rest:
        # A row the array path left (or refused): its single call's per-row path.
        results[i] = supervisors[i]._filter_per_row(
            observations[i], actions[i], previous[i], ages[i]
        )
    return cast(list[Result], results)


def _one_row_each(supervisors: Sequence[Any], caller: str) -> None:
    """Refuse a supervisor in two rows: its state is one robot's."""
    if len(set(map(id, supervisors))) != len(supervisors):
        raise ValueError(
            f"{caller} got the same supervisor in two rows; each row is one robot, with its "
            "own supervisor"
        )


_position_of = operator.attrgetter("position")
_map_key_of = operator.attrgetter("_map_key")


# -- the array path -------------------------------------------------------------------------


class _Acting(NamedTuple):
    """The action level of a :func:`filter_actions` call that runs rows as arrays (the
    proposals are normalized actions): its supervisors and their action map (center and
    half range, float64, and the clamp)."""

    supervisors: Sequence[PositionActionSupervisor]
    map: tuple[np.ndarray, np.ndarray, float]


def _filter_arrays(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any] | np.ndarray,
    proposals: np.ndarray,
    proposed: Sequence[Any] | None,
    previous: Sequence[Any | None],
    ages: Sequence[float | None],
    results: list[Result | None],
    acting: _Acting | None = None,
) -> list[int]:
    """The common rows, read and answered as arrays; the rows left for the per-row path.

    A row is common when ``PositionSupervisor._common`` says so (the kernel runs its
    supervisor, its observation is a float array neither stale nor of a length the
    kernel cannot read, its previous command None or a float32 array of shape (n,)) and
    the kernel finds its previous command the supervisor's own (with ``acting``: its
    previous action the one its action supervisor returned last, the command behind it
    the position supervisor's last), its observation readable and its proposal (row
    ``i`` of ``proposals``, float32; ``proposed[i]`` the object given, returned when it
    is executed as it was) finite. Each such row gets, bit for bit, what ``filter``
    returns, and its robot's state stays in its slot (``tether.safety.position.states``).
    """
    if _one_group(supervisors, observations, ages, previous):
        # Serving's batch: every row common and alike, told so by one pass per property.
        everyone = list(range(len(supervisors)))
        return _array_group(
            supervisors, everyone, observations, proposals, proposed, previous, results, acting
        )
    rest: list[int] = []
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (supervisor, obs, age, prev) in enumerate(
        zip(supervisors, observations, ages, previous, strict=True)
    ):
        length = supervisor._common(obs, age, prev)
        if length:
            groups.setdefault((supervisor._signature, length), []).append(i)
        else:
            rest.append(i)
    for members in groups.values():
        rest += _array_group(
            supervisors, members, observations, proposals, proposed, previous, results, acting
        )
    return rest


_signature_of = operator.attrgetter("_signature")
_slot_of = operator.attrgetter("_slot")
_dtype_of = operator.attrgetter("dtype")
_shape_of = operator.attrgetter("shape")
_FLOAT32 = np.dtype(np.float32)
_FLOATS = frozenset((np.dtype(np.float32), np.dtype(np.float64)))


def _one_group(
    supervisors: Sequence[PositionSupervisor],
    observations: Sequence[Any] | np.ndarray,
    ages: Sequence[float | None],
    previous: Sequence[Any | None],
) -> bool:
    """Whether ``PositionSupervisor._common`` holds for every row and all rows form one
    group (one signature, one observation length), told by one pass per property."""
    first = supervisors[0]
    signature = first._signature
    if not signature or set(map(_signature_of, supervisors)) != {signature}:
        return False
    if isinstance(observations, np.ndarray):  # the rows of one array, told by the array
        if observations.ndim != 2 or observations.dtype not in _FLOATS:
            return False
        shape = observations.shape[1:]
    else:
        if set(map(type, observations)) != {np.ndarray}:
            return False
        shapes = set(map(_shape_of, observations))
        if len(shapes) != 1 or not set(map(_dtype_of, observations)) <= _FLOATS:
            return False
        (shape,) = shapes
    expected = first._obs_dim
    if len(shape) != 1 or not (shape[0] == expected if expected else shape[0] >= first._min_obs):
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
    observations: Sequence[Any] | np.ndarray,
    proposals: np.ndarray,
    proposed: Sequence[Any] | None,
    previous: Sequence[Any | None],
    results: list[Result | None],
    acting: _Acting | None,
) -> list[int]:
    """The rows ``members`` (one signature, one observation length) in one compiled call
    (``kernel.filter_batch``); the rows whose previous command is not their supervisor's
    own, observation unreadable or proposal non-finite are returned, untouched."""
    first = supervisors[members[0]]
    states = first._states
    assert states is not None
    n = first._n
    rows = len(members)
    whole = rows == len(supervisors)  # every row, in order
    chosen = supervisors if whole else [supervisors[i] for i in members]
    if isinstance(observations, np.ndarray):
        # C-contiguous, as the kernel was compiled for (a copy only of another layout).
        obs = np.ascontiguousarray(observations if whole else observations[members])
    else:
        # Equal-length 1-D arrays end to end, then rows: np.stack's values, at a third of
        # its cost.
        obs = np.concatenate(observations if whole else [observations[i] for i in members])
        obs = obs.reshape(rows, -1)
    given = previous if whole else [previous[i] for i in members]
    has_previous = np.fromiter(map(operator.is_not, given, repeat(None)), np.bool_, rows)
    handed = [p for p in given if p is not None]
    handed_bits = np.concatenate(handed).view(np.uint32).reshape(-1, n) if handed else NO_BITS
    mine = proposals if whole else proposals[members]
    slots = np.fromiter(map(_slot_of, chosen), np.intp, rows)
    action_map = None if acting is None else acting.map
    verdicts: list[SafetyVerdict | None] = [PASSED] * rows
    refused: list[int] = []
    with states.lock:
        while True:
            out = states.run(first, obs, mine, has_previous, handed_bits, action_map, slots)
            kinds = states.codes[:rows, kernel.CODE_KIND]
            if kinds.max(initial=0) != kernel.ROW_OUTSIDE:
                break
            # Robots whose state a single call left on the supervisor: moved to their
            # slots (claimed on a robot's first batch), then the batch again.
            for k in np.flatnonzero(kinds == kernel.ROW_OUTSIDE).tolist():
                slots[k] = chosen[k]._push()
                if acting is not None:
                    acting.supervisors[members[k]]._push(int(slots[k]))
        # The kernel's answers are read before another call writes them.
        codes, report = states.codes, states.report
        for k in np.flatnonzero(kinds).tolist():
            kind, checks = codes[k].tolist()
            if kind == kernel.ROW_REFUSED:
                refused.append(members[k])
                verdicts[k] = None
            else:
                verdicts[k] = chosen[k]._kernel_verdict(kind, checks, report[k])
    if acting is None and proposed is not None:
        # The proposal itself where it is executed as it was (to the bit).
        out_rows = list(out)
        kept = (out.view(np.uint32) == mine.view(np.uint32)).all(axis=1).tolist()
        answers = [
            proposed[i] if same else out_rows[k]
            for k, (i, same) in enumerate(zip(members, kept, strict=True))
        ]
    else:
        answers = list(out)  # with acting, the actions returned
    if whole and not refused:
        results[:] = zip(answers, cast(list[SafetyVerdict], verdicts), strict=True)
    else:
        for i, answer, verdict in zip(members, answers, verdicts, strict=True):
            if verdict is not None:
                results[i] = (answer, verdict)
    return refused
