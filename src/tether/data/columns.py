"""The numeric, columnar form of transitions shared by the replay buffer, the channel and the log.

:class:`TransitionArrays` holds ``N`` transitions as one numpy column per field. It is
the single mapping between :class:`~tether.data.records.Transition` objects and arrays:
the replay storage preallocates it, the channel lays it over shared memory, and the log
reader produces it, so no second place lists the columns by hand. Invariant: every
column has the same leading length and the dtype given in :data:`COLUMN_DTYPES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tether.data.records import Transition, TransitionBatch
from tether.data.step import ACTION_SOURCES, HUMAN_SOURCE_CODE, action_source_code


def fields_of(transitions: Sequence[Transition]) -> list[tuple[Any, ...]]:
    """``transitions`` field by field: entry ``k`` holds field ``k`` of every transition
    (``Transition._fields`` order), transposed in one pass instead of a loop per field."""
    if not transitions:
        return []
    return list(zip(*transitions, strict=True))


(
    _OBSERVATION,
    _PROPOSED,
    _ACTION,
    _REWARD,
    _NEXT_OBSERVATION,
    _TERMINATED,
    _TRUNCATED,
    _SOURCE,
    _CHECKS,
    _VERSION,
    _INGRESS,
    _NEXT_INGRESS,
) = (
    Transition._fields.index(name)
    for name in (
        "observation",
        "proposed_action",
        "action",
        "reward",
        "next_observation",
        "terminated",
        "truncated",
        "action_source",
        "safety_checks",
        "policy_version",
        "ingress_ns",
        "next_ingress_ns",
    )
)


class TransitionArrays(NamedTuple):
    """``N`` transitions, column by column (row ``i`` of every column is one transition)."""

    observations: np.ndarray  # (N, obs_dim) float32
    proposed_actions: np.ndarray  # (N, act_dim) float32, what the policy asked for
    actions: np.ndarray  # (N, act_dim) float32, what the robot executed
    rewards: np.ndarray  # (N,) float32
    next_observations: np.ndarray  # (N, obs_dim) float32
    terminated: np.ndarray  # (N,) bool
    truncated: np.ndarray  # (N,) bool
    action_sources: np.ndarray  # (N,) uint8, index into tether.data.step.ACTION_SOURCES
    safety_checks: np.ndarray  # (N,) int64, SafetyCheck bits
    policy_versions: np.ndarray  # (N,) int64
    ingress_ns: np.ndarray  # (N,) int64, arrival of observation
    next_ingress_ns: np.ndarray  # (N,) int64, arrival of next_observation

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def obs_dim(self) -> int:
        return int(self.observations.shape[1])

    @property
    def act_dim(self) -> int:
        return int(self.actions.shape[1])

    @classmethod
    def empty(
        cls, rows: int, obs_dim: int, act_dim: int, *, zeroed: bool = True
    ) -> TransitionArrays:
        """Preallocated columns for ``rows`` transitions, zeroed unless the caller fills
        every entry (``zeroed=False``)."""
        make = np.zeros if zeroed else np.empty
        return cls(
            *(
                make((rows, *row_shape(name, obs_dim, act_dim)), dtype=COLUMN_DTYPES[name])
                for name in cls._fields
            )
        )

    @classmethod
    def from_transitions(
        cls, transitions: Sequence[Transition], obs_dim: int, act_dim: int
    ) -> TransitionArrays:
        """Stack ``transitions``; dims are given so an empty sequence still has a shape."""
        return cls.from_fields(fields_of(transitions), obs_dim, act_dim)

    @classmethod
    def from_fields(
        cls, fields: Sequence[Sequence[Any]], obs_dim: int, act_dim: int
    ) -> TransitionArrays:
        """The columns of transitions given field by field (``fields_of``)."""
        rows = len(fields[0]) if fields else 0
        out = cls.empty(rows, obs_dim, act_dim, zeroed=False)  # every column is filled below
        if not rows:
            return out
        vectors = (
            (out.observations, fields[_OBSERVATION]),
            (out.proposed_actions, fields[_PROPOSED]),
            (out.actions, fields[_ACTION]),
            (out.next_observations, fields[_NEXT_OBSERVATION]),
        )
        try:
            # One conversion per column: a row at a time cost ~1.6 us per transition on
            # the recorder's threads, which share the GIL with serving.
            for column, values in vectors:
                column[:] = np.asarray(values, dtype=column.dtype)
        except ValueError:  # rows of unequal shapes: each as a row assignment takes it
            for column, values in vectors:
                for i, row in enumerate(values):
                    column[i] = row
        out.rewards[:] = fields[_REWARD]
        out.terminated[:] = fields[_TERMINATED]
        out.truncated[:] = fields[_TRUNCATED]
        out.action_sources[:] = [action_source_code(s) for s in fields[_SOURCE]]
        out.safety_checks[:] = fields[_CHECKS]
        out.policy_versions[:] = fields[_VERSION]
        out.ingress_ns[:] = fields[_INGRESS]
        out.next_ingress_ns[:] = fields[_NEXT_INGRESS]
        return out

    def replace(self, **columns: np.ndarray) -> TransitionArrays:
        """A copy with some columns swapped; use it, not ``_replace``, which breaks here
        because ``__len__`` counts rows, not fields."""
        unknown = set(columns) - set(self._fields)
        if unknown:
            raise TypeError(f"TransitionArrays has no columns {sorted(unknown)}")
        return TransitionArrays(
            *(columns.get(name, col) for name, col in zip(self._fields, self, strict=True))
        )

    def take(self, rows: np.ndarray | slice) -> TransitionArrays:
        """A copy of the selected rows (fancy index) or a view (slice)."""
        if isinstance(rows, slice):
            return TransitionArrays(*(column[rows] for column in self))
        # ndarray.take is about twice as fast as fancy indexing on the 2-D columns.
        return TransitionArrays(*(column.take(rows, axis=0) for column in self))

    def assign(self, rows: np.ndarray | slice, source: TransitionArrays) -> None:
        """Write ``source`` into the selected rows; with repeated indices the last row wins."""
        for column, values in zip(self, source, strict=True):
            column[rows] = values

    def batch_of(self, rows: np.ndarray | slice) -> TransitionBatch:
        """The learner's view of the selected rows, gathering only the columns it needs."""
        if isinstance(rows, slice):

            def pick(column: np.ndarray) -> np.ndarray:
                return column[rows]
        else:

            def pick(column: np.ndarray) -> np.ndarray:
                return column.take(rows, axis=0)

        return TransitionBatch(
            observations=pick(self.observations),
            actions=pick(self.actions),
            rewards=pick(self.rewards),
            next_observations=pick(self.next_observations),
            terminated=pick(self.terminated),
            truncated=pick(self.truncated),
            policy_versions=pick(self.policy_versions),
            ingress_ns=pick(self.ingress_ns),
            safety_checks=pick(self.safety_checks),
            human=pick(self.action_sources) == HUMAN_SOURCE_CODE,
        )

    @staticmethod
    def concat(parts: Sequence[TransitionArrays]) -> TransitionArrays:
        """Rows of all ``parts`` in order; ``parts`` must not be empty."""
        return TransitionArrays(*(np.concatenate(cols) for cols in zip(*parts, strict=True)))


COLUMN_DTYPES: dict[str, type[np.generic]] = {
    "observations": np.float32,
    "proposed_actions": np.float32,
    "actions": np.float32,
    "rewards": np.float32,
    "next_observations": np.float32,
    "terminated": np.bool_,
    "truncated": np.bool_,
    "action_sources": np.uint8,
    "safety_checks": np.int64,
    "policy_versions": np.int64,
    "ingress_ns": np.int64,
    "next_ingress_ns": np.int64,
}


def row_shape(name: str, obs_dim: int, act_dim: int) -> tuple[int, ...]:
    """Shape of one row of column ``name`` (``()`` for scalar columns)."""
    if name in ("observations", "next_observations"):
        return (obs_dim,)
    if name in ("proposed_actions", "actions"):
        return (act_dim,)
    return ()


class TransitionTable(NamedTuple):
    """``N`` transitions as columns: the numeric ones (``arrays``) and those that name
    where each came from. What the recorder hands its sinks."""

    arrays: TransitionArrays
    session_ids: Sequence[str]
    robot_ids: Sequence[str]
    episode_ids: Sequence[str]
    step_indices: np.ndarray  # (N,) int64, the index of ``observation`` in its episode
    weights_sha256: Sequence[str]
    client_timestamp_ns: np.ndarray  # (N,) int64

    def __len__(self) -> int:
        return len(self.arrays)

    @classmethod
    def from_transitions(
        cls, transitions: Sequence[Transition], obs_dim: int, act_dim: int
    ) -> TransitionTable:
        """The columns of ``transitions`` (ValueError or OverflowError for a value that
        does not fit its column)."""
        fields = fields_of(transitions)
        names = Transition._fields

        def column(name: str) -> Sequence[Any]:
            return fields[names.index(name)] if fields else ()

        rows = len(transitions)
        return cls(
            TransitionArrays.from_fields(fields, obs_dim, act_dim),
            column("session_id"),
            column("robot_id"),
            column("episode_id"),
            np.array(column("step_index"), dtype=np.int64).reshape(rows),
            column("weights_sha256"),
            np.array(column("client_timestamp_ns"), dtype=np.int64).reshape(rows),
        )

    def transitions(self) -> list[Transition]:
        """Row by row (for inspection and tests; sinks read the columns)."""
        a = self.arrays
        return [
            Transition(*row)
            for row in zip(
                self.session_ids,
                self.robot_ids,
                self.episode_ids,
                self.step_indices.tolist(),
                a.observations,
                a.proposed_actions,
                a.actions,
                a.rewards.tolist(),
                a.next_observations,
                a.terminated.tolist(),
                a.truncated.tolist(),
                [ACTION_SOURCES[c] for c in a.action_sources.tolist()],
                a.safety_checks.tolist(),
                a.policy_versions.tolist(),
                self.weights_sha256,
                a.ingress_ns.tolist(),
                a.next_ingress_ns.tolist(),
                self.client_timestamp_ns.tolist(),
                strict=True,
            )
        ]

    def slice(self, start: int, stop: int) -> TransitionTable:
        """Rows ``start:stop`` (views of the numeric columns)."""
        rows = slice(start, stop)
        return TransitionTable(
            self.arrays.take(rows),
            self.session_ids[rows],
            self.robot_ids[rows],
            self.episode_ids[rows],
            self.step_indices[rows],
            self.weights_sha256[rows],
            self.client_timestamp_ns[rows],
        )

    @staticmethod
    def concat(parts: Sequence[TransitionTable]) -> TransitionTable:
        """Rows of all ``parts`` in order; ``parts`` must not be empty."""
        if len(parts) == 1:
            return parts[0]
        return TransitionTable(
            TransitionArrays.concat([p.arrays for p in parts]),
            [v for p in parts for v in p.session_ids],
            [v for p in parts for v in p.robot_ids],
            [v for p in parts for v in p.episode_ids],
            np.concatenate([p.step_indices for p in parts]),
            [v for p in parts for v in p.weights_sha256],
            np.concatenate([p.client_timestamp_ns for p in parts]),
        )
