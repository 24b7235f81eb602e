"""Many robots' commands through their position supervisors in one call.

``filter_commands(supervisors, observations, commands, previous)`` returns, row by row,
exactly what ``supervisors[i].filter(observations[i], commands[i], previous[i],
observation_age_s=ages[i])`` returns, in the same state afterwards; ``filter_actions``
does the same for :class:`PositionActionSupervisor` rows (normalized actions, the spec's
map computed for all rows at once). Each row's inputs are read and its verdict built in
Python as a single call does (``PositionSupervisor._prepare``/``_finish``); the numbers
in between run in one compiled call (``kernel.step_batch``) for all the rows under the
same limits, each row with its own robot's anchors. Rows whose supervisor runs the
Python path, and unreadable observations, are answered as single calls are.

Invariants: row ``i``'s result and ``supervisors[i]``'s state after the call are
bit-identical to a single ``filter`` call's (``tests/safety/test_position_batch.py``);
one robot's unusable input never changes another row's answer; a supervisor appears in
at most one row (its state is one robot's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tether.safety.position import kernel
from tether.safety.position.actions import (
    _ACTION_CLAMP,
    PositionActionSupervisor,
    _as_action,
)
from tether.safety.position.supervisor import PositionSupervisor, _Step
from tether.safety.verdict import ActionSource, SafetyVerdict

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
    if len({id(s) for s in supervisors}) != rows:
        raise ValueError(
            "filter_commands got the same supervisor in two rows; each row is one robot, "
            "with its own supervisor"
        )
    ages = observation_age_s if observation_age_s is not None else [None] * rows
    results: list[Result | None] = [None] * rows
    steps: list[_Step | None] = [None] * rows
    groups: dict[bytes, list[int]] = {}
    for i, supervisor in enumerate(supervisors):
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
    out: list[Result] = []
    for result in results:
        assert result is not None
        out.append(result)
    return out


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
    targets = _targets(supervisors[0], actions) if same else None
    commands: list[Any] = []
    for i, supervisor in enumerate(supervisors):
        commands.append(targets[i] if targets is not None else supervisor._to_target(actions[i]))
    inner = filter_commands(
        [s.position for s in supervisors],
        observations,
        commands,
        [s._previous(p) for s, p in zip(supervisors, previous, strict=True)],
        observation_age_s,
    )
    out: list[Result] = []
    for i, (supervisor, (command, verdict)) in enumerate(zip(supervisors, inner, strict=True)):
        if verdict.source is ActionSource.POLICY:
            action = _as_action(actions[i], supervisor._n)
        else:
            action = supervisor._to_action(command)
        out.append((supervisor._remember(action, command), verdict))
    return out


def _same_map(supervisors: Sequence[PositionActionSupervisor]) -> bool:
    first = supervisors[0]
    return all(
        s._center == first._center and s._half == first._half and s._n == first._n
        for s in supervisors
    )


def _targets(supervisor: PositionActionSupervisor, actions: np.ndarray) -> np.ndarray:
    """``supervisor._to_target`` of every row at once, bit for bit: c + h·clamp(a) in
    float64 (the same two roundings per element), non-finite actions kept as they are."""
    x = actions.astype(np.float64)
    center = np.array(supervisor._center)
    half = np.array(supervisor._half)
    mapped = center + half * np.clip(x, -_ACTION_CLAMP, _ACTION_CLAMP)
    return np.where(np.isfinite(x), mapped, x).astype(np.float32)
