"""The batch function: every row gets its own engine output, then its own supervisor."""

from __future__ import annotations

import numpy as np

from tests.serving.serving_harness import relaxed_limits
from tether.data.clock import ingress_ns
from tether.data.step import StepFacts
from tether.policy.engine import PolicyEngine
from tether.serving.errors import RequestInvalid
from tether.serving.inference import ActionOutcome, ActionQuery, InferencePipeline
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec
from tether.versions.holder import LiveModel


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


def step_facts(index: int, episode: str, **fields: object) -> StepFacts:
    """What a Control step of ``episode`` at ``index`` reports: a plain step unless
    ``fields`` say otherwise (a reward, flags, an executed action, a client stamp)."""
    facts = StepFacts(index, episode, "session", "robot", 0.0, False, False, None, 0)
    return facts._replace(**fields)


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


def test_batch_watchers_get_each_rows_previous_action(engine: PolicyEngine, arm: RobotSpec) -> None:
    """The shadow stage and the registry see (B, act_dim) previous actions in row order,
    for a lone robot (passed as a view) as for a batch, and None when one is unknown."""
    seen: list[np.ndarray | None] = []

    class Versions:  # what the pipeline calls of tether.versions.PolicyVersions
        def on_batch(
            self,
            _version: int,
            _obs: np.ndarray,
            _proposed: np.ndarray,
            previous: np.ndarray | None,
        ) -> None:
            seen.append(previous)

    pipeline = InferencePipeline(LiveModel(engine), versions=Versions())  # type: ignore[arg-type]
    rng = np.random.default_rng(3)
    for size in (1, 4):
        batch = [
            q._replace(previous_action=rng.uniform(-1, 1, arm.act_dim).astype(np.float32))
            for q in queries(arm, [True] * size, seed=size)
        ]
        pipeline.run(batch)
        got = seen.pop()
        assert got is not None
        assert got.shape == (size, arm.act_dim)
        np.testing.assert_array_equal(got, np.stack([q.previous_action for q in batch]))
    for flags in ([True], [True, True]):
        pipeline.run(queries(arm, flags, seed=9))  # no previous action: a new episode
        assert seen.pop() is None
    known, unknown = queries(arm, [True, True], seed=11)
    pipeline.run([known._replace(previous_action=np.zeros(arm.act_dim, np.float32)), unknown])
    assert seen.pop() is None


def test_an_observation_out_of_bounds_is_refused_alone(
    engine: PolicyEngine, arm: RobotSpec
) -> None:
    """The pipeline checks a whole group's observations in one pass; a row with NaN, Inf
    or a magnitude over the bound gets its own INVALID_ARGUMENT, the others their actions."""
    pipeline = InferencePipeline(LiveModel(engine), max_abs_observation=10.0)
    batch = queries(arm, [True] * 6, seed=5)
    bad = {1: np.nan, 3: np.inf, 4: 10.5}
    for k, value in bad.items():
        observation = batch[k].observation.copy()
        observation[2] = value
        batch[k] = batch[k]._replace(observation=observation)
    batch[4] = batch[4]._replace(step=step_facts(7, "e"))  # a Control step: its field's name
    results = pipeline.run(batch)
    for k, result in enumerate(results):
        if k in bad:
            assert isinstance(result, RequestInvalid)
        else:
            assert isinstance(result, ActionOutcome)
            assert np.isfinite(result.action).all()
    assert "observation[2] is nan, expected a finite number" in str(results[1])
    assert "observation[2] is inf" in str(results[3])
    assert "step.observation[2] is 10.5, expected a magnitude of at most 10" in str(results[4])
    # Without the bound the pipeline leaves the values to the engine, which refuses the
    # non-finite group as a whole: the check is what keeps one bad row from the others.
    unchecked = InferencePipeline(LiveModel(engine)).run(batch)
    assert all(isinstance(result, RequestInvalid) for result in unchecked)
