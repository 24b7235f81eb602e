"""The learner side of the promotion gate: the offline and the simulation stages, in order.

Both run in the learner process (or a worker), never on the serving path, before a
candidate is handed to the server (whose shadow and canary stages follow, see
``tether.versions.server_gate``). Each stage returns a ``StageVerdict`` naming every
number and the threshold it was held to:

1. **offline** (``tether.versions.stages.offline``), on recent real observations;
2. **simulation** (``tether.versions.stages.simulation``), paired episodes on the
   built-in arm under the current domain randomization.

Invariant: :meth:`LearnerGate.evaluate` stops at the first failing stage, so a
candidate that fails offline is never even simulated, and never reaches the server.
The offline stage reads the weights of ``engine.bundle``; :meth:`LearnerGate.evaluate`
refuses an engine that serves other weights (one changed by ``swap_weights``), so the
numbers are always those of the policy that would act.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.policy.engine import PolicyEngine
from tether.policy.networks import TwinCritic
from tether.policy.tensors import state_sha256
from tether.sim.config import ArmEnvConfig
from tether.sim.randomization import DomainRandomization
from tether.versions.errors import GateInputError
from tether.versions.protocols import Supervises
from tether.versions.records import StageVerdict
from tether.versions.stages.offline import OfflineStageConfig, offline_stage
from tether.versions.stages.simulation import SimulationStageConfig, simulation_stage


class LearnerGateConfig(BaseModel):
    """The learner-side stages of the promotion gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    offline: OfflineStageConfig = Field(default_factory=OfflineStageConfig, description="Offline")
    simulation: SimulationStageConfig = Field(
        default_factory=SimulationStageConfig,
        description="Simulation",
    )


def _check_serves_bundle(role: str, engine: PolicyEngine) -> None:
    served = engine.version.weights_sha256
    if served != state_sha256(engine.bundle.actor_state):
        raise GateInputError(
            f"the {role} engine serves version {engine.version.id} (weights {served[:12]}) "
            f"but its bundle holds other weights; the offline stage judges engine.bundle, so "
            "build the engine from a bundle holding the served weights"
        )


class LearnerGate:
    """Runs the enabled learner-side stages in order and stops at the first failure."""

    def __init__(
        self,
        config: LearnerGateConfig,
        *,
        randomization: DomainRandomization | None = None,
        supervisor: Supervises | None = None,
        env_config: ArmEnvConfig | None = None,
    ) -> None:
        self.config = config
        self._randomization = randomization
        self._supervisor = supervisor
        self._env_config = env_config

    def evaluate(
        self,
        candidate: PolicyEngine,
        live: PolicyEngine,
        recent_observations: np.ndarray,
        *,
        critic: TwinCritic | None = None,
    ) -> tuple[StageVerdict, ...]:
        """Every stage's verdict up to and including the first failing one."""
        verdicts: list[StageVerdict] = []
        if self.config.offline.enabled:
            for role, engine in (("candidate", candidate), ("live", live)):
                _check_serves_bundle(role, engine)
            verdict = offline_stage(
                candidate.bundle,
                live.bundle,
                recent_observations,
                self.config.offline,
                critic=critic,
            )
            verdicts.append(verdict)
            if not verdict.passed:
                return tuple(verdicts)
        if self.config.simulation.enabled:
            verdicts.append(
                simulation_stage(
                    candidate,
                    live,
                    self.config.simulation,
                    randomization=self._randomization,
                    supervisor=self._supervisor,
                    env_config=self._env_config,
                )
            )
        return tuple(verdicts)
