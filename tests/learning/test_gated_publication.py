"""Candidates pass the learner-side gate before publication, one at a time, from live weights."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

from tether.data.channel import ChannelConfig, TransitionChannel
from tether.data.columns import TransitionArrays
from tether.learning.config import SACConfig
from tether.learning.learner import Learner
from tether.learning.learner_config import LearnerConfig
from tether.learning.publication import PublicationConfig
from tether.policy import PolicyBundle
from tether.policy.shared_weights import SharedWeights
from tether.versions.learner_gate import LearnerGateConfig
from tether.versions.records import GateStage
from tether.versions.stages.simulation import SimulationStageConfig
from tether.versions.verdict_files import (
    gate_record_versions,
    list_gate_records,
    read_gate_record,
    read_gate_verdicts,
)

from .conftest import resolve_pending

Traffic = Callable[..., TransitionArrays]
StateDict = dict[str, torch.Tensor]


def config() -> LearnerConfig:
    return LearnerConfig(
        algorithm="sac",
        sac=SACConfig(batch_size=32),
        # The trust region is wide here so the gate's own offline thresholds do the judging.
        publication=PublicationConfig(min_interval_s=0.0, max_action_change=10.0, max_kl=1e3),
        # Publication mechanics are tested, not the simulation stage's judgement: two
        # episodes with wide return and distance margins, so a small learner step on the
        # position arm is not refused on noise.
        gate=LearnerGateConfig(simulation=SimulationStageConfig(episodes=2, distance_margin_m=1.0)),
        fine_tune=False,
        updates_per_transition=1.0,
        idle_poll_s=0.001,
    )


class Rig:
    def __init__(self, bundle: PolicyBundle, tmp: Path, traffic: Traffic) -> None:
        arch = bundle.architecture
        self.bundle = bundle
        self.channel = TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=4096))
        self.weights = SharedWeights.create(arch)
        self.verdicts = tmp / "verdicts"
        self.checkpoints = tmp / "ckpt"
        self.traffic = traffic
        self.seed = 0
        self.weights.set_live_version(bundle.version.id)  # the server serves the bundle
        self.learner = self.start()

    def start(self, *, resume: bool = False) -> Learner:
        return Learner(
            self.bundle,
            config(),
            channel=self.channel,
            weights=self.weights,
            checkpoint_dir=self.checkpoints,
            verdict_dir=self.verdicts,
            resume=resume,
        )

    def feed_and_step(self, rows: int = 64) -> None:
        self.seed += 1
        self.channel.put_arrays(self.traffic(self.bundle, rows, seed=self.seed))
        while self.learner.step():
            pass

    def publish_one(self) -> int:
        """Train until a candidate is pending (it may already be); returns its version."""
        for _ in range(20):
            pending = self.weights.pending_version()
            if pending is not None:
                return pending
            self.feed_and_step()
        last = list_gate_records(self.verdicts)[-3:]
        raise AssertionError(
            "no candidate passed the gate in 20 rounds; last verdicts: "
            + " | ".join(v.describe() for r in last for v in r.verdicts)
        )

    def close(self) -> None:
        self.channel.close()
        self.weights.close()


def negated(state: StateDict) -> StateDict:
    """The mean head negated: every deterministic action points the other way."""
    return {k: -v if k.startswith("head.mu") else v.clone() for k, v in state.items()}


def same(a: StateDict, b: StateDict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_negated_candidate_fails_offline_is_never_published_and_says_why(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    rig = Rig(small_bundle, tmp_path, traffic)
    try:
        rig.learner.ingest(traffic(small_bundle, 256))
        version = small_bundle.version.id + 1
        record = rig.learner.propose(negated(small_bundle.actor_state))
        assert (record.version, record.parent, record.passed) == (version, 1, False)
        assert rig.weights.latest_version() is None  # nothing reached the server
        assert [v.stage for v in record.verdicts] == [GateStage.OFFLINE]  # never simulated
        c = rig.learner.counters()
        assert (c.gate_rejected, c.gate_passed, c.publications) == (1, 0, 0)

        on_disk = read_gate_record(rig.verdicts, version)
        assert on_disk == record
        raw = json.loads((rig.verdicts / f"{version}.json").read_text())
        assert raw["passed"] is False
        failed = [
            m["name"]
            for m in raw["verdicts"][0]["measurements"]
            if m["name"] in ("action_change_rms", "action_kl")
        ]
        assert failed == ["action_change_rms", "action_kl"]
        offline = raw["verdicts"][0]
        assert offline["stage"] == "offline"
        assert offline["candidate"] == version
        change = next(m for m in offline["measurements"] if m["name"] == "action_change_rms")
        assert change["value"] > change["threshold"]
        assert change["direction"] == "<="
        # The rejected id is used up: the next candidate gets the one after it.
        assert rig.learner.progress.next_version == version + 1
    finally:
        rig.close()


def test_a_passing_candidate_is_published_with_its_verdicts(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    rig = Rig(small_bundle, tmp_path, traffic)
    try:
        version = rig.publish_one()
        snap = rig.weights.read()
        assert snap is not None
        assert (snap.version, snap.parent) == (version, small_bundle.version.id)
        record = read_gate_record(rig.verdicts, version)
        assert record is not None
        assert record.passed
        assert [v.stage for v in record.verdicts] == [GateStage.OFFLINE, GateStage.SIMULATION]
        # The critic's value criterion was judged, and the stage used real observations.
        names = [m.name for m in record.verdicts[0].measurements]
        assert "critic_value_diff" in names
        assert record.verdicts[1].samples == 4  # two paired episodes per policy
        assert read_gate_verdicts(rig.verdicts, version) == record.verdicts
        assert read_gate_verdicts(rig.verdicts, version + 100) is None
        assert rig.learner.counters().gate_passed == 1
        assert rig.learner.counters().pending_version == version
        assert gate_record_versions(rig.verdicts)[-1] == version
        assert [r.version for r in list_gate_records(rig.verdicts, after=version - 1)] == [version]
    finally:
        rig.close()


def test_one_candidate_at_a_time_and_the_anchor_follows_what_is_live(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    rig = Rig(small_bundle, tmp_path, traffic)
    base = small_bundle.version.id
    try:
        first = rig.publish_one()
        first_state = rig.weights.read()
        assert first_state is not None
        # Pending: however much the learner trains, it publishes nothing more.
        for _ in range(5):
            rig.feed_and_step()
        assert rig.learner.counters().publications == 1
        assert rig.weights.latest_version() == first
        assert same(rig.learner.deployed, small_bundle.actor_state)

        # The server rejects it (resolved, live unchanged): the next candidate derives from
        # the live weights -- the bundle's -- not from the rejected one.
        resolve_pending(rig.weights, promote=False)
        second = rig.publish_one()
        snap = rig.weights.read()
        assert snap is not None
        assert second > first
        assert snap.parent == base
        record = read_gate_record(rig.verdicts, second)
        assert record is not None
        assert record.verdicts[0].baseline == base

        # The server promotes the second: the anchor becomes exactly its weights.
        resolve_pending(rig.weights, promote=True)
        rig.learner.step()
        assert rig.learner.progress.deployed_version == second
        assert same(rig.learner.deployed, snap.state)
        third = rig.publish_one()
        third_snap = rig.weights.read()
        assert third_snap is not None
        assert third_snap.parent == second

        # A rollback while nothing is pending: live goes back to the bundle, so does the anchor.
        resolve_pending(rig.weights, promote=False)
        rig.weights.set_live_version(base)
        rig.learner.step()
        assert rig.learner.progress.deployed_version == base
        assert rig.learner.counters().deployed_version == base
        assert same(rig.learner.deployed, small_bundle.actor_state)
        assert third > second
    finally:
        rig.close()


def test_a_restart_neither_reuses_ids_nor_publishes_while_a_candidate_is_pending(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    rig = Rig(small_bundle, tmp_path, traffic)
    try:
        rejected = rig.learner.propose(negated(small_bundle.actor_state)).version
        published = rig.publish_one()
        rig.learner.checkpoint()
        # Killed after another learner-side rejection that no checkpoint saw.
        rig.learner.ingest(traffic(small_bundle, 128, seed=99))
        lost = rig.learner.propose(negated(small_bundle.actor_state)).version
        assert rejected < published < lost

        rig.learner = rig.start(resume=True)
        assert rig.learner.progress.next_version == lost + 1
        assert rig.learner.counters().pending_version == published
        for _ in range(3):
            rig.feed_and_step()
        assert rig.weights.latest_version() == published  # still waiting for the server

        resolve_pending(rig.weights, promote=True)
        nxt = rig.publish_one()
        snap = rig.weights.read()
        assert snap is not None
        assert (nxt, snap.parent) == (lost + 1, published)
        assert gate_record_versions(rig.verdicts) == (rejected, published, lost, nxt)
    finally:
        rig.close()


def test_a_live_version_the_learner_never_held_keeps_the_anchor_and_raises_the_next_id(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    rig = Rig(small_bundle, tmp_path, traffic)
    base = small_bundle.version.id
    try:
        rig.weights.set_live_version(40)  # an operator's bundle, loaded on the server only
        version = rig.publish_one()
        snap = rig.weights.read()
        assert snap is not None
        assert version == 41  # above the live id: the registry would refuse a stale one
        assert snap.parent == base  # derived from the weights the learner actually holds
        assert same(rig.learner.deployed, small_bundle.actor_state)
    finally:
        rig.close()


def test_a_verdict_that_comes_while_the_learner_waits_for_rows_still_anchors_the_next(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    """The server may resolve a candidate after a step has read the live version and
    while it waits on the channel: the candidate published in that step must still be
    derived from what is live (it was derived from the version before: a stale parent)."""
    from tether.safety.levels import DegradationLevel

    rig = Rig(small_bundle, tmp_path, traffic)
    try:
        first = rig.publish_one()
        promoted = rig.weights.read()
        assert promoted is not None
        for _ in range(3):  # the learner trains on while the candidate is judged
            rig.feed_and_step()
        resolve_pending(rig.weights, promote=True)  # after this step's anchor check
        rig.learner._last_publish = float("-inf")
        rig.learner._maybe_publish(DegradationLevel.NORMAL)
        snap = rig.weights.read()
        assert snap is not None
        assert snap.version > first
        assert snap.parent == first
        assert same(rig.learner.deployed, promoted.state)
    finally:
        rig.close()
