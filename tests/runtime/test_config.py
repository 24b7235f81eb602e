"""RunConfig: YAML round trip, CLI overrides, clear errors, and a reference that cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.runtime.config import RunConfig, config_reference

ROOT = Path(__file__).resolve().parents[2]


def test_yaml_round_trip_and_overrides_win(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(RunConfig.build({"fleet": {"robots": 3}}, duration_s=12).to_yaml())
    loaded = RunConfig.from_yaml(path, robots=4, fast=True)
    assert loaded.fleet.robots == 4
    assert loaded.duration_s == 12
    assert loaded.fast
    assert RunConfig.from_yaml(path) == RunConfig.build({"fleet": {"robots": 3}}, duration_s=12)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"duration_s": 0}, "duration_s"),
        ({"fleet": {"robots": 0}}, "robots"),
        ({"no_such_section": {}}, "no_such_section"),
        ({"drift": {"preset": "earthquake"}}, "preset"),
    ],
)
def test_bad_values_name_the_field(raw: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        RunConfig.build(raw)


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        RunConfig.from_yaml(path)


def test_drift_schedule_scales_with_the_run() -> None:
    schedule = RunConfig().drift.schedule(total_steps=1000)
    assert min(r.start_step for r in schedule.ramps) == 200
    assert schedule.last_step == 300
    assert RunConfig.build({"drift": {"preset": "none"}}).drift.schedule(1000).ramps == ()


def test_docs_configuration_is_the_generated_reference() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert doc == config_reference(), "regenerate: tether config --markdown > docs/configuration.md"


def test_a_mistyped_key_gets_did_you_mean_and_no_pydantic_url(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("fleet:\n  robts: 3\nlearnr: {}\nduration_s: -5\n")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_yaml(path)
    text = str(info.value)
    assert "fleet.robts: unknown key; did you mean 'robots'?" in text
    assert "learnr: unknown key; did you mean 'learner'?" in text
    assert "duration_s:" in text
    assert "(got -5)" in text
    assert "pydantic.dev" not in text
    assert "type=" not in text


def test_the_algorithm_option_sets_the_learners_algorithm_over_the_file() -> None:
    raw = {"learner": {"algorithm": "sac", "ppo": {"rollout_length": 512}}}
    cfg = RunConfig.build(raw, algorithm="ppo")
    assert cfg.learner.algorithm == "ppo"
    assert cfg.learner.ppo.rollout_length == 512  # the rest of the section is kept
    assert RunConfig.build().learner.algorithm == "hindsight"
    with pytest.raises(ConfigError, match="algorithm"):
        RunConfig.build(algorithm="dqn")


def test_a_run_serves_the_compiled_path_where_it_can_and_eager_where_not(
    tmp_path: Path,
) -> None:
    """The run's engines: the compiled row path for the shipped vector policy (numba is a
    dependency), eager for a chunk policy (which the compiled path does not serve); each
    config builds an engine."""
    from tether.assets import load_pretrained_bundle
    from tether.policy import PolicyEngine, kernel as policy_kernel
    from tether.policy.initialize import init_bundle
    from tether.sim import arm_spec

    config = RunConfig()
    shipped = load_pretrained_bundle()
    served = config.served_engine(shipped.architecture)
    assert policy_kernel.AVAILABLE
    assert served.execution == "compiled"
    assert PolicyEngine(shipped, served).execution == "compiled"
    chunk = init_bundle(
        tmp_path / "chunk",
        arm_spec("position"),
        hidden_sizes=(16,),
        seed=1,
        images=[("wrist", (8, 8, 3))],
        horizon=2,
        conv_channels=(2,),
        state_input="state",
    )
    served = config.served_engine(chunk.architecture)
    assert served.execution == "eager"
    assert PolicyEngine(chunk, served).execution == "eager"


def test_robots_sample_only_under_a_learner_that_explores() -> None:
    assert RunConfig().robots_deterministic()  # hindsight learns from the error at rest
    assert not RunConfig.build(algorithm="sac").robots_deterministic()
    assert not RunConfig.build(algorithm="ppo").robots_deterministic()
    explicit = RunConfig.build({"fleet": {"deterministic": False}})
    assert not explicit.robots_deterministic()
    assert RunConfig.build(
        {"fleet": {"deterministic": True}}, algorithm="sac"
    ).robots_deterministic()


def test_the_runs_canary_acts_at_the_live_limits() -> None:
    """With one learning robot every episode is in the experiment while a canary runs; at
    tightened limits it would be a restricted arm beside a baseline at full limits."""
    assert RunConfig().versions.promotion.canary.safety_tightening == 1.0
