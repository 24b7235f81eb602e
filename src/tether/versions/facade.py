"""Policy versions in one object: what the server calls to route, feed the gate and roll back.

``PolicyVersions`` assembles the registry, the router, the server-side gate and the
rollback monitor from one :class:`VersionsConfig`, and offers the server exactly the
calls it makes at each point of a control step:

- ``engine_for(pinned)`` / ``live_engine()`` — the ``ModelSource`` interface of
  ``tether.versions.holder`` (client pins may name live or retired versions only);
- ``route(session_id, episode_id, task_id)`` then ``engine_for_route(decision)`` — the operator's
  A/B split and the canary share (canary and control steps use tightened limits:
  ``decision.tightening``);
- ``on_batch`` after a live batch (feeds the shadow stage), ``on_step`` after the
  supervisor (per-version counts), ``on_episode`` at an episode's end (canary and
  rollback);
- ``submit_candidate`` when the learner publishes, ``load``/``reload`` for bundles.

Invariant: nothing here runs long on the caller's thread — shadow inference has its own
thread, bundle loading is for worker threads (the admin service and SIGHUP use them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.safety.degradation import DegradationMachine
from tether.safety.verdict import ActionSource, SafetyVerdict
from tether.versions.holder import LiveModel
from tether.versions.model_dir import EngineFactory, ReloadResult, load_into, reload_model_dir
from tether.versions.protocols import Supervises
from tether.versions.records import (
    EpisodeOutcome,
    LiveChange,
    StageVerdict,
    VersionRecord,
    VersionSource,
)
from tether.versions.registry import ModelRegistry
from tether.versions.rollback import RollbackConfig, RollbackMonitor
from tether.versions.routing import Role, RouteDecision, TrafficRouter
from tether.versions.server_gate import ServerGate, ServerGateConfig


class VersionsConfig(BaseModel):
    """Versions, gate and rollback of one server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: Path | None = Field(
        default=None, description="Directory of bundles that Reload and SIGHUP re-read (path)"
    )
    reload_makes_live: bool = Field(
        default=False,
        description="A reload promotes new bundles at once instead of registering them as "
        "candidates for the gate (flag)",
    )
    admin_tokens_file: Path | None = Field(
        default=None,
        description="Admin token file, one '<viewer|operator> <name> <token>' per line; "
        "None disables AdminService (path)",
    )
    admin_host: str = Field(default="127.0.0.1", description="Address AdminService binds (host)")
    admin_port: int = Field(
        default=50052,
        ge=0,
        le=65535,
        description="AdminService port, apart from robot traffic; 0 picks a free one (port)",
    )
    max_sticky_sessions: int = Field(
        default=65536, ge=1, description="Sessions whose A/B assignment is remembered (sessions)"
    )
    promotion: ServerGateConfig = Field(
        default_factory=ServerGateConfig,
        description="Shadow and canary stages",
    )
    rollback: RollbackConfig = Field(
        default_factory=RollbackConfig,
        description="Automatic rollback",
    )


class PolicyVersions:
    """See the module docstring.

    ``shadow_supervisor`` must be a Supervisor of its own (e.g. ``base.with_limits(
    base.limits)``): it runs on the shadow thread, and a Supervisor is not shared
    across threads.
    """

    def __init__(
        self,
        config: VersionsConfig,
        *,
        engine_factory: EngineFactory,
        shadow_supervisor: Supervises,
        degradation: DegradationMachine | None = None,
    ) -> None:
        self.config = config
        self.engine_factory = engine_factory
        self.degradation = degradation
        self.registry: ModelRegistry[Any] = ModelRegistry()
        self.router = TrafficRouter(self.registry, max_sessions=config.max_sticky_sessions)
        self.promotion = ServerGate(self.registry, self.router, shadow_supervisor, config.promotion)
        self.rollback = RollbackMonitor(self.registry, config.rollback, router=self.router)
        if degradation is not None:
            self.registry.add_listener(lambda c: degradation.set_policy_version(c.current.id))

    # ----------------------------------------------------------------- ModelSource

    def engine_for(self, pinned_version: int | None) -> Any:
        return self.registry.engine_for(pinned_version)

    def live_engine(self) -> Any:
        return self.registry.live_engine()

    # ----------------------------------------------------------------- routing

    def route(self, session_id: str, episode_id: str, task_id: str = "") -> RouteDecision:
        return self.router.route(session_id, episode_id, task_id)

    def engine_for_route(self, decision: RouteDecision) -> Any:
        """The engine a routed step runs on; the canary is reachable only this way."""
        if decision.role is Role.CANARY and decision.version is not None:
            return self.registry.engine(decision.version)
        return self.registry.engine_for(decision.version)

    def end_session(self, session_id: str) -> None:
        self.router.forget(session_id)

    # ----------------------------------------------------------------- observations

    def on_batch(
        self,
        version: int,
        observations: np.ndarray,
        proposed_actions: np.ndarray,
        previous_actions: np.ndarray | None = None,
    ) -> None:
        """A batch served by ``version``: live batches feed the shadow stage."""
        live = self.registry.live()
        if live is not None and live.id == version:
            self.promotion.on_batch(observations, proposed_actions, previous_actions)

    def on_step(self, version: int, verdict: SafetyVerdict) -> None:
        """One supervised step served by ``version`` (per-version intervention counts)."""
        self.registry.record_step(
            version,
            checks=verdict.checks,
            intervened=verdict.intervened,
            backup=verdict.source is ActionSource.BACKUP,
        )

    def on_episode(self, outcome: EpisodeOutcome) -> None:
        """A finished episode: per-version numbers, the canary stage, the rollback monitor."""
        self.registry.record_episode(
            outcome.version, episode_return=outcome.episode_return, success=outcome.success
        )
        self.promotion.on_episode(outcome)
        self.rollback.add(outcome)

    # ----------------------------------------------------------------- versions

    def submit_candidate(
        self,
        engine: Any,
        prior: Sequence[StageVerdict] = (),
        *,
        source: VersionSource = VersionSource.LEARNER,
        promote_directly: bool = False,
    ) -> VersionRecord:
        """A published version (with its offline/simulation verdicts) enters the gate.

        ``promote_directly`` (the learner's clearly unsafe option, for simulation only)
        makes it live at once, with the skipped gate written into its reason.
        """
        # A published version never goes live merely by being first: it waits for a live one.
        record = self.registry.register(engine, source=source, make_live_if_first=False)
        if self.registry.live() is None:
            return record
        if promote_directly:
            self.registry.promote(
                record.id, "promote_directly: went live WITHOUT the promotion gate (unsafe)"
            )
        else:
            self.promotion.submit(record.id, prior)
        return self.registry.get(record.id)

    def load(self, path: Path, *, make_live: bool = False) -> VersionRecord:
        """Verify and register a bundle (call from a worker thread: it builds an engine)."""
        return load_into(self.registry, path, self.engine_factory, make_live=make_live)

    def reload(self) -> ReloadResult:
        """Re-read the model directory (call from a worker thread; SIGHUP does)."""
        if self.config.model_dir is None:
            return ReloadResult((), (), ())
        return reload_model_dir(
            self.registry,
            self.config.model_dir,
            self.engine_factory,
            make_live=self.config.reload_makes_live,
        )

    def close(self) -> None:
        """Stop the gate's background work (the shadow evaluator's thread) at shutdown."""
        self.promotion.close()

    def drive(self, holder: LiveModel) -> None:
        """Make ``holder`` (a server's ``LiveModel``) serve the live version, now and after
        every promotion, rollback or reload; its batches pick each swap up at a boundary.

        The smallest wiring into a ``PolicyServer``: live swaps, AdminService and SIGHUP
        work through it; A/B splits, canary routing and version pins need the server to
        route through :meth:`route` / :meth:`engine_for_route` instead.
        """
        holder.replace(self.registry.live_engine())
        self.registry.add_listener(lambda change: holder.replace(self.registry.live_engine()))

    def add_live_listener(self, listener: Callable[[LiveChange], None]) -> None:
        """Called after every promotion or rollback: how the learner learns what is live."""
        self.registry.add_listener(listener)
