"""A policy version as it travels through Ray's object store: safetensors bytes.

The learner puts each version's actor weights once (``ray.put``) and the version
service hands the same reference to every edge. The payload is the safetensors
encoding of the state dict, so what an edge decodes is numbers with names and shapes,
never code; the edge then checks them against the version's hash before serving them
(``PolicyEngine.swap_weights``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load as load_safetensors, save as save_safetensors

from tether.policy.manifest import VersionInfo
from tether.policy.tensors import StateDict
from tether.versions.records import StageVerdict


def encode_weights(state: StateDict) -> bytes:
    """``state`` as safetensors bytes (contiguous CPU tensors)."""
    return save_safetensors({k: v.detach().to("cpu").contiguous() for k, v in state.items()})


def decode_weights(payload: bytes) -> dict[str, torch.Tensor]:
    """The state dict ``encode_weights`` encoded."""
    return load_safetensors(payload)


@dataclass(frozen=True)
class PublishedWeights:
    """One version in the fleet: its identity and the object-store reference to its weights.

    The version service's registry holds these in place of engines (it needs
    ``.version`` only); an edge builds its engine from ``weights`` when it serves it.
    """

    version: VersionInfo
    weights: Any  # ray.ObjectRef[bytes]; Any so this module does not import Ray
    published_ns: int  # time.time_ns() when the learner published it (wall clock, fleet-wide)
    prior: tuple[StageVerdict, ...] = ()  # the learner-side gate stages it passed
    promote_directly: bool = False  # the learner's UNSAFE skip-the-gate option
