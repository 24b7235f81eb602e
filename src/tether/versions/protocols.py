"""What the versions layer and the edge read of a policy version and of an engine.

``tether.policy.VersionInfo`` and ``tether.policy.PolicyEngine`` satisfy these; tests
pass lighter fakes; ``tether.safety.Supervisor`` satisfies :class:`Supervises`. One
definition each, so the registry, the router, the gate's stages and the server agree
on what an engine is.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from tether.safety.verdict import SafetyVerdict


class VersionLike(Protocol):
    """What is read of ``tether.policy.VersionInfo``: identity, weights and lineage."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def weights_sha256(self) -> str: ...
    @property
    def parent(self) -> int | None: ...


class EngineOutputLike(Protocol):
    """What is read of ``tether.policy.EngineOutput``."""

    @property
    def actions(self) -> np.ndarray: ...
    @property
    def log_probs(self) -> np.ndarray: ...
    @property
    def version(self) -> VersionLike: ...


class EngineLike(Protocol):
    """What is needed of ``tether.policy.PolicyEngine``."""

    @property
    def version(self) -> VersionLike: ...
    @property
    def obs_dim(self) -> int: ...
    @property
    def act_dim(self) -> int: ...
    @property
    def action_low(self) -> np.ndarray: ...
    @property
    def action_high(self) -> np.ndarray: ...

    def act(self, observations: np.ndarray, deterministic: Any) -> EngineOutputLike: ...


class Supervises(Protocol):
    """What the shadow and simulation stages need of ``tether.safety.Supervisor``."""

    def filter(
        self,
        observation: np.ndarray,
        proposed_action: np.ndarray,
        previous_action: np.ndarray | None,
    ) -> tuple[np.ndarray, SafetyVerdict]: ...
