"""A valid bundle from nothing but a RobotSpec: random actor weights, spec-derived statistics.

Used to start learning from scratch and by every layer's tests. The normalizer comes from
the spec's declared ranges, so a fresh policy already sees observations of order one:
joint positions centred on their range, velocities scaled by their limits, Cartesian
entries centred on the workspace. Invariant: the same spec and seed give the same weights
(and therefore the same weights sha256).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from tether.policy.bundle import PolicyBundle, TrainingState, save_bundle
from tether.policy.manifest import (
    DEFAULT_INPUT,
    ActionSpec,
    InputSpec,
    Normalizer,
    ObservationSpec,
    TrainingMetadata,
)
from tether.policy.networks import Activation, Actor, ActorArchitecture, ChunkActor, TwinCritic
from tether.spec import RobotSpec


def normalizer_from_spec(spec: RobotSpec, *, clip: float = 10.0) -> Normalizer:
    """Mean and variance that map each declared range of ``spec`` to about [-1, 1]."""
    mean = np.zeros(spec.obs_dim)
    std = np.ones(spec.obs_dim)
    lay = spec.layout
    lo = np.asarray(spec.joint_position_low_rad)
    hi = np.asarray(spec.joint_position_high_rad)
    mean[slice(*lay.joint_position)] = (lo + hi) / 2
    std[slice(*lay.joint_position)] = (hi - lo) / 2
    std[slice(*lay.joint_velocity)] = np.asarray(spec.joint_velocity_limit_rad_s)
    if lay.command is not None:
        mean[slice(*lay.command)] = (lo + hi) / 2
        std[slice(*lay.command)] = (hi - lo) / 2
    if lay.command_change is not None:
        # A command moves by at most velocity limit × period per step.
        std[slice(*lay.command_change)] = (
            np.asarray(spec.joint_velocity_limit_rad_s) * spec.control_period_s
        )
    ws_lo = np.asarray(spec.workspace.low)
    ws_hi = np.asarray(spec.workspace.high)
    for span in (lay.end_effector, lay.target):
        mean[slice(*span)] = (ws_lo + ws_hi) / 2
        std[slice(*span)] = (ws_hi - ws_lo) / 2
    return Normalizer(
        mean=tuple(float(v) for v in mean),
        var=tuple(float(v) for v in std**2),
        clip=clip,
    )


def init_bundle(
    path: str | os.PathLike[str],
    spec: RobotSpec,
    *,
    hidden_sizes: tuple[int, ...] = (256, 256),
    activation: Activation = "relu",
    seed: int = 0,
    version_id: int = 1,
    version_name: str | None = None,
    with_training: bool = False,
    obs_clip: float = 10.0,
    images: Sequence[tuple[str, tuple[int, int, int]]] = (),
    horizon: int = 1,
    conv_channels: tuple[int, ...] = (8, 16),
    state_input: str = DEFAULT_INPUT,
    overwrite: bool = False,
) -> PolicyBundle:
    """Write a randomly initialized, fully valid bundle for ``spec`` and return it.

    Actions are the spec's normalized torques, bounds [-1, 1]. ``with_training`` also
    writes freshly initialized twin critics (targets equal to critics) and
    ``log_alpha = 0``.

    With ``images`` (``(name, (H, W, C))`` each, uint8) the bundle declares named inputs
    (the state vector as ``state_input``, then the images) and its actor is a
    ``cnn_chunk_gaussian`` :class:`ChunkActor` with ``conv_channels`` per image encoder,
    outputting ``horizon`` actions per call. Without, it is the vector MLP actor.
    """
    if not images and horizon != 1:
        raise ValueError(
            f"horizon {horizon} needs the chunk actor, which takes at least one image input; "
            "pass images=[(name, (H, W, C))]"
        )
    if images and with_training:
        raise ValueError("a chunk bundle has no training section; pass with_training=False")
    chunked = bool(images)
    inputs: tuple[InputSpec, ...] = ()
    if chunked:
        inputs = (
            InputSpec(state_input, "float32", (spec.obs_dim,)),
            *tuple(InputSpec(name, "uint8", tuple(shape)) for name, shape in images),
        )
    arch = ActorArchitecture(
        obs_dim=spec.obs_dim,
        act_dim=spec.act_dim,
        hidden_sizes=tuple(hidden_sizes),
        activation=activation,
        kind="cnn_chunk_gaussian" if chunked else "mlp_gaussian",
        horizon=horizon,
        image_channels=tuple(shape[2] for _, shape in images),
        conv_channels=tuple(conv_channels) if chunked else (),
    )
    # fork_rng keeps the caller's global torch RNG untouched while we seed the init.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        actor_state = (ChunkActor(arch) if chunked else Actor(arch)).state_dict()
        training = None
        if with_training:
            critic = TwinCritic(arch).state_dict()
            training = TrainingState(
                critic=critic,
                critic_target={k: v.clone() for k, v in critic.items()},
                log_alpha=0.0,
            )
    return save_bundle(
        path,
        actor_state=actor_state,
        architecture=arch,
        observation=ObservationSpec(spec.observation_names),
        action=ActionSpec(spec.action_names, (-1.0,) * spec.act_dim, (1.0,) * spec.act_dim),
        normalizer=normalizer_from_spec(spec, clip=obs_clip),
        version_id=version_id,
        version_name=version_name if version_name is not None else f"init-seed{seed}",
        robot_spec=spec,
        training=training,
        metadata=TrainingMetadata(algorithm="none", source="init_bundle", seed=seed),
        inputs=inputs,
        overwrite=overwrite,
    )
