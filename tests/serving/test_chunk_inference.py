"""The batch function on a chunk policy: every step of every chunk is supervised, in order.

A fake engine proposes a chunk whose later steps are unsafe (an impossible jump in the
middle, NaN at the end): if the pipeline checked only the first step, or checked the
steps independently of one another, these tests fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.serving.test_kserve import tight_limits
from tether.data.clock import ingress_ns
from tether.policy.manifest import VersionInfo
from tether.safety.chunk import supervise_chunk
from tether.safety.for_spec import supervisor_for
from tether.serving.errors import RequestInvalid
from tether.serving.inference import ActionOutcome, ActionQuery, InferencePipeline
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec
from tether.versions.holder import LiveModel

H = 5


@dataclass
class _Out:
    actions: np.ndarray
    log_probs: np.ndarray
    version: VersionInfo


class ChunkEngine:
    """Proposes the same hand-made chunk for every row."""

    def __init__(self, spec: RobotSpec, chunk: np.ndarray) -> None:
        self.version = VersionInfo(1, "fake-chunk", "0" * 64)
        self.obs_dim = spec.obs_dim
        self.act_dim = spec.act_dim
        self.action_low = -np.ones(spec.act_dim, np.float32)
        self.action_high = np.ones(spec.act_dim, np.float32)
        self.chunk = chunk
        self.seen: list[Any] = []

    def act(self, observations: Any, deterministic: Any) -> _Out:
        self.seen.append(observations)
        n = observations["state"].shape[0]
        return _Out(np.repeat(self.chunk[None], n, 0), np.zeros(n, np.float32), self.version)


def unsafe_chunk(spec: RobotSpec) -> np.ndarray:
    chunk = np.zeros((H, spec.act_dim), np.float32)
    chunk[2] = 1.0  # full torque on every joint, far beyond the tight limits
    chunk[3] = -1.0  # and the opposite, a step later
    chunk[4, 0] = np.nan
    return chunk


def test_every_step_of_a_chunk_passes_the_supervisor_in_order(arm: RobotSpec) -> None:
    proposed = unsafe_chunk(arm)
    engine = ChunkEngine(arm, proposed)
    pipeline = InferencePipeline(LiveModel(engine), step_period_s=arm.control_period_s)
    factory = SupervisorFactory(arm, limits=tight_limits(arm))
    rng = np.random.default_rng(0)
    states = rng.uniform(-0.2, 0.2, (3, arm.obs_dim)).astype(np.float32)
    image = np.zeros((4, 4, 3), np.uint8)
    queries = [
        ActionQuery(s, True, None, factory(), ingress_ns(), inputs={"state": s, "image": image})
        for s in states
    ]
    results = pipeline.run(queries)
    # The named inputs were batched by name, one row per query.
    assert engine.seen[0]["state"].shape == (3, arm.obs_dim)
    assert engine.seen[0]["image"].shape == (3, 4, 4, 3)
    limits = tight_limits(arm)
    for state, result in zip(states, results, strict=True):
        assert isinstance(result, ActionOutcome)
        assert result.chunk is not None
        assert result.chunk.horizon == H == len(result.verdicts)
        safe = result.actions
        assert np.isfinite(safe).all()
        # The unsafe steps were corrected, each with its own verdict ...
        for k in (2, 3, 4):
            assert result.verdicts[k].intervened, k
            assert not np.array_equal(safe[k], proposed[k])
        assert result.chunk.first_intervention is not None
        assert result.chunk.first_intervention <= 2
        # ... to what a fresh supervisor gives for the same chunk, step after step.
        reference = supervise_chunk(
            supervisor_for(arm, limits), state, proposed, None, step_period_s=arm.control_period_s
        )
        np.testing.assert_allclose(safe, reference.actions, atol=1e-6)
        # The reply's step 0 is the chunk's.
        np.testing.assert_array_equal(result.action, safe[0])
        np.testing.assert_array_equal(result.proposed_actions, proposed)
    # Without the supervisor the proposed chunk would have carried the unsafe steps.
    assert np.abs(proposed[2]).max() == 1.0
    assert not np.isfinite(proposed[4]).all()


def test_an_engine_of_another_signature_refuses_its_queries_alone(
    arm: RobotSpec, chunk_engine: Any
) -> None:
    """A query validated for a vector policy that reaches a chunk engine (a bundle of
    another signature loaded since the server started) gets its own RequestInvalid."""
    pipeline = InferencePipeline(LiveModel(chunk_engine))
    factory = SupervisorFactory(arm, limits=tight_limits(arm))
    state = np.zeros(arm.obs_dim, np.float32)
    results = pipeline.run([ActionQuery(state, True, None, factory(), ingress_ns())])
    assert isinstance(results[0], RequestInvalid)
    assert "takes other inputs" in str(results[0])
