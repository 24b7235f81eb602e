"""What the serving layer hands the recorder: answered control steps.

A control step is one message of a ``Control`` session after the server has answered
it: what the robot reported (observation, reward of its previous action, episode end,
the action it really executed if a person overrode it) and what the server sent back
(proposed and safe action, who chose it, which safety checks fired, which policy
version). The server hands them over a batch at a time, as :class:`AnsweredSteps`: what
each step reported (:class:`StepFacts`, carried with its query) beside the batch's own
arrays, one append per batch and nothing converted on the serving path. The recorder's
worker joins what a wake brought into one :class:`StepBlock` of typed columns, which the
pairer and the sinks read. A caller with single steps builds :class:`StepRecord`
objects. Invariants: everything in a step was fixed at ingress or by the batch that
answered it; the recorder never reads a clock or a live object to fill it in later; a
block's every value fits its column (a step that does not is refused when joined).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np

# Storage code of each action source; the order is part of the log and channel format.
ACTION_SOURCES: tuple[str, ...] = ("policy", "clipped", "backup", "human")
HUMAN_SOURCE_CODE = ACTION_SOURCES.index("human")
_SOURCE_CODES = {source: code for code, source in enumerate(ACTION_SOURCES)}
_UNKNOWN = len(ACTION_SOURCES)  # the code of a source outside ACTION_SOURCES: refused


def action_source_code(source: str) -> int:
    """The storage code of ``source``; an unknown source is a serving-layer bug."""
    code = _SOURCE_CODES.get(source, _UNKNOWN)
    if code == _UNKNOWN:
        raise ValueError(
            f"action_source must be one of {ACTION_SOURCES}, got {source!r}; "
            "use tether.safety.ActionSource values"
        )
    return code


class StepRecord(NamedTuple):
    """One control step of one robot session, as answered by the server.

    ``reward``, ``executed_previous_action`` and the episode-end flags describe the
    *previous* action and this observation; ``proposed_action``/``safe_action`` and the
    fields after them describe the action chosen *for* this observation. Actions are
    normalized to [-1, 1]. The form of a single step (tools, tests,
    ``Recorder.record``); the server hands steps over a batch at a time (``AnsweredSteps``).
    """

    session_id: str
    robot_id: str
    episode_id: str
    step_index: int
    observation: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    executed_previous_action: np.ndarray | None
    proposed_action: np.ndarray
    safe_action: np.ndarray
    action_source: str
    safety_checks: int
    policy_version: int
    weights_sha256: str
    ingress_ns: int
    client_timestamp_ns: int = 0


class StepFacts(NamedTuple):
    """What a Control step reported, carried with its query to the batch that answers it
    (the rest of the step, observation and answer, comes from the batch's arrays)."""

    step_index: int  # first two as ``(step_index, episode_id)``: the reply's address
    episode_id: str
    session_id: str
    robot_id: str
    reward: float
    terminated: bool
    truncated: bool
    executed_previous_action: np.ndarray | None
    client_timestamp_ns: int


class StepVerdict(Protocol):
    """What the recorder reads of a step's safety verdict (``tether.safety.SafetyVerdict``)."""

    @property
    def source(self) -> str: ...  # one of ACTION_SOURCES

    @property
    def checks(self) -> int: ...  # SafetyCheck bits


class _Verdict(NamedTuple):
    source: str
    checks: int


class AnsweredSteps(NamedTuple):
    """Control steps one batch answered, as the batch holds them: handed to the recorder
    as they are (one append per batch on the serving path) and turned into columns by its
    worker (``StepBlock.join``). Row ``i`` of every sequence is one step; one version
    answered them all."""

    facts: Sequence[StepFacts]
    observations: np.ndarray  # (B, obs_dim)
    proposed_actions: np.ndarray  # (B, act_dim)
    safe_actions: Sequence[np.ndarray]  # B rows of (act_dim,)
    verdicts: Sequence[StepVerdict]
    ingress_ns: Sequence[int]
    policy_version: int
    weights_sha256: str

    def __len__(self) -> int:
        return len(self.facts)

    @property
    def dims(self) -> tuple[int, int]:
        """``(obs_dim, act_dim)`` of its rows, as its arrays say; ``(-1, -1)`` when they
        are no matrices of numbers (refused when joined)."""
        obs, proposed = self.observations, self.proposed_actions
        if obs.ndim != 2 or proposed.ndim != 2 or object in (obs.dtype, proposed.dtype):
            return -1, -1
        return int(obs.shape[1]), int(proposed.shape[1])

    def records(self) -> list[StepRecord]:
        """Row by row (for inspection and tests; the recorder reads columns)."""
        return StepBlock.join([self]).records()

    @classmethod
    def from_records(cls, records: Sequence[StepRecord]) -> AnsweredSteps:
        """Single steps of one version as one hand-over (nothing is converted or checked
        here but that they name one version: a batch is answered by one)."""
        if not records:
            raise ValueError("AnsweredSteps needs at least one step")
        version, weights = records[0].policy_version, records[0].weights_sha256
        if any((r.policy_version, r.weights_sha256) != (version, weights) for r in records):
            raise ValueError("the steps of one hand-over must name one policy version")
        facts = [
            StepFacts(
                r.step_index,
                r.episode_id,
                r.session_id,
                r.robot_id,
                r.reward,
                r.terminated,
                r.truncated,
                r.executed_previous_action,
                r.client_timestamp_ns,
            )
            for r in records
        ]
        return cls(
            facts,
            _rows([r.observation for r in records]),
            _rows([r.proposed_action for r in records]),
            [r.safe_action for r in records],
            [_Verdict(r.action_source, r.safety_checks) for r in records],
            [r.ingress_ns for r in records],
            version,
            weights,
        )


class StepBlock(NamedTuple):
    """``B`` answered control steps, column by column (row ``i`` of every field is one
    step; the fields mean what :class:`StepRecord`'s do). ``executed`` holds the action a
    person executed instead of the previous one where ``overridden``, zeros elsewhere."""

    session_ids: Sequence[str]
    robot_ids: Sequence[str]
    episode_ids: Sequence[str]
    step_indices: np.ndarray  # (B,) int64
    observations: np.ndarray  # (B, obs_dim) float32
    rewards: np.ndarray  # (B,) float32
    terminated: np.ndarray  # (B,) bool
    truncated: np.ndarray  # (B,) bool
    executed: np.ndarray  # (B, act_dim) float32
    overridden: np.ndarray  # (B,) bool
    proposed_actions: np.ndarray  # (B, act_dim) float32
    safe_actions: np.ndarray  # (B, act_dim) float32
    action_sources: np.ndarray  # (B,) uint8, index into ACTION_SOURCES
    safety_checks: np.ndarray  # (B,) int64
    policy_versions: np.ndarray  # (B,) int64
    weights_sha256: Sequence[str]
    ingress_ns: np.ndarray  # (B,) int64
    client_timestamp_ns: np.ndarray  # (B,) int64

    def __len__(self) -> int:
        return int(self.step_indices.shape[0])

    @classmethod
    def join(cls, parts: Sequence[AnsweredSteps]) -> StepBlock:
        """The columns of every step of ``parts`` (at least one step), in order; one
        conversion per column for all of them. Raises ValueError (OverflowError for an
        integer beyond int64) when shapes disagree or a value does not fit its column."""
        lengths = [len(p.facts) for p in parts]
        rows = sum(lengths)
        if not rows:
            raise ValueError("a StepBlock needs at least one step")
        facts: list[StepFacts] = []
        safe: list[np.ndarray] = []
        verdicts: list[StepVerdict] = []
        ingress: list[int] = []
        for part in parts:  # one pass, whole sequences at a time
            facts += part.facts
            safe += part.safe_actions
            verdicts += part.verdicts
            ingress += part.ingress_ns
        # One version answers a batch, and mostly every batch of a wake.
        versions = np.repeat(np.array([p.policy_version for p in parts], np.int64), lengths)
        part_weights = [p.weights_sha256 for p in parts]
        if part_weights.count(part_weights[0]) == len(part_weights):
            weights: Sequence[str] = [part_weights[0]] * len(facts)
        else:
            weights = np.repeat(np.array(part_weights, dtype=object), lengths).tolist()
        if len(parts) == 1:
            observations: np.ndarray = parts[0].observations
            proposed: np.ndarray = parts[0].proposed_actions
        else:
            observations = np.concatenate([p.observations for p in parts])
            proposed = np.concatenate([p.proposed_actions for p in parts])
        # One transposition of the facts, one conversion per column type.
        (indices, episodes, sessions, robots, rewards, terminated, truncated, executed, stamps) = (
            zip(*facts, strict=True)
        )
        safe_rows = np.array(safe, dtype=np.float32)
        if safe_rows.ndim != 2 or len(safe_rows) != rows:
            raise ValueError(f"safe actions of shape {safe_rows.shape} for {rows} steps")
        act_dim = safe_rows.shape[1]
        codes = np.array([_SOURCE_CODES.get(v.source, _UNKNOWN) for v in verdicts], np.uint8)
        if len(codes) != rows or codes.max() >= len(ACTION_SOURCES):
            raise ValueError(f"action sources must be among {ACTION_SOURCES}, got codes {codes}")
        checks = [v.checks for v in verdicts]
        integers = np.array((indices, checks, ingress, stamps), dtype=np.int64)
        flags = np.array((terminated, truncated), dtype=bool)
        executed_rows = np.zeros((rows, act_dim), dtype=np.float32)
        overridden = np.zeros(rows, dtype=bool)
        if any(action is not None for action in executed):
            for i, action in enumerate(executed):
                if action is not None:
                    if np.shape(action) != (act_dim,):
                        raise ValueError(
                            f"executed_previous_action of step {indices[i]} has shape "
                            f"{np.shape(action)}, the actions ({act_dim},)"
                        )
                    executed_rows[i] = action
                    overridden[i] = True
        return cls(
            sessions,
            robots,
            episodes,
            integers[0],
            _matrix(observations, rows, "observations"),
            np.array(rewards, dtype=np.float32),
            flags[0],
            flags[1],
            executed_rows,
            overridden,
            _matrix(proposed, rows, "proposed actions", act_dim),
            safe_rows,
            codes,
            integers[1],
            versions,
            weights,
            integers[2],
            integers[3],
        )

    def records(self) -> list[StepRecord]:
        """Row by row (for inspection and tests; the recorder reads the columns)."""
        executed = [
            e if o else None for e, o in zip(self.executed, self.overridden.tolist(), strict=True)
        ]
        return [
            StepRecord(*row)
            for row in zip(
                self.session_ids,
                self.robot_ids,
                self.episode_ids,
                self.step_indices.tolist(),
                self.observations,
                self.rewards.tolist(),
                self.terminated.tolist(),
                self.truncated.tolist(),
                executed,
                self.proposed_actions,
                self.safe_actions,
                [ACTION_SOURCES[c] for c in self.action_sources.tolist()],
                self.safety_checks.tolist(),
                self.policy_versions.tolist(),
                self.weights_sha256,
                self.ingress_ns.tolist(),
                self.client_timestamp_ns.tolist(),
                strict=True,
            )
        ]

    @classmethod
    def from_records(cls, records: Sequence[StepRecord]) -> StepBlock:
        """The block of single steps; ValueError if their shapes disagree, a source is
        unknown or a value does not fit its column."""
        return cls.join([AnsweredSteps.from_records([r]) for r in records])


def _matrix(values: np.ndarray, rows: int, what: str, width: int | None = None) -> np.ndarray:
    matrix = np.asarray(values, dtype=np.float32)
    if matrix.ndim != 2 or len(matrix) != rows or width not in (None, matrix.shape[1]):
        raise ValueError(f"{what} of shape {matrix.shape} for {rows} steps")
    return matrix


def _rows(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """Equal-length vectors as rows; an object array (refused when joined) otherwise."""
    try:
        rows = np.array(vectors, dtype=np.float32)
    except (ValueError, TypeError):
        rows = None
    if rows is None or rows.ndim != 2:
        rows = np.empty(len(vectors), dtype=object)
        rows[:] = [np.asarray(v) for v in vectors]
        rows = rows.reshape(len(vectors), 1)
    return rows
