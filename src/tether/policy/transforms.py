"""The two affine maps around the network, shared by the engine and the exported module.

Written as TorchScript-compatible functions so ``tether export`` embeds exactly the
code the engine runs. Invariant: scaled actions never leave ``[low, high]``, even when
rounding would push ``low + (a + 1) * half_range`` one ulp past ``high``.
"""

from __future__ import annotations

import torch


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
