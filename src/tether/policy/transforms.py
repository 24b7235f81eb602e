"""The two affine maps around the network, shared by the engine and the exported module.

:class:`ObservationNormalizer` is the one recipe for the bundle's observation
normalization on numpy batches: the engine, the learner, the gate's offline stage and
evaluation all call it, so each sees exactly what the policy sees. The torch functions
are its TorchScript-compatible twins, so ``tether export`` embeds the same arithmetic
(the same float32 ``mean`` and ``inv_std``). Invariant: scaled actions never leave
``[low, high]``, even when rounding would push ``low + (a + 1) * half_range`` one ulp
past ``high``.
"""

from __future__ import annotations

import numpy as np
import torch

from tether.policy.manifest import ActionSpec, Normalizer


def normalizer_arrays(norm: Normalizer) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, 1 / sqrt(var + epsilon))`` as float32, computed in float64 first."""
    var = np.asarray(norm.var, dtype=np.float64)
    inv_std = 1.0 / np.sqrt(var + norm.epsilon)
    return np.asarray(norm.mean, dtype=np.float32), inv_std.astype(np.float32)


class ObservationNormalizer:
    """``clip((obs - mean) * inv_std, -clip, clip)`` on float32 numpy batches (row-independent)."""

    def __init__(self, normalizer: Normalizer) -> None:
        self.mean, self.inv_std = normalizer_arrays(normalizer)
        self.clip = np.float32(normalizer.clip)
        self._neg_clip = -self.clip

    def __call__(self, observations: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The normalized ``observations`` (float32), written into ``out`` when given.

        The same float32 operations as ``np.clip((obs - mean) * inv_std, -clip, clip)``,
        done in place by the ufuncs themselves: ``np.clip``'s Python wrapper and the two
        temporaries cost more than the arithmetic for one robot's row.
        """
        obs = np.asarray(observations, dtype=np.float32)
        if out is None:
            out = np.empty(np.broadcast_shapes(obs.shape, self.mean.shape), dtype=np.float32)
        np.subtract(obs, self.mean, out=out)
        np.multiply(out, self.inv_std, out=out)
        np.maximum(out, self._neg_clip, out=out)
        np.minimum(out, self.clip, out=out)
        return out


def action_arrays(action: ActionSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(low, half_range, high)`` as float32 for :func:`scale_action`."""
    low = np.asarray(action.low, dtype=np.float32)
    high = np.asarray(action.high, dtype=np.float32)
    return low, (high - low) / np.float32(2.0), high


def normalize_observation(
    obs: torch.Tensor, mean: torch.Tensor, inv_std: torch.Tensor, clip: float
) -> torch.Tensor:
    """``clip((obs - mean) * inv_std, -clip, clip)``, elementwise (batch-independent)."""
    return torch.clamp((obs - mean) * inv_std, -clip, clip)


def scale_action(
    squashed: torch.Tensor, low: torch.Tensor, half_range: torch.Tensor, high: torch.Tensor
) -> torch.Tensor:
    """Map tanh outputs in [-1, 1] onto [low, high]."""
    return torch.minimum(torch.maximum(low + (squashed + 1.0) * half_range, low), high)
