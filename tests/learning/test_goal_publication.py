"""Publishing a goal-shift actor: the trust region and the offline stage bound how far
where it reaches moves (the goal's unit), not its narrow Gaussian's KL."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tether.learning.hindsight import HindsightConfig, bundle_for_learner
from tether.learning.learner_config import LearnerConfig
from tether.learning.publication import PublicationConfig, PublishOutcome, TrustRegion
from tether.policy import PolicyBundle, init_bundle, load_bundle, save_derived_bundle
from tether.policy.transforms import ObservationNormalizer
from tether.sim.spec import arm_spec
from tether.versions.stages.offline import OfflineStageConfig, offline_stage

SPEC = arm_spec("position")
GOAL = LearnerConfig(hindsight=HindsightConfig.goal_relabelling())
REACH = 0.05  # m: a trust region inside the goal shift's 0.1 m bound


@pytest.fixture
def shifted(tmp_path: Path) -> PolicyBundle:
    init_bundle(tmp_path / "plain", SPEC, hidden_sizes=(16, 16), with_training=True)
    return load_bundle(bundle_for_learner(tmp_path / "plain", GOAL, tmp_path))


def _reaching(bundle: PolicyBundle, z: float) -> dict[str, torch.Tensor]:
    """The bundle's actor state with a constant shift of about ``z`` (m) in the goal's z."""
    shift = bundle.architecture.goal_shift
    assert shift is not None
    state = {k: v.clone() for k, v in bundle.actor_state.items()}
    state["goal.net.4.bias"] = torch.tensor([0.0, 0.0, float(np.arctanh(z / shift.bound[2]))])
    return state


def _states(bundle: PolicyBundle, n: int = 64) -> np.ndarray:
    raw = np.random.default_rng(0).normal(0, 0.2, (n, SPEC.obs_dim)).astype(np.float32)
    return ObservationNormalizer(bundle.manifest.normalizer)(raw)


def test_the_trust_region_bounds_the_reach_and_skips_what_changes_nothing(
    shifted: PolicyBundle,
) -> None:
    region = TrustRegion(shifted.build_actor(), PublicationConfig(max_goal_shift_change=REACH))
    live, states = dict(shifted.actor_state), _states(shifted)
    decision, candidate = region.step(live, _reaching(shifted, 0.04), states)
    assert decision.outcome is PublishOutcome.ACCEPTED
    assert decision.alpha == 1.0
    assert candidate is not None
    assert decision.distance.goal_shift_change == pytest.approx(0.04, abs=1e-4)
    decision, _ = region.step(live, _reaching(shifted, 0.09), states)
    assert decision.outcome is PublishOutcome.SHRUNK
    assert decision.distance.goal_shift_change <= REACH
    decision, candidate = region.step(live, _reaching(shifted, 0.004), states)
    assert decision.outcome is PublishOutcome.UNCHANGED
    assert candidate is None


def test_the_offline_stage_holds_a_goal_shift_candidate_to_its_reach(
    shifted: PolicyBundle, tmp_path: Path
) -> None:
    raw = np.random.default_rng(1).normal(0, 0.2, (128, SPEC.obs_dim)).astype(np.float32)

    def candidate(z: float, name: str) -> PolicyBundle:
        return save_derived_bundle(
            tmp_path / name,
            shifted,
            actor_state=_reaching(shifted, z),
            version_id=shifted.version.id + 1,
            version_name=name,
        )

    config = OfflineStageConfig(max_goal_shift_change=REACH)
    near = offline_stage(candidate(0.03, "near"), shifted, raw, config)
    names = {m.name: m for m in near.measurements}
    assert near.passed
    assert "goal_shift_change" in names
    assert "action_kl" not in names
    far = offline_stage(candidate(0.08, "far"), shifted, raw, config)
    assert not far.passed
    failed = [m.name for m in far.measurements if not m.passed]
    assert failed == ["goal_shift_change"]
