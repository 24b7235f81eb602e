"""ActionGateway: the request path the drop-in protocols share."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.serving.serving_harness import server_config
from tether.policy.engine import PolicyEngine
from tether.safety.levels import DegradationLevel
from tether.safety.verdict import PASSED
from tether.serving.admission import Admission
from tether.serving.batcher import Batched
from tether.serving.errors import RequestInvalid
from tether.serving.gateway import ActionGateway, VersionChanged
from tether.serving.inference import ActionOutcome, ActionQuery
from tether.serving.metrics import ServingMetrics
from tether.serving.served_spec import ServedSpec
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec
from tether.versions.holder import LiveModel


@dataclass(frozen=True)
class Version:
    id: int
    name: str = "v"
    weights_sha256: str = "0" * 64
    parent: int | None = None


class SwappingBatcher:
    """Answers each query with the next version in turn: a swap between every batch."""

    def __init__(self) -> None:
        self.calls = 0

    async def submit(self, query: ActionQuery, deadline: float | None) -> Batched[Any]:
        self.calls += 1
        action = np.zeros(4, np.float32)
        outcome = ActionOutcome(
            action, action, 0.0, Version(self.calls), PASSED, 0, DegradationLevel.NORMAL
        )
        return Batched(outcome, 0, 0, 1)


def gateway(arm: RobotSpec, engine: PolicyEngine, batcher: Any) -> ActionGateway:
    config = server_config()
    return ActionGateway(
        config=config,
        spec=ServedSpec.from_robot_spec(arm),
        models=LiveModel(engine),
        batcher=batcher,
        admission=Admission(config.admission, control_period_s=arm.control_period_s),
        metrics=ServingMetrics(arm.action_names),
        supervisors=SupervisorFactory(arm),
    )


def test_rows_of_one_request_served_by_two_versions_are_refused(
    arm: RobotSpec, engine: PolicyEngine
) -> None:
    gate = gateway(arm, engine, SwappingBatcher())
    rows = np.zeros((3, arm.obs_dim), np.float32)
    with pytest.raises(VersionChanged, match="retry"):
        asyncio.run(gate.act(rows, client="c", supervisor=gate.supervisors()))


def test_rows_are_checked_for_dtype_shape_count_and_finiteness(
    arm: RobotSpec, engine: PolicyEngine
) -> None:
    gate = gateway(arm, engine, SwappingBatcher())
    tensor = gate.inputs[0]
    good = np.zeros((2, arm.obs_dim), np.float32)
    np.testing.assert_array_equal(gate.check_rows(good, tensor, "x"), good)
    cases = [
        (good.astype(np.float64), "dtype float64, expected float32"),
        (good[:, :-1], f"expected [N, {arm.obs_dim}]"),
        (np.zeros((0, arm.obs_dim), np.float32), "expected between 1 and 64"),
        (np.full((1, arm.obs_dim), 2e6, np.float32), "validation.max_abs_observation"),
    ]
    for array, message in cases:
        with pytest.raises(RequestInvalid, match=message.replace("[", r"\[")):
            gate.check_rows(array, tensor, "x")
    nan = good.copy()
    nan[1, 5] = np.nan
    with pytest.raises(RequestInvalid, match=r"x\[1, 5\] is nan"):
        gate.check_rows(nan, tensor, "x")
