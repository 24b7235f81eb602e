"""The shipped torque-interface arm bundle: verified, small, with critics, and it reaches targets."""

from __future__ import annotations

from tether.assets import load_pretrained_bundle, pretrained_bundle_path
from tether.learning.evaluation import evaluate_actor
from tether.policy.transforms import ObservationNormalizer
from tether.sim import ArmEnv, ArmEnvConfig, arm_spec


def test_shipped_bundle_is_small_verified_and_carries_its_critics() -> None:
    root = pretrained_bundle_path(command_interface="torque")
    assert sum(f.stat().st_size for f in root.iterdir()) <= 2 * 1024 * 1024
    bundle = load_pretrained_bundle(command_interface="torque")
    assert bundle.robot_spec is not None
    assert bundle.robot_spec.fingerprint() == arm_spec("torque").fingerprint()
    assert bundle.training is not None
    assert bundle.manifest.metadata.algorithm == "sac"


def test_shipped_policy_reaches_targets_on_the_nominal_arm() -> None:
    bundle = load_pretrained_bundle(command_interface="torque")
    recorded = dict(bundle.manifest.metadata.metrics)["success_rate"]
    result = evaluate_actor(
        bundle.build_actor(),
        ObservationNormalizer(bundle.manifest.normalizer),
        ArmEnv(seed=3, config=ArmEnvConfig(command_interface="torque")),
        10,
        seed=30_000,
    )
    # Ten fresh episodes against the recorded 50: allow sampling slack (a missed target
    # can end far away), but a broken bundle (random weights end 0.5-0.8 m away and never
    # succeed) fails both checks.
    assert result.success_rate >= recorded - 0.35
    assert result.mean_final_distance_m < 0.3
