"""The batch records its answered Control steps: one ``AnsweredSteps`` per group, every field
from where it belongs (the facts and the block are built positionally on the hot path, so
a swapped field would pass unnoticed elsewhere), Control steps only, and never at the
cost of the batch."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.serving.test_chunk_inference import ChunkEngine, H
from tests.serving.test_inference import queries, step_facts
from tether.data.columns import TransitionTable
from tether.data.recorder import Recorder
from tether.data.step import AnsweredSteps, StepRecord
from tether.policy.engine import PolicyEngine
from tether.policy.manifest import VersionInfo
from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict
from tether.serving import inference
from tether.serving.errors import RequestInvalid
from tether.serving.inference import ENCODE_ROWS, ActionOutcome, InferencePipeline
from tether.spec import RobotSpec
from tether.versions.holder import LiveModel


@dataclass
class _Out:
    actions: np.ndarray
    log_probs: np.ndarray
    version: VersionInfo


class FixedEngine:
    """Proposes ``proposed[i]`` for row ``i`` of every batch."""

    def __init__(self, spec: RobotSpec, proposed: np.ndarray, version: VersionInfo) -> None:
        self.version = version
        self.obs_dim, self.act_dim = spec.obs_dim, spec.act_dim
        self.action_low = -np.ones(spec.act_dim, np.float32)
        self.action_high = np.ones(spec.act_dim, np.float32)
        self.proposed = proposed

    def act(self, observations: np.ndarray, deterministic: Any) -> _Out:
        n = observations.shape[0]
        return _Out(self.proposed[:n].copy(), np.zeros(n, np.float32), self.version)


class _Collect:
    """A recorder sink that counts the transitions it is handed."""

    def __init__(self) -> None:
        self.rows = 0

    def put(self, transitions: TransitionTable) -> None:
        self.rows += len(transitions)


def _recorder() -> tuple[list[AnsweredSteps], Any]:
    blocks: list[AnsweredSteps] = []
    return blocks, blocks.append


def test_the_step_block_takes_each_field_from_the_right_place(
    arm: RobotSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = VersionInfo(id=12, name="v12", weights_sha256="cd" * 32)
    proposed = np.stack(
        [np.full(arm.act_dim, 0.5, np.float32), np.full(arm.act_dim, -0.5, np.float32)]
    )
    safe = [np.full(arm.act_dim, 0.25, np.float32), np.full(arm.act_dim, -0.125, np.float32)]
    verdicts = [
        SafetyVerdict(ActionSource.CLIPPED, SafetyCheck.RATE | SafetyCheck.STALE, 0.2, (1,)),
        SafetyVerdict(ActionSource.BACKUP, SafetyCheck.NON_FINITE, 1.0, ()),
    ]
    monkeypatch.setattr(
        inference, "decide_batch", lambda rows, *_: list(zip(safe, verdicts, strict=True))
    )
    blocks, record = _recorder()
    pipeline = InferencePipeline(LiveModel(FixedEngine(arm, proposed, version)), record=record)
    executed = np.full(arm.act_dim, -0.75, np.float32)
    batch = [
        q._replace(ingress_ns=1_234 + i, step=facts)
        for i, (q, facts) in enumerate(
            zip(
                queries(arm, [True, False], seed=1),
                [
                    step_facts(
                        41,
                        "ep-1",
                        session_id="session-a",
                        robot_id="arm-7",
                        reward=0.5,
                        truncated=True,
                        executed_previous_action=executed,
                        client_timestamp_ns=5_678,
                    ),
                    step_facts(
                        3,
                        "ep-2",
                        session_id="session-b",
                        robot_id="arm-8",
                        reward=-1.5,
                        terminated=True,
                        client_timestamp_ns=2**63 - 1,
                    ),
                ],
                strict=True,
            )
        )
    ]
    results = pipeline.run(batch)
    assert len(blocks) == 1
    first, second = blocks[0].records()
    expected = [
        {
            "session_id": "session-a",
            "robot_id": "arm-7",
            "episode_id": "ep-1",
            "step_index": 41,
            "reward": 0.5,
            "terminated": False,
            "truncated": True,
            "action_source": "clipped",
            "safety_checks": int(SafetyCheck.RATE | SafetyCheck.STALE),
            "policy_version": 12,
            "weights_sha256": "cd" * 32,
            "ingress_ns": 1_234,
            "client_timestamp_ns": 5_678,
        },
        {
            "session_id": "session-b",
            "robot_id": "arm-8",
            "episode_id": "ep-2",
            "step_index": 3,
            "reward": -1.5,
            "terminated": True,
            "truncated": False,
            "action_source": "backup",
            "safety_checks": int(SafetyCheck.NON_FINITE),
            "policy_version": 12,
            "weights_sha256": "cd" * 32,
            "ingress_ns": 1_235,
            "client_timestamp_ns": 2**63 - 1,
        },
    ]
    for record, want, query, outcome in zip((first, second), expected, batch, results, strict=True):
        assert isinstance(outcome, ActionOutcome)
        assert {name: getattr(record, name) for name in want} == want
        assert type(record.action_source) is str
        assert type(record.safety_checks) is int
        np.testing.assert_array_equal(record.observation, query.observation)
        np.testing.assert_array_equal(record.proposed_action, outcome.proposed_action)
        np.testing.assert_array_equal(record.safe_action, outcome.action)
    np.testing.assert_array_equal(first.proposed_action, proposed[0])
    np.testing.assert_array_equal(first.safe_action, safe[0])
    np.testing.assert_array_equal(second.safe_action, safe[1])
    assert first.executed_previous_action is not None
    np.testing.assert_array_equal(first.executed_previous_action, executed)
    assert second.executed_previous_action is None


def test_only_answered_control_steps_are_recorded(engine: PolicyEngine, arm: RobotSpec) -> None:
    """GetAction queries (no step) and a Control step refused for its observation share
    the batch; the block holds the answered Control steps alone, in batch order."""
    blocks, record = _recorder()
    pipeline = InferencePipeline(LiveModel(engine), max_abs_observation=10.0, record=record)
    batch = queries(arm, [True] * 6, seed=2)
    control = {0: 10, 2: 12, 3: 13, 5: 15}  # row -> step index; rows 1 and 4: GetAction
    for row, index in control.items():
        batch[row] = batch[row]._replace(step=step_facts(index, f"ep-{row}"))
    bad = batch[3].observation.copy()
    bad[0] = np.nan
    batch[3] = batch[3]._replace(observation=bad)
    results = pipeline.run(batch)
    assert isinstance(results[3], RequestInvalid)
    assert all(isinstance(r, ActionOutcome) for i, r in enumerate(results) if i != 3)
    assert len(blocks) == 1
    recorded = blocks[0].records()
    assert [r.step_index for r in recorded] == [10, 12, 15]
    for r, row in zip(recorded, (0, 2, 5), strict=True):
        outcome = results[row]
        assert isinstance(outcome, ActionOutcome)
        np.testing.assert_array_equal(r.safe_action, outcome.action)
        np.testing.assert_array_equal(r.observation, batch[row].observation)
    # A batch of GetAction queries alone records nothing at all.
    pipeline.run(queries(arm, [True] * 3, seed=3))
    assert len(blocks) == 1


@pytest.mark.parametrize("rows", [1, ENCODE_ROWS + 1])
def test_a_recording_that_fails_is_logged_and_the_batch_answered(
    engine: PolicyEngine,
    arm: RobotSpec,
    caplog: pytest.LogCaptureFixture,
    rows: int,
) -> None:
    """A hook that raises: every row still gets its action, and the failure is logged."""
    calls: list[int] = []

    def hook(block: AnsweredSteps) -> None:
        calls.append(len(block))
        raise RuntimeError("the recorder is broken")

    caplog.set_level(logging.ERROR, logger="tether.serving.inference")
    pipeline = InferencePipeline(LiveModel(engine), record=hook)
    batch = [
        q._replace(step=step_facts(i, f"ep-{i}"))
        for i, q in enumerate(queries(arm, [True] * rows, seed=rows))
    ]
    results = pipeline.run(batch)
    assert all(isinstance(r, ActionOutcome) for r in results), results
    assert all(np.isfinite(r.action).all() for r in results if isinstance(r, ActionOutcome))
    if rows >= ENCODE_ROWS:
        assert all(r.reply is not None for r in results if isinstance(r, ActionOutcome))
    assert calls == [rows]
    (logged,) = [r for r in caplog.records if "answered steps failed" in r.getMessage()]
    assert f"recording {rows} answered steps failed" in logged.getMessage()


def test_a_step_no_column_holds_is_refused_by_the_recorder_not_the_batch(
    engine: PolicyEngine, arm: RobotSpec
) -> None:
    """A stamp beyond int64 (which the handler refuses before it gets here): the batch
    answers every row and hands the steps over unconverted; the recorder's worker refuses
    that step alone, counts it, and pairs the others."""
    sink = _Collect()
    with Recorder([sink]) as recorder:
        pipeline = InferencePipeline(LiveModel(engine), record=recorder.record_steps)
        for index in range(3):
            stamp = 2**63 if index == 1 else index
            (query,) = queries(arm, [True], seed=index)
            batch = [query._replace(step=step_facts(index, "ep", client_timestamp_ns=stamp))]
            assert all(isinstance(r, ActionOutcome) for r in pipeline.run(batch))
        assert recorder.flush()
        stats = recorder.stats()
    assert stats.pairing.malformed == 1
    assert stats.pairing.steps == 2  # steps 0 and 2 reached the pairer: a gap, no pair
    assert stats.pairing.transitions == 0
    assert sink.rows == 0


def test_a_chunk_policy_records_the_step_0_it_sends(arm: RobotSpec) -> None:
    from tests.serving.test_kserve import tight_limits
    from tether.serving.supervision import SupervisorFactory

    chunk = np.zeros((H, arm.act_dim), np.float32)
    chunk[0] = 0.01
    chunk[1:] = 1.0  # later steps the supervisor corrects: not what is recorded
    blocks, record = _recorder()
    pipeline = InferencePipeline(
        LiveModel(ChunkEngine(arm, chunk)), step_period_s=arm.control_period_s, record=record
    )
    factory = SupervisorFactory(arm, limits=tight_limits(arm))
    image = np.zeros((4, 4, 3), np.uint8)
    batch = [
        q._replace(
            supervisor=factory(),
            inputs={"state": q.observation, "image": image},
            step=step_facts(i, "e", robot_id=f"arm-{i}"),
        )
        for i, q in enumerate(queries(arm, [True] * 3, seed=4))
    ]
    results = pipeline.run(batch)
    assert len(blocks) == 1
    recorded: list[StepRecord] = blocks[0].records()
    assert [r.robot_id for r in recorded] == ["arm-0", "arm-1", "arm-2"]
    for r, q, outcome in zip(recorded, batch, results, strict=True):
        assert isinstance(outcome, ActionOutcome)
        assert outcome.chunk is not None
        np.testing.assert_array_equal(r.observation, q.observation)
        np.testing.assert_array_equal(r.proposed_action, chunk[0])
        np.testing.assert_array_equal(r.safe_action, outcome.chunk.actions[0])
        np.testing.assert_array_equal(r.safe_action, outcome.action)
        assert r.action_source == outcome.verdict.source.value
        assert r.safety_checks == int(outcome.verdict.checks)
