"""Pretraining writes a loadable bundle with critics, through the library and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tether.cli.app import app
from tether.learning.config import SACConfig
from tether.learning.errors import LearningError
from tether.learning.pretrain import PretrainConfig, pretrain
from tether.policy import BundleExists, PolicyEngine, load_bundle
from tether.sim.spec import arm_spec

TINY = PretrainConfig(
    sac=SACConfig(hidden_sizes=(16, 16), batch_size=32),
    total_env_steps=400,
    learning_starts=200,
    n_envs=2,
    eval_interval_steps=200,
    eval_episodes=1,
    final_eval_episodes=1,
)


def test_pretrain_writes_a_servable_bundle_with_its_critics(tmp_path: Path) -> None:
    seen: list[int] = []
    result = pretrain(TINY, tmp_path / "b", on_progress=lambda steps, _: seen.append(steps))
    assert result.env_steps == 400
    assert result.updates == 100  # (400 - 200) steps x 0.5 updates per step
    assert len(result.history) == 2
    assert seen[-1] == 400
    bundle = load_bundle(tmp_path / "b")
    assert bundle.robot_spec is not None
    assert bundle.robot_spec.fingerprint() == arm_spec().fingerprint()
    assert bundle.training is not None
    metrics = dict(bundle.manifest.metadata.metrics)
    assert metrics["success_rate"] == result.final.success_rate
    assert bundle.manifest.metadata.gradient_updates == 100
    engine = PolicyEngine(bundle)
    out = engine.act(torch.zeros(3, bundle.architecture.obs_dim).numpy(), deterministic=True)
    assert out.actions.shape == (3, 4)


def test_supervised_pretraining_learns_what_the_policy_proposed(tmp_path: Path) -> None:
    """With the supervisor in the loop every executed action is a supervised one, and
    the replay keeps the proposal (the supervisor is part of the environment)."""
    config = TINY.model_copy(update={"supervised": True, "intervention_penalty": 0.5})
    result = pretrain(config, tmp_path / "s")
    assert result.env_steps == 400
    bundle = load_bundle(tmp_path / "s")
    assert bundle.training is not None
    assert dict(bundle.manifest.metadata.metrics)["success_rate"] == result.final.success_rate
    # The manifest says how the bundle was made, supervisor and anchor included.
    assert "supervised, intervention penalty 0.5" in bundle.manifest.metadata.source
    assert "bc_weight" not in bundle.manifest.metadata.source


def test_cli_pretrain_reports_the_final_success_rate(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "pretrain",
            str(tmp_path / "cli"),
            "--total-env-steps=200",
            "--learning-starts=100",
            "--n-envs=2",
            "--hidden=16,16",
            "--batch-size=32",
            "--eval-interval-steps=200",
            "--eval-episodes=1",
            "--final-eval-episodes=1",
            "--bc-weight=0.4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "final success rate" in result.output
    assert (tmp_path / "cli" / "training.safetensors").is_file()
    source = load_bundle(tmp_path / "cli").manifest.metadata.source
    assert "bc_weight 0.4" in source, source
    bad = CliRunner().invoke(app, ["pretrain", str(tmp_path / "x"), "--n-envs=0"])
    assert bad.exit_code == 2
    assert "n_envs" in bad.output


def test_pretraining_can_continue_from_a_bundle(tmp_path: Path) -> None:
    base = pretrain(TINY, tmp_path / "base").bundle
    # No update happens in the continuation (learning_starts beyond its steps), so the
    # written actor must be the base's, and the bookkeeping must add up.
    cont = TINY.model_copy(
        update={"init_from": tmp_path / "base", "total_env_steps": 200, "learning_starts": 1000}
    )
    result = pretrain(cont, tmp_path / "next")
    assert result.updates == 0
    for k, v in base.actor_state.items():
        assert torch.equal(result.bundle.actor_state[k], v)
    meta = result.bundle.manifest.metadata
    assert meta.env_steps == 400 + 200
    assert meta.gradient_updates == 100
    assert "continuing" in meta.source
    wider = TINY.model_copy(
        update={"init_from": tmp_path / "base", "sac": SACConfig(hidden_sizes=(32, 32))}
    )
    with pytest.raises(LearningError, match="architecture"):
        pretrain(wider, tmp_path / "bad")


def test_an_existing_output_is_refused_before_any_training(tmp_path: Path) -> None:
    # The bundle is written at the end; a refusal there would throw away the whole run.
    (tmp_path / "taken").mkdir()
    seen: list[int] = []
    with pytest.raises(BundleExists, match="already exists"):
        pretrain(TINY, tmp_path / "taken", on_progress=lambda steps, _: seen.append(steps))
    assert seen == []


@pytest.mark.parametrize("ranges", ["default", "rated"])
def test_pretraining_arms_draw_from_the_chosen_randomization(ranges: str) -> None:
    """``randomization: rated`` trains on every arm the built-in arm is rated to be; the
    default stays on the healthy arm's ranges (the demo drift's end lies outside them)."""
    from tether.learning.pretrain import PretrainSetup
    from tether.sim import ArmDynamics, DomainRandomization, DriftSchedule

    config = PretrainConfig.model_validate(
        {"command_interface": "position", "randomization": ranges, "n_envs": 2}
    )
    setup = PretrainSetup.build(config, None)
    chosen = getattr(DomainRandomization, ranges)()
    draws = []
    for env in setup.envs:
        for seed in range(20):
            env.reset(seed=seed)
            draws.append(env.dynamics)
    assert all(chosen.contains(d) for d in draws)
    worn = DriftSchedule.demo().dynamics_at(10**9, ArmDynamics.nominal())
    assert DomainRandomization.rated().contains(worn)
    assert DomainRandomization.default().contains(worn) is False
    # The rated arms reach outside the healthy ranges (a weaker actuator than 0.9).
    assert (min(d.actuator_gain for d in draws) < 0.9) is (ranges == "rated")
