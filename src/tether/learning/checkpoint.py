"""Learner checkpoints: everything the algorithm needs to resume, as safetensors + JSON
(no pickle).

A checkpoint directory holds ``state.safetensors`` (the algorithm's networks -- SAC: actor,
every critic-ensemble member and its target; PPO: actor and value network --, its extra
state -- SAC: log alpha; PPO: rollouts done --, the Adam moments of its optimizers, and
the deployed actor the learner publishes from) and ``progress.json`` (update count,
version counter, counters, and what the networks' shape was). Replay and rollout data
are not checkpointed: a restarted PPO learner collects a fresh rollout of the deployed
version. It is
written to a temporary sibling and renamed over the previous one, so a learner killed
mid-write leaves the last complete checkpoint in place.

Invariant: ``restore_checkpoint(save_checkpoint(algorithm))`` continues training with
bit-identical parameters and optimizer moments; learning rates come from the config,
never from the file.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tether.learning.algorithm import Algorithm
from tether.learning.errors import CheckpointError

STATE_FILE = "state.safetensors"
PROGRESS_FILE = "progress.json"
_FORMAT = "tether.learner-checkpoint/2"  # /2: critics stored as an ensemble


@dataclass(frozen=True)
class LearnerProgress:
    """The learner's bookkeeping that survives a restart."""

    updates: int
    next_version: int  # id the next publication gets
    deployed_version: int  # id of the weights the learner last published (or started from)
    transitions_ingested: int
    publications: int


def _collect(algorithm: Algorithm, deployed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for prefix, module in algorithm.modules().items():
        tensors.update({f"{prefix}.{k}": v.detach() for k, v in module.state_dict().items()})
    tensors.update(algorithm.extra_tensors())
    tensors.update({"deployed." + k: v.detach() for k, v in deployed.items()})
    for name, opt in algorithm.optimizers().items():
        for index, slots in opt.state_dict()["state"].items():
            for key, value in slots.items():
                tensors[f"optim.{name}.{index}.{key}"] = torch.as_tensor(value).reshape(-1)
    return {k: v.contiguous().clone() for k, v in tensors.items()}


def save_checkpoint(
    directory: str | os.PathLike[str],
    algorithm: Algorithm,
    *,
    deployed: dict[str, torch.Tensor],
    progress: LearnerProgress,
) -> Path:
    """Atomically replace the checkpoint in ``directory``; returns its path."""
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    old = target.with_name(target.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    save_file(_collect(algorithm, deployed), str(tmp / STATE_FILE))
    meta = {
        "format": _FORMAT,
        "progress": asdict(progress),
        "arch": asdict(algorithm.arch),
        "critics": algorithm.checkpoint_shape(),
    }
    (tmp / PROGRESS_FILE).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def find_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The complete checkpoint at ``directory``, or the previous one a crash left aside."""
    target = Path(directory)
    for candidate in (target, target.with_name(target.name + ".old")):
        if (candidate / PROGRESS_FILE).is_file() and (candidate / STATE_FILE).is_file():
            return candidate
    return None


def restore_checkpoint(
    directory: str | os.PathLike[str], algorithm: Algorithm
) -> tuple[LearnerProgress, dict[str, torch.Tensor]]:
    """Load a checkpoint into ``algorithm``; returns the progress and the deployed actor state."""
    found = find_checkpoint(directory)
    if found is None:
        raise CheckpointError(
            f"{directory}: no learner checkpoint ({STATE_FILE} + {PROGRESS_FILE}); start the "
            "learner without resume, or point it at the directory it checkpointed to"
        )
    meta = json.loads((found / PROGRESS_FILE).read_text())
    if meta.get("format") != _FORMAT:
        raise CheckpointError(
            f"{found}/{PROGRESS_FILE}: format {meta.get('format')!r}, expected {_FORMAT!r}"
        )
    # Compared as JSON documents: that is how the checkpoint stored it (tuples became
    # lists, at any depth: a goal shift's fields too).
    arch = json.loads(json.dumps(asdict(algorithm.arch)))
    stored_arch = meta["arch"]
    if stored_arch != arch:
        raise CheckpointError(
            f"{found}: checkpoint of architecture {stored_arch}, but the learner was built "
            f"for {arch}; resume with the bundle the checkpoint was trained from"
        )
    networks = algorithm.checkpoint_shape()
    if meta.get("critics") != networks:
        raise CheckpointError(
            f"{found}: checkpoint of networks {meta.get('critics')}, but the learner was "
            f"configured for {networks} (LearnerConfig.algorithm; for SAC "
            "SACConfig.critic_ensemble_size, critic_layer_norm); resume with the configuration "
            "the checkpoint was written with"
        )
    tensors = load_file(str(found / STATE_FILE))

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

    for prefix, module in algorithm.modules().items():
        module.load_state_dict(part(prefix + "."))
    algorithm.load_extra_tensors(tensors)
    for name, opt in algorithm.optimizers().items():
        # Moments have their parameter's shape; ``step`` is a scalar.
        params = [p for group in opt.param_groups for p in group["params"]]
        slots: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in part(f"optim.{name}.").items():
            index, field = key.split(".", 1)
            shape = () if field == "step" else params[int(index)].shape
            slots.setdefault(int(index), {})[field] = value.reshape(shape)
        current = opt.state_dict()
        current["state"] = slots
        opt.load_state_dict(current)
    progress = LearnerProgress(**meta["progress"])
    algorithm.updates = progress.updates
    return progress, part("deployed.")
