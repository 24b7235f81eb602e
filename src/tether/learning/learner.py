"""The learner's loop: drain transitions, update the algorithm, publish candidates, checkpoint.

One :class:`Learner` runs inside the learner process (see :mod:`tether.learning.process`);
it is an ordinary object so tests and benchmarks can also drive it in-process.

Each :meth:`Learner.step` drains the transition channel into the learner core
(:class:`tether.learning.core.LearnerCore`: normalization, then SAC's replay and prior
data or PPO's rollouts of the deployed version), runs the updates the core has
(SAC: as many as the update-to-data ratio allows, the first as soon as the buffer holds
one mini-batch; PPO: a full rollout's epochs, a bounded number per step), and -- at most once per
publication interval -- proposes a candidate: a Polyak step from the live actor toward
the learner's, held inside the trust region, with a new version id whose parent is the
live version. The candidate goes through the learner-side gate stages (offline,
simulation); its verdicts are written to the verdict directory, and only a candidate
that passed is published. It obeys the serving side's degradation level, read from the
shared-weights header: RESTRICTED trains but publishes nothing, PAUSED and TAKEOVER
only keep draining (so the transition ring never overflows and no data is lost).

One candidate at a time: after a publication the learner publishes nothing until the
server has resolved that version (``SharedWeights.resolved_version``); then its anchor
(``deployed``) becomes the weights of whatever version is live
(``SharedWeights.live_version``) -- the candidate after a promotion, the previous live
weights after a rejection or a rollback -- and the core follows it (PPO's behaviour
version: only its transitions are on-policy data).

Invariant: observations are normalized with the bundle's own normalizer, by the same
function the engine uses, so the learner trains on exactly what the policy sees.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from threading import Event
from typing import NamedTuple, Protocol

import numpy as np
import torch

from tether.data.channel import TransitionChannel
from tether.data.columns import TransitionArrays
from tether.data.replay.buffer import ReplayBuffer
from tether.learning.candidates import CandidateJudge, KnownWeights
from tether.learning.checkpoint import (
    LearnerProgress,
    find_checkpoint,
    restore_checkpoint,
    save_checkpoint,
)
from tether.learning.core import LearnerCore
from tether.learning.learner_config import LearnerConfig
from tether.learning.publication import PublishOutcome, RecentStates, TrustRegion
from tether.learning.sac import SAC
from tether.policy.bundle import PolicyBundle
from tether.policy.shared_weights import SharedWeights
from tether.safety.levels import DegradationLevel
from tether.versions.records import GateRecord
from tether.versions.verdict_files import gate_record_versions

logger = logging.getLogger(__name__)


class LearnerCounters(NamedTuple):
    """Monotonic counters the learner process shares with its parent (int64 each)."""

    updates: int
    transitions: int
    publications: int
    accepted: int
    shrunk: int
    withheld: int  # by the trust region
    skipped_restricted: int  # publications not made because the level was RESTRICTED
    checkpoints: int
    resumed_from_updates: int  # update count of the checkpoint this run resumed from (0: fresh)
    degradation_level: int
    deployed_version: int  # the live version the next candidate is derived from
    gate_passed: int  # candidates the learner-side gate passed (then published)
    gate_rejected: int  # candidates it rejected (never published)
    pending_version: int  # published, not yet resolved by the server (-1: none)
    off_version_rows: int  # PPO: transitions dropped as produced by another version


N_COUNTERS = len(LearnerCounters._fields)


class _Stop(Protocol):
    def is_set(self) -> bool: ...


class Learner:
    """The configured algorithm fed from a transition channel, publishing into shared weights."""

    def __init__(
        self,
        bundle: PolicyBundle,
        config: LearnerConfig,
        *,
        channel: TransitionChannel,
        weights: SharedWeights,
        checkpoint_dir: Path | None = None,
        verdict_dir: Path | None = None,
        counters: np.ndarray | None = None,
        resume: bool = False,
    ) -> None:
        self.config = config
        self.bundle = bundle
        self.channel = channel
        self.weights = weights
        self.checkpoint_dir = checkpoint_dir
        if bundle.training is None and config.fine_tune:
            logger.warning(
                "bundle %s has no training section: fine-tuning starts from random critics",
                bundle.path,
            )
        self.core = LearnerCore(bundle, config)
        self.algorithm = self.core.algorithm
        self.normalize = self.core.normalize
        self.deployed: dict[str, torch.Tensor] = {
            k: v.detach().clone() for k, v in bundle.actor_state.items()
        }
        self.progress = LearnerProgress(
            updates=0,
            next_version=bundle.version.id + 1,
            deployed_version=bundle.version.id,
            transitions_ingested=0,
            publications=0,
        )
        self._counters = counters if counters is not None else np.zeros(N_COUNTERS, np.int64)
        if resume and checkpoint_dir is not None and find_checkpoint(checkpoint_dir) is not None:
            self.progress, self.deployed = restore_checkpoint(checkpoint_dir, self.algorithm)
            self._set("resumed_from_updates", self.progress.updates)
            logger.info(
                "learner resumed from %s at update %d", checkpoint_dir, self.progress.updates
            )
        self.known = KnownWeights(bundle)
        self.known.add(self.progress.deployed_version, self.deployed)
        self.core.know_versions(self.known.get)
        self.judge = CandidateJudge(bundle, config.gate, verdict_dir=verdict_dir)
        self._unknown_live: int | None = None
        self._resume_lineage(verdict_dir)
        self._set("updates", self.progress.updates)
        self._set("publications", self.progress.publications)
        self._set("pending_version", -1)
        self._follow_live()
        self._set("deployed_version", self.progress.deployed_version)
        self.core.follow(self.progress.deployed_version, self.deployed)

        arch = bundle.architecture
        self.recent = RecentStates(config.publication.recent_states, arch.obs_dim)
        # The gate's offline stage normalizes raw observations itself.
        self.recent_raw = RecentStates(config.publication.recent_states, arch.obs_dim)
        self.trust_region = TrustRegion(self.algorithm.actor, config.publication)
        self._min_interval_s = config.effective_min_interval_s()
        self._last_publish = time.monotonic()
        self._last_checkpoint = time.monotonic()

    def _resume_lineage(self, verdict_dir: Path | None) -> None:
        # Never reuse a version id: not one published after the last checkpoint (still in
        # shared memory), nor one the gate rejected (its verdict file is on disk).
        p = self.progress
        next_version = p.next_version
        snapshot = self.weights.read()
        if snapshot is not None:
            self.known.add(snapshot.version, {k: v.clone() for k, v in snapshot.state.items()})
            next_version = max(next_version, snapshot.version + 1)
        if verdict_dir is not None:
            judged = gate_record_versions(verdict_dir)
            if judged:
                next_version = max(next_version, judged[-1] + 1)
        self.progress = replace(p, next_version=next_version)

    def _follow_live(self) -> None:
        """Anchor on the live weights once the pending candidate (if any) is resolved."""
        pending = self.weights.pending_version()
        self._set("pending_version", -1 if pending is None else pending)
        live = self.weights.live_version()
        if pending is not None or live is None or live == self.progress.deployed_version:
            return
        state = self.known.get(live)
        if state is None:
            # Live weights the learner never held (an operator's bundle): keep the old
            # anchor rather than guess; the server's gate still judges every candidate.
            if self._unknown_live != live:
                self._unknown_live = live
                logger.warning(
                    "version %d is live but the learner does not hold its weights; candidates "
                    "stay derived from version %d",
                    live,
                    self.progress.deployed_version,
                )
            return
        self.deployed = state
        self.progress = replace(self.progress, deployed_version=live)
        self._set("deployed_version", live)
        self.core.follow(live, state)

    @property
    def sac(self) -> SAC:
        """The SAC algorithm, for SAC-specific callers (:attr:`LearnerCore.sac`)."""
        return self.core.sac

    @property
    def replay(self) -> ReplayBuffer:
        return self.core.replay

    # --- counters ---------------------------------------------------------------------

    def _set(self, field: str, value: int) -> None:
        self._counters[LearnerCounters._fields.index(field)] = value

    def _add(self, field: str, value: int = 1) -> None:
        self._counters[LearnerCounters._fields.index(field)] += value

    def counters(self) -> LearnerCounters:
        return LearnerCounters(*(int(v) for v in self._counters))

    # --- the loop ---------------------------------------------------------------------

    def ingest(self, rows: TransitionArrays) -> None:
        """Normalize and store transitions from the channel (:meth:`LearnerCore.ingest`)."""
        normalized = self.core.ingest(rows)
        self.recent.extend(normalized.observations)
        self.recent_raw.extend(rows.observations)
        self._add("transitions", len(rows))
        if self.core.rollouts is not None:
            self._set("off_version_rows", self.core.rollouts.dropped_other_version)

    def step(self) -> int:
        """Drain, update, maybe publish and checkpoint; returns the number of updates run."""
        level = DegradationLevel(self.weights.degradation_level())
        self._set("degradation_level", int(level))
        self._follow_live()
        unlimited = self.config.updates_per_transition is None
        can_update = level < DegradationLevel.PAUSED and self.core.has_work()
        wait = 0.0 if can_update else self.config.idle_poll_s
        rows = self.channel.get(self.config.drain_max_rows, timeout_s=wait)
        if len(rows):
            self.ingest(rows)
        if level >= DegradationLevel.PAUSED or not (self.core.ready() or self.core.may_publish()):
            self._maybe_checkpoint()
            return 0
        # Bounded per step so draining stays responsive at high update-to-data ratios.
        n = self.core.run_updates(8 if unlimited else 64)
        self._set("updates", self.algorithm.updates)
        self._maybe_publish(level)
        self._maybe_checkpoint()
        return n

    def _maybe_publish(self, level: DegradationLevel) -> None:
        if self.weights.pending_version() is not None:
            return  # one candidate at a time: wait for the server's verdict
        # The verdict may have come since this step began (the drain waits for rows):
        # anchor on what is live now, or the candidate is derived from the version before.
        self._follow_live()
        now = time.monotonic()
        if now - self._last_publish < self._min_interval_s:
            return
        self._last_publish = now
        if level >= DegradationLevel.RESTRICTED:
            self._add("skipped_restricted")
            return
        if len(self.recent) == 0:
            return
        decision, candidate = self.trust_region.step(
            self.deployed, self.algorithm.actor_state(), self.recent.states()
        )
        if decision.outcome is PublishOutcome.UNCHANGED:
            return  # nothing worth a trip through the gate yet
        if candidate is None:
            self._add("withheld")
            d = decision.distance
            logger.info(
                "publication withheld: action change %.4f, KL %.4f, goal shift change %.4f "
                "above the trust region",
                d.action_change_rms,
                d.kl,
                d.goal_shift_change,
            )
            return
        self._add("accepted" if decision.outcome is PublishOutcome.ACCEPTED else "shrunk")
        self.propose(candidate)

    def propose(self, candidate: dict[str, torch.Tensor]) -> GateRecord:
        """Judge ``candidate`` as the next version against the live weights; publish it if
        it passes. The version id is used either way (its verdict file names it)."""
        p = self.progress
        # Above the live id too: an operator's bundle may have taken ids the learner never saw.
        live = self.weights.live_version()
        version = max(p.next_version, -1 if live is None else live + 1)
        record = self.judge.judge(
            version,
            candidate,
            live_version=p.deployed_version,
            live=self.deployed,
            observations=self.recent_raw.states(),
            critic=self.algorithm.gate_critic(),
        )
        self.progress = replace(p, updates=self.algorithm.updates, next_version=version + 1)
        if not record.passed:
            self._add("gate_rejected")
            failed = record.verdicts[-1].describe() if record.verdicts else "no stage"
            logger.info("candidate %d rejected by the learner-side gate: %s", version, failed)
            return record
        self._add("gate_passed")
        self.known.add(version, candidate)
        self.weights.publish(
            version,
            candidate,
            parent=p.deployed_version,
            promote_directly=self.config.publication.promote_directly,
        )
        self.progress = replace(self.progress, publications=p.publications + 1)
        self._set("publications", self.progress.publications)
        self._set("pending_version", version)
        return record

    def _maybe_checkpoint(self, *, force: bool = False) -> None:
        if self.checkpoint_dir is None:
            return
        now = time.monotonic()
        if not force and now - self._last_checkpoint < self.config.checkpoint_interval_s:
            return
        self._last_checkpoint = now
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write a checkpoint now (no-op without a checkpoint directory)."""
        if self.checkpoint_dir is None:
            return
        self.progress = replace(
            self.progress,
            updates=self.algorithm.updates,
            transitions_ingested=self.counters().transitions,
        )
        save_checkpoint(
            self.checkpoint_dir, self.algorithm, deployed=self.deployed, progress=self.progress
        )
        self._add("checkpoints")

    def run(self, stop: _Stop | Event) -> None:
        """Step until ``stop`` is set, then write a final checkpoint."""
        while not stop.is_set():
            self.step()
        self.checkpoint()
