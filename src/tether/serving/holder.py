"""The live model holder: the one place that answers "which engine serves this request".

Serving reads the engine through :class:`LiveModel` once per batch, so a swap done
between batches (by the ``before_batch`` hook or an operator) is seen by the next batch
and never by half of one. The model registry (A/B splits, pinned versions) replaces
this object behind the same two calls, ``engine_for`` and ``live_version``.

Invariant: ``engine_for`` returns an engine whose version is the one the request may
be served by, or raises (``NoPolicyLoaded``, ``VersionUnavailable``); it never guesses.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from tether.safety.verdict import SafetyVerdict
from tether.serving.errors import NoPolicyLoaded, VersionUnavailable
from tether.serving.gate_records import EpisodeOutcome

if TYPE_CHECKING:  # rollout imports the registry, which imports this module
    from tether.serving.rollout import RouteDecision


class VersionLike(Protocol):
    """What serving reads of ``tether.policy.VersionInfo``."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def weights_sha256(self) -> str: ...


class EngineOutputLike(Protocol):
    """What serving reads of ``tether.policy.EngineOutput``."""

    @property
    def actions(self) -> np.ndarray: ...
    @property
    def log_probs(self) -> np.ndarray: ...
    @property
    def version(self) -> VersionLike: ...


class EngineLike(Protocol):
    """What serving needs of ``tether.policy.PolicyEngine``."""

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


class ModelSource(Protocol):
    """The routing interface the service uses; ``LiveModel`` and the registry provide it."""

    def engine_for(self, pinned_version: int | None) -> EngineLike: ...

    def live_engine(self) -> EngineLike | None: ...


class LiveModel:
    """Holds at most one engine, the live one; thread-safe replace/clear."""

    def __init__(self, engine: EngineLike | None = None) -> None:
        self._lock = threading.Lock()
        self._engine = engine

    def live_engine(self) -> EngineLike | None:
        with self._lock:
            return self._engine

    def replace(self, engine: EngineLike | None) -> None:
        """Serve ``engine`` from the next batch on (None: stop serving)."""
        with self._lock:
            self._engine = engine

    def engine_for(self, pinned_version: int | None) -> EngineLike:
        engine = self.live_engine()
        if engine is None:
            raise NoPolicyLoaded(
                "no verified policy is loaded on this server; retry once health reports "
                "SERVING, or start it with --bundle"
            )
        if pinned_version is not None and pinned_version != engine.version.id:
            raise VersionUnavailable(
                f"model_version is pinned to {pinned_version}, but the live version is "
                f"{engine.version.id} ({engine.version.name!r}); unpin, or pin the live version"
            )
        return engine


class VersionRouter(Protocol):
    """What a server with a version registry calls beyond ``ModelSource`` (optional).

    ``tether.serving.versions.PolicyVersions`` provides it: per-episode routing (operator
    A/B split, canary share), and the feedback the gate and the rollback monitor judge by.
    """

    def route(self, session_id: str, episode_id: str) -> RouteDecision: ...

    def engine_for_route(self, decision: RouteDecision) -> Any: ...

    def on_batch(
        self,
        version: int,
        observations: np.ndarray,
        proposed_actions: np.ndarray,
        previous_actions: np.ndarray | None,
    ) -> None: ...

    def on_step(self, version: int, verdict: SafetyVerdict) -> None: ...

    def on_episode(self, outcome: EpisodeOutcome) -> None: ...

    def end_session(self, session_id: str) -> None: ...
