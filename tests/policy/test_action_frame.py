"""The command-step action frame: any output the actor can produce moves the command
within both rate limits; the inverse recovers the output; bundles keep the frame; the
engine applies it, row by row."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tether.policy import EngineConfig, PolicyEngine, init_bundle, load_bundle
from tether.policy.action_frame import CommandStepFrame, command_step_frame
from tether.policy.bundle import save_bundle
from tether.policy.errors import BundleSpecError
from tether.policy.manifest import ActionSpec, manifest_from_json
from tether.policy.selection import probe_observations
from tether.sim import arm_spec

SPEC = arm_spec("position")
FRAME = command_step_frame(SPEC, acceleration_fraction=0.85, velocity_fraction=0.6)
N = SPEC.n_joints
DT = SPEC.control_period_s
lay = SPEC.layout.slices()
LOW = np.array(SPEC.joint_position_low_rad)
HIGH = np.array(SPEC.joint_position_high_rad)
VEL = np.array(SPEC.joint_velocity_limit_rad_s) * DT
ACC = np.array(SPEC.joint_acceleration_limit_rad_s2) * DT * DT

unit = st.floats(-1.0, 1.0, allow_nan=False, width=32)


def _observation(command: np.ndarray, change: np.ndarray) -> np.ndarray:
    obs = np.zeros((1, SPEC.obs_dim), dtype=np.float32)
    obs[0, lay["command"]] = command
    obs[0, lay["command_change"]] = change
    return obs


@settings(max_examples=200, deadline=None)
@given(
    where=st.lists(st.floats(0.1, 0.9), min_size=N, max_size=N),
    moving=st.lists(st.floats(-1.0, 1.0), min_size=N, max_size=N),
    output=st.lists(unit, min_size=N, max_size=N),
)
def test_every_output_moves_the_command_within_both_rate_limits(
    where: list[float], moving: list[float], output: list[float]
) -> None:
    # A command inside the range, moving at most the frame's own top speed.
    command = LOW + np.array(where) * (HIGH - LOW)
    change = np.array(moving) * np.array(FRAME.velocity_step_rad)
    obs = _observation(command, change)
    action = FRAME.actions(obs, np.array([output], dtype=np.float32))
    target = SPEC.commanded_position(action[0])
    previous = obs[0, lay["command"]].astype(np.float64)
    step = target - previous
    before = obs[0, lay["command_change"]].astype(np.float64)
    assert (np.abs(step) <= VEL + 1e-6).all()
    assert (np.abs(step - before) <= ACC + 1e-6).all()


@settings(max_examples=200, deadline=None)
@given(
    where=st.lists(st.floats(0.2, 0.8), min_size=N, max_size=N),
    output=st.lists(st.floats(-1.0, 1.0), min_size=N, max_size=N),
)
def test_outputs_inverts_actions_where_the_velocity_clip_does_not_bind(
    where: list[float], output: list[float]
) -> None:
    u = np.array([output], dtype=np.float32)
    # From rest the change is at most the acceleration step, below the velocity step.
    obs = _observation(LOW + np.array(where) * (HIGH - LOW), np.zeros(N))
    back = FRAME.outputs(obs, FRAME.actions(obs, u))
    # float32 actions round the target by ~1e-7 rad, a few thousandths of an output unit.
    np.testing.assert_allclose(back, u, atol=2e-3)


def test_a_spec_without_command_slices_gets_no_frame() -> None:
    with pytest.raises(BundleSpecError, match="'command' and 'command_change'"):
        command_step_frame(arm_spec("torque"), acceleration_fraction=0.5, velocity_fraction=0.5)
    with pytest.raises(BundleSpecError, match="fractions must lie in"):
        command_step_frame(SPEC, acceleration_fraction=1.0, velocity_fraction=0.5)


def test_a_frame_survives_the_manifest_round_trip_and_a_bad_one_is_refused(
    tmp_path: Path,
) -> None:
    bundle = _framed_bundle(tmp_path)
    assert bundle.manifest.action.frame == FRAME
    text = bundle.manifest.to_json()
    assert manifest_from_json(text).action.frame == FRAME
    broken = text.replace('"kind": "command_step"', '"kind": "jump"')
    with pytest.raises(BundleSpecError, match="command_step"):
        manifest_from_json(broken)
    with pytest.raises(BundleSpecError, match="positive finite"):
        dataclasses.replace(FRAME, acceleration_step_rad=(0.0,) * N)


def test_a_bundle_without_a_frame_writes_no_frame_field(tmp_path: Path) -> None:
    plain = init_bundle(tmp_path / "plain", arm_spec("torque"), hidden_sizes=(8,))
    assert plain.manifest.action.frame is None
    assert '"frame"' not in plain.manifest.to_json()


def test_the_engine_applies_the_frame_row_by_row(tmp_path: Path) -> None:
    bundle = _framed_bundle(tmp_path)
    engine = PolicyEngine(bundle, EngineConfig(execution="numpy", seed=0))
    plain = PolicyEngine(_framed_bundle(tmp_path, frame=None), EngineConfig(execution="numpy"))
    obs = probe_observations(bundle.manifest.normalizer, 64, spread=1.0)
    # Commands inside the range and moving slowly, as the arm reports them.
    obs[:, lay["command"]] = np.clip(obs[:, lay["command"]], LOW + 0.2, HIGH - 0.2)
    obs[:, lay["command_change"]] = np.clip(obs[:, lay["command_change"]], -0.01, 0.01)
    framed = engine.act(obs, True).actions
    squashed = plain.act(obs, True).actions
    np.testing.assert_array_equal(framed, FRAME.actions(obs, squashed))
    singles = np.concatenate([engine.act(obs[i : i + 1], True).actions for i in range(64)])
    np.testing.assert_array_equal(framed, singles)


def _framed_bundle(tmp_path: Path, frame: CommandStepFrame | None = FRAME):  # type: ignore[no-untyped-def]
    name = "framed" if frame is not None else "plain"
    base = init_bundle(tmp_path / f"{name}-init", SPEC, hidden_sizes=(16, 16), seed=2)
    m = base.manifest
    save_bundle(
        tmp_path / name,
        actor_state=base.actor_state,
        architecture=m.architecture,
        observation=m.observation,
        action=ActionSpec(m.action.names, m.action.low, m.action.high, frame=frame),
        normalizer=m.normalizer,
        version_id=1,
        version_name=name,
        robot_spec=SPEC,
        overwrite=True,
    )
    return load_bundle(tmp_path / name)
