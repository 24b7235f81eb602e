"""``tether export``: a bundle as one self-contained module that plain torch can load.

The exported module takes raw observations ``(B, obs_dim)`` float32 and returns
``(actions, log_probs)`` for the deterministic (mean) action, with the bundle's
normalization, goal shift, action scaling and action frame (the absolute command one
step from the observed previous command) inside, so nothing from tether is needed to
run it.
Two formats: ``torchscript`` (``torch.jit.load``) and ``pt2`` (``torch.export`` archive,
``torch.export.load(...).module()``); both carry ``manifest.json`` as an extra file.
Invariant: the export is checked against the engine's eager path on a probe batch
before it is written, and the largest action difference is reported.

Exported modules use one GEMM per batch (plain ``nn.Linear``), so they do not promise
the engine's bit-identical-across-batch-sizes property; sampling stays in the engine.
"""

# No `from __future__ import annotations` here: TorchScript must resolve the buffer
# annotations of ExportedPolicy as real types, not strings.
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from tether.policy.bundle import PolicyBundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.policy.errors import ExportError
from tether.policy.manifest import MANIFEST_FILE
from tether.policy.networks import Actor, log_prob_terms, ordered_row_sum
from tether.policy.selection import probe_observations
from tether.policy.transforms import (
    action_arrays,
    normalize_observation,
    normalizer_arrays,
    scale_action,
)

ExportFormat = Literal["torchscript", "pt2"]
MAX_EXPORT_BATCH = 65536


@dataclass(frozen=True)
class ExportResult:
    """Where the export went and how closely it reproduces the engine."""

    path: Path
    format: ExportFormat
    max_action_diff_from_engine: float  # action units, on the probe batch
    probe_rows: int


class ExportedPolicy(nn.Module):
    """Raw observations in, bounded deterministic actions and their log-probs out."""

    mean: torch.Tensor
    inv_std: torch.Tensor
    low: torch.Tensor
    half_range: torch.Tensor
    high: torch.Tensor
    velocity_step: torch.Tensor
    acceleration_step: torch.Tensor
    center: torch.Tensor
    command_half_range: torch.Tensor

    def __init__(self, bundle: PolicyBundle) -> None:
        super().__init__()
        m = bundle.manifest
        mean, inv_std = normalizer_arrays(m.normalizer)
        low, half_range, high = action_arrays(m.action)
        self.actor: Actor = bundle.build_actor().requires_grad_(False)
        self.register_buffer("mean", torch.from_numpy(mean))
        self.register_buffer("inv_std", torch.from_numpy(inv_std))
        self.register_buffer("low", torch.from_numpy(low))
        self.register_buffer("half_range", torch.from_numpy(half_range))
        self.register_buffer("high", torch.from_numpy(high))
        self.clip = float(m.normalizer.clip)
        self.obs_dim = m.architecture.obs_dim
        # The action frame (tether.policy.action_frame.CommandStepFrame.actions), in
        # float64 as the engine computes it; empty and unused without one.
        frame = m.action.frame
        self.framed = frame is not None
        self.command_start, self.command_stop = frame.command if frame else (0, 0)
        self.change_start, self.change_stop = frame.command_change if frame else (0, 0)
        for name, values in (
            ("velocity_step", frame.velocity_step_rad if frame else ()),
            ("acceleration_step", frame.acceleration_step_rad if frame else ()),
            ("center", frame.center_rad if frame else ()),
            ("command_half_range", frame.half_range_rad if frame else ()),
        ):
            self.register_buffer(name, torch.tensor(values, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = normalize_observation(obs, self.mean, self.inv_std, self.clip)
        mu, log_std = self.actor(x)
        log_prob = ordered_row_sum(log_prob_terms(mu, mu, log_std))
        actions = scale_action(torch.tanh(mu), self.low, self.half_range, self.high)
        if self.framed:
            actions = self._step_from_command(obs, actions)
        return actions, log_prob

    def _step_from_command(self, obs: torch.Tensor, outputs: torch.Tensor) -> torch.Tensor:
        o = obs.to(torch.float64)
        previous = o[:, self.command_start : self.command_stop]
        before = o[:, self.change_start : self.change_stop]
        change = before + self.acceleration_step * outputs.to(torch.float64)
        step = torch.minimum(torch.maximum(change, -self.velocity_step), self.velocity_step)
        action = (previous + step - self.center) / self.command_half_range
        return torch.clamp(action, -1.0, 1.0).to(torch.float32)


def export_policy(
    bundle: PolicyBundle,
    out: str | os.PathLike[str],
    *,
    format: ExportFormat = "torchscript",
    tolerance: float = 1e-5,
    overwrite: bool = False,
) -> ExportResult:
    """Write ``bundle`` as a standalone module to ``out`` after checking it against the engine."""
    target = Path(out)
    if target.exists() and not overwrite:
        raise ExportError(f"{target}: already exists; pass overwrite=True or choose another file")
    module = ExportedPolicy(bundle).eval()
    engine = PolicyEngine(bundle, EngineConfig(execution="eager"))
    probe = probe_observations(bundle.manifest.normalizer)
    expected = engine.act(probe, True).actions
    extra = {MANIFEST_FILE: bundle.manifest.to_json()}
    with torch.inference_mode(False), torch.no_grad():
        if format == "torchscript":
            # TorchScript is deprecated upstream but still what most C++/Python deployments
            # load; the notice is about the API's future, not about this file.
            with warnings.catch_warnings():
                warnings.filterwarnings(
                    "ignore", message=r"`torch\.jit\.", category=DeprecationWarning
                )
                scripted = torch.jit.script(module)
                got = scripted(torch.from_numpy(probe))[0].numpy()
                _check(target, got, expected, tolerance)
                target.parent.mkdir(parents=True, exist_ok=True)
                torch.jit.save(scripted, str(target), _extra_files=extra)
        elif format == "pt2":
            batch = torch.export.Dim("batch", min=1, max=MAX_EXPORT_BATCH)
            program = torch.export.export(
                module, (torch.from_numpy(probe),), dynamic_shapes={"obs": {0: batch}}
            )
            got = program.module()(torch.from_numpy(probe))[0].numpy()
            _check(target, got, expected, tolerance)
            target.parent.mkdir(parents=True, exist_ok=True)
            torch.export.save(program, str(target), extra_files=extra)
        else:
            raise ExportError(f"export format must be 'torchscript' or 'pt2', got {format!r}")
    diff = float(np.max(np.abs(got - expected)))
    return ExportResult(target, format, diff, probe.shape[0])


def _check(target: Path, got: np.ndarray, expected: np.ndarray, tolerance: float) -> None:
    diff = float(np.max(np.abs(got - expected)))
    if not diff <= tolerance:
        raise ExportError(
            f"{target}: the exported module's actions differ from the engine's by {diff:.3g} "
            f"(tolerance {tolerance:.3g}); nothing was written"
        )
