"""The learner's side of candidate handling: judge before publishing, remember live weights.

:class:`CandidateJudge` runs the learner-side stages of the promotion gate (offline,
simulation; :class:`~tether.versions.learner_gate.LearnerGate`) on a candidate against the
weights live on the server, and writes the outcome to the verdict directory whether it
passed or not. Simulated episodes go through the same supervisor the robots have when
the bundle is the built-in arm.

:class:`KnownWeights` keeps the weights of the bundle and of the learner's recent
candidates (bounded), so when the server says which version is live the learner can
anchor its next candidate on exactly those weights.

Invariant: a candidate and the live policy are judged as engines built from bundles
that hold exactly their weights and version ids (eager execution, on the learner's
cores), so each verdict names the right versions and the right numbers.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from tether.policy.bundle import PolicyBundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.policy.manifest import VersionInfo, learner_version_name
from tether.policy.networks import TwinCritic
from tether.policy.tensors import state_sha256
from tether.safety.for_spec import is_builtin_arm, supervisor_for
from tether.versions.learner_gate import LearnerGate, LearnerGateConfig
from tether.versions.records import GateRecord
from tether.versions.verdict_files import write_gate_record

StateDict = dict[str, torch.Tensor]

# Recent candidates whose weights are kept besides the bundle's: the server resolves one
# candidate at a time, so live is almost always the newest or the one before it.
KEEP_CANDIDATES = 8


def bundle_with(
    bundle: PolicyBundle, version: int, parent: int | None, state: StateDict
) -> PolicyBundle:
    """``bundle`` holding ``state`` as version ``version`` (normalizer and specs unchanged).

    In memory only: the weights digest names the new tensors (same shapes, same size)."""
    digest = state_sha256(state)
    name = learner_version_name(version)
    info = VersionInfo(id=version, name=name, weights_sha256=digest, parent=parent)
    m = bundle.manifest
    manifest = replace(m, version=info, weights=replace(m.weights, sha256=digest))
    return replace(bundle, actor_state=state, manifest=manifest)


class KnownWeights:
    """Weights by version: the bundle's (always) and the last few candidates'."""

    def __init__(self, bundle: PolicyBundle, keep: int = KEEP_CANDIDATES) -> None:
        self._base = bundle.version.id
        self._keep = keep
        self._states: OrderedDict[int, StateDict] = OrderedDict(
            {self._base: {k: v.detach().clone() for k, v in bundle.actor_state.items()}}
        )

    def add(self, version: int, state: StateDict) -> None:
        self._states[version] = state
        self._states.move_to_end(version)
        candidates = [v for v in self._states if v != self._base]
        for old in candidates[: max(0, len(candidates) - self._keep)]:
            del self._states[old]

    def get(self, version: int) -> StateDict | None:
        return self._states.get(version)

    def __contains__(self, version: object) -> bool:
        return version in self._states


class CandidateJudge:
    """Runs the learner-side gate stages and records every verdict."""

    def __init__(
        self,
        bundle: PolicyBundle,
        config: LearnerGateConfig,
        *,
        verdict_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.bundle = bundle
        self.verdict_dir = None if verdict_dir is None else Path(verdict_dir)
        # The built-in arm's own supervisor, so simulated episodes are filtered as the
        # robots' steps are; other robots have no simulator-side kinematics here.
        spec = bundle.robot_spec
        supervisor = supervisor_for(spec) if spec is not None and is_builtin_arm(spec) else None
        self.gate = LearnerGate(
            config,
            randomization=config.simulation.randomization,
            supervisor=supervisor,
        )
        self._engine_config = EngineConfig(execution="eager")
        self._live: PolicyEngine | None = None

    def _live_engine(self, version: int, state: StateDict) -> PolicyEngine:
        # The live engine is reused across candidates until live changes.
        live = self._live
        if (
            live is None
            or live.version.id != version
            or live.version.weights_sha256 != state_sha256(state)
        ):
            live = PolicyEngine(bundle_with(self.bundle, version, None, state), self._engine_config)
            self._live = live
        return live

    def judge(
        self,
        version: int,
        candidate: StateDict,
        *,
        live_version: int,
        live: StateDict,
        observations: np.ndarray,
        critic: TwinCritic | None,
    ) -> GateRecord:
        """Judge ``candidate`` (as ``version``) against the live weights; write the record."""
        engine = PolicyEngine(
            bundle_with(self.bundle, version, live_version, candidate), self._engine_config
        )
        verdicts = self.gate.evaluate(
            engine, self._live_engine(live_version, live), observations, critic=critic
        )
        record = GateRecord(
            version=version,
            parent=live_version,
            passed=all(v.passed for v in verdicts),
            verdicts=verdicts,
        )
        if self.verdict_dir is not None:
            write_gate_record(self.verdict_dir, record)
        return record
