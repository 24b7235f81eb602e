"""Serving an actor with a goal shift, and giving a bundle one.

An ``mlp_gaussian`` actor may carry a :class:`~tether.policy.networks.GoalShift`: a small
ReLU network whose bounded output moves the goal slice of the normalized observation
before the actor reads it (``tether.policy.networks``). The engine computes that shift
here, on the host in numpy float32, on the normalized and padded block every execution
path receives; the path itself runs the plain actor (the architecture without the shift,
its ``trunk.*``/``head.*`` weights). :func:`with_goal_shift` makes the version of a bundle
that carries a fresh (zero) shift: it acts exactly as the bundle did, and a learner can
then move where it reaches (``tether.learning.hindsight``).

Invariant: a row's shifted goal is bit-identical whatever batch it arrives in: the
matmuls run on blocks of exactly ``row_block`` rows, as the numpy path's do
(:mod:`tether.policy.paths`), and the tanh runs on an array padded to a SIMD multiple
(:mod:`tether.policy.uniform`).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch

from tether.policy.bundle import PolicyBundle, save_bundle
from tether.policy.errors import BundleSpecError
from tether.policy.networks import GOAL_PREFIX, Actor, GoalShift
from tether.policy.paths import NUMPY_ACTIVATIONS
from tether.policy.tensors import StateDict
from tether.policy.transforms import ObservationNormalizer
from tether.policy.uniform import apply_uniform_np


def split_goal_state(state: StateDict) -> tuple[StateDict, StateDict]:
    """``(actor weights, goal-shift weights)`` of an actor state (``goal.*`` go second)."""
    base = {k: v for k, v in state.items() if not k.startswith(GOAL_PREFIX)}
    goal = {k: v for k, v in state.items() if k.startswith(GOAL_PREFIX)}
    return base, goal


class GoalShiftStage:
    """The goal shift of one version, in numpy: shifts a normalized padded block in place."""

    def __init__(self, shift: GoalShift, goal_state: StateDict, row_block: int) -> None:
        n_layers = len(shift.hidden_sizes) + 1
        self._layers = [
            (
                goal_state[f"{GOAL_PREFIX}net.{2 * i}.weight"].detach().cpu().numpy().T.copy(),
                goal_state[f"{GOAL_PREFIX}net.{2 * i}.bias"].detach().cpu().numpy().copy(),
            )
            for i in range(n_layers)
        ]
        self._scale = np.asarray(shift.scale, dtype=np.float32)
        self._start, self._stop = shift.goal
        self._row_block = row_block

    def shifts(self, x: np.ndarray) -> np.ndarray:
        """The goal's shift ``(rows, width)`` in normalized units for a padded block."""
        h = x.reshape(-1, self._row_block, x.shape[1])
        last = len(self._layers) - 1
        for i, (w_t, b) in enumerate(self._layers):
            h = h @ w_t
            h += b
            if i < last:
                NUMPY_ACTIVATIONS["relu"](h)
        out = apply_uniform_np(NUMPY_ACTIVATIONS["tanh"], h).reshape(-1, h.shape[-1])
        return np.asarray(out * self._scale, dtype=np.float32)

    def __call__(self, x: np.ndarray) -> None:
        """Shift the goal of every row of the padded block ``x`` (float32, C order)."""
        x[:, self._start : self._stop] += self.shifts(x)


def goal_shift_for(
    bundle: PolicyBundle, *, goal: str, bound: float, hidden_sizes: tuple[int, ...]
) -> GoalShift:
    """A :class:`GoalShift` of at most ``bound`` (the slice's unit) on the observation
    slice named ``goal`` of ``bundle``'s robot layout, in the bundle's normalization."""
    spec = bundle.robot_spec
    if spec is None or spec.layout is None:
        raise BundleSpecError(
            "a goal shift needs to know where the goal lies in the observation; this bundle "
            "has no robot spec with an observation layout"
        )
    slices = spec.layout.slices()
    if goal not in slices:
        raise BundleSpecError(
            f"the robot's observation layout has no {goal!r} slice (it has {sorted(slices)})"
        )
    where = slices[goal]
    inv_std = ObservationNormalizer(bundle.manifest.normalizer).inv_std[where]
    width = where.stop - where.start
    return GoalShift(
        goal=(where.start, where.stop),
        hidden_sizes=hidden_sizes,
        bound=(float(bound),) * width,
        scale=tuple(float(bound * s) for s in inv_std),
    )


def with_goal_shift(
    path: str | os.PathLike[str],
    bundle: PolicyBundle,
    shift: GoalShift,
    *,
    overwrite: bool = False,
) -> PolicyBundle:
    """Save ``bundle`` with a fresh ``shift`` in its actor: zero, so it acts exactly as
    ``bundle`` does, under the same version id, name and parent (the weights' hash says
    they differ). The critics and the training section are kept: they judge the same
    actions of the same observations."""
    arch = bundle.architecture
    if arch.kind != "mlp_gaussian":
        raise BundleSpecError(f"a goal shift is for 'mlp_gaussian' bundles, not {arch.kind!r}")
    if arch.goal_shift is not None:
        raise BundleSpecError(f"{bundle.path or 'this bundle'} already carries a goal shift")
    shifted = dataclasses.replace(arch, goal_shift=shift)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # the hidden layers' initialization is part of the version
        fresh = Actor(shifted)
    state = {k: v.detach().clone() for k, v in fresh.state_dict().items()}
    state.update({k: v.detach().clone() for k, v in bundle.actor_state.items()})
    m = bundle.manifest
    return save_bundle(
        path,
        actor_state=state,
        architecture=shifted,
        observation=m.observation,
        action=m.action,
        normalizer=m.normalizer,
        version_id=m.version.id,
        version_name=m.version.name,
        parent=m.version.parent,
        robot_spec=m.robot_spec,
        training=bundle.training,
        metadata=dataclasses.replace(
            m.metadata, source=f"{m.metadata.source} + zero goal shift".strip(" +")
        ),
        inputs=m.inputs,
        overwrite=overwrite,
    )
