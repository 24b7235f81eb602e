"""A session's step record names every field from where it belongs (the record is built
positionally on the hot path, so a swapped field would pass unnoticed elsewhere)."""

from __future__ import annotations

import numpy as np

from tether.policy.manifest import VersionInfo
from tether.safety.levels import DegradationLevel
from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict
from tether.serving.inference import ActionOutcome
from tether.serving.session import ControlSession


def test_the_step_record_takes_each_field_from_the_right_place() -> None:
    session = ControlSession("arm-7", supervisor=None)  # type: ignore[arg-type]
    version = VersionInfo(id=12, name="v12", weights_sha256="cd" * 32)
    verdict = SafetyVerdict(ActionSource.CLIPPED, SafetyCheck.RATE | SafetyCheck.STALE, 0.2, (1,))
    outcome = ActionOutcome(
        action=np.full(3, 0.25, np.float32),
        proposed_action=np.full(3, 0.5, np.float32),
        log_prob=-1.0,
        version=version,
        verdict=verdict,
        safety_ns=10,
        degradation=DegradationLevel.NORMAL,
    )
    observation = np.arange(4, dtype=np.float32)
    executed = np.full(3, -0.75, np.float32)
    record = session.step_record(
        episode_id="ep-1",
        step_index=41,
        observation=observation,
        reward=0.5,
        terminated=False,
        truncated=True,
        executed=executed,
        outcome=outcome,
        ingress_ns=1_234,
        client_timestamp_ns=5_678,
    )
    expected = {
        "session_id": session.session_id,
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
    }
    assert {name: getattr(record, name) for name in expected} == expected
    assert type(record.action_source) is str
    assert type(record.safety_checks) is int
    assert record.observation is observation
    assert record.executed_previous_action is executed
    assert record.proposed_action is outcome.proposed_action
    assert record.safe_action is outcome.action
