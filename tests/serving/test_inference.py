"""The batch function: every row gets its own engine output, then its own supervisor."""

from __future__ import annotations

import numpy as np

from tests.serving.serving_harness import relaxed_limits
from tether.data.clock import ingress_ns
from tether.policy.engine import PolicyEngine
from tether.serving.holder import LiveModel
from tether.serving.inference import ActionOutcome, ActionQuery, InferencePipeline
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec


def queries(spec: RobotSpec, flags: list[bool], seed: int) -> list[ActionQuery]:
    rng = np.random.default_rng(seed)
    factory = SupervisorFactory(spec, limits=relaxed_limits(spec))
    return [
        ActionQuery(
            rng.uniform(-0.3, 0.3, spec.obs_dim).astype(np.float32),
            flag,
            None,
            factory(),
            ingress_ns(),
        )
        for flag in flags
    ]


def test_rows_keep_their_own_deterministic_flag(engine: PolicyEngine, arm: RobotSpec) -> None:
    pipeline = InferencePipeline(LiveModel(engine))
    for flags in ([True], [False], [True, True, True], [False, False], [True, False, True]):
        batch = queries(arm, flags, seed=len(flags))
        results = pipeline.run(batch)
        assert len(results) == len(batch)
        for q, r in zip(batch, results, strict=True):
            assert isinstance(r, ActionOutcome)
            mean_action = engine.act(q.observation[None], True).actions[0]
            if q.deterministic:
                np.testing.assert_array_equal(r.proposed_action, mean_action)
            else:  # sampled: the policy's noise moved it off the mean
                assert not np.array_equal(r.proposed_action, mean_action)
            assert r.version.id == engine.version.id
            assert np.isfinite(r.action).all()
