"""Learner checkpoints: everything SAC needs to resume, as safetensors + JSON (no pickle).

A checkpoint directory holds ``state.safetensors`` (actor, every critic-ensemble member
and its target, log alpha, the Adam moments of all three optimizers, and the deployed actor the learner
publishes from) and ``progress.json`` (update count, version counter, counters). It is
written to a temporary sibling and renamed over the previous one, so a learner killed
mid-write leaves the last complete checkpoint in place.

Invariant: ``restore_checkpoint(save_checkpoint(sac))`` continues training with
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

from tether.learning.errors import CheckpointError
from tether.learning.sac import SAC

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


def _optimizers(sac: SAC) -> dict[str, torch.optim.Optimizer]:
    return {
        "actor": sac.actor_optimizer,
        "critic": sac.critic_optimizer,
        "alpha": sac.alpha_optimizer,
    }


def _collect(sac: SAC, deployed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for prefix, module in (
        ("actor.", sac.actor),
        ("critic.", sac.critic),
        ("critic_target.", sac.critic_target),
    ):
        tensors.update({prefix + k: v.detach() for k, v in module.state_dict().items()})
    tensors["log_alpha"] = sac.log_alpha.detach().reshape(1)
    tensors.update({"deployed." + k: v.detach() for k, v in deployed.items()})
    for name, opt in _optimizers(sac).items():
        for index, slots in opt.state_dict()["state"].items():
            for key, value in slots.items():
                tensors[f"optim.{name}.{index}.{key}"] = torch.as_tensor(value).reshape(-1)
    return {k: v.contiguous().clone() for k, v in tensors.items()}


def save_checkpoint(
    directory: str | os.PathLike[str],
    sac: SAC,
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
    save_file(_collect(sac, deployed), str(tmp / STATE_FILE))
    meta = {
        "format": _FORMAT,
        "progress": asdict(progress),
        "arch": asdict(sac.arch),
        "critics": _critic_shape(sac),
    }
    (tmp / PROGRESS_FILE).write_text(json.dumps(meta, indent=2))
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def _critic_shape(sac: SAC) -> dict[str, int | bool]:
    return {"ensemble_size": sac.critic.size, "layer_norm": sac.critic.layer_norm}


def find_checkpoint(directory: str | os.PathLike[str]) -> Path | None:
    """The complete checkpoint at ``directory``, or the previous one a crash left aside."""
    target = Path(directory)
    for candidate in (target, target.with_name(target.name + ".old")):
        if (candidate / PROGRESS_FILE).is_file() and (candidate / STATE_FILE).is_file():
            return candidate
    return None


def restore_checkpoint(
    directory: str | os.PathLike[str], sac: SAC
) -> tuple[LearnerProgress, dict[str, torch.Tensor]]:
    """Load a checkpoint into ``sac``; returns the progress and the deployed actor state."""
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
    arch = json.loads(json.dumps(asdict(sac.arch)))
    stored_arch = meta["arch"]
    if stored_arch != arch:
        raise CheckpointError(
            f"{found}: checkpoint of architecture {stored_arch}, but the learner was built "
            f"for {arch}; resume with the bundle the checkpoint was trained from"
        )
    if meta.get("critics") != _critic_shape(sac):
        raise CheckpointError(
            f"{found}: checkpoint of critics {meta.get('critics')}, but the learner was "
            f"configured for {_critic_shape(sac)} (SACConfig.critic_ensemble_size, "
            "critic_layer_norm); resume with the configuration the checkpoint was written with"
        )
    tensors = load_file(str(found / STATE_FILE))

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}

    sac.actor.load_state_dict(part("actor."))
    sac.critic.load_state_dict(part("critic."))
    sac.critic_target.load_state_dict(part("critic_target."))
    with torch.no_grad():
        sac.log_alpha.copy_(tensors["log_alpha"][0])
    for name, opt in _optimizers(sac).items():
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
    sac.updates = progress.updates
    return progress, part("deployed.")
