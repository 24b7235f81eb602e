"""The learner in its own process: killed with SIGKILL, it is restarted and resumes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.data.channel import ChannelConfig, TransitionChannel
from tether.data.columns import TransitionArrays
from tether.learning.config import SACConfig
from tether.learning.learner_config import LearnerConfig
from tether.learning.placement import learner_placement
from tether.learning.process import LearnerEventKind, LearnerProcess
from tether.learning.publication import PublicationConfig
from tether.policy import PolicyBundle
from tether.policy.shared_weights import SharedWeights
from tether.versions.learner_gate import LearnerGateConfig
from tether.versions.stages.offline import OfflineStageConfig
from tether.versions.stages.simulation import SimulationStageConfig
from tether.versions.verdict_files import read_gate_record

from .conftest import resolve_pending

Traffic = Callable[..., TransitionArrays]


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    learner: LearnerProcess | None = None,
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            state = "" if learner is None else f"; learner {learner.counters()}, {learner.events()}"
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{state}")
        time.sleep(0.05)


# Its waits add up to 300 s and stop() may take 65 s more: a slow machine fails it with the
# learner's counters in the message, not with pytest-timeout's stack dump.
@pytest.mark.timeout(420)
def test_sigkilled_learner_restarts_from_its_checkpoint_while_weights_stay_served(
    small_bundle: PolicyBundle, tmp_path: Path, traffic: Traffic
) -> None:
    arch = small_bundle.architecture
    config = LearnerConfig(
        algorithm="sac",
        sac=SACConfig(batch_size=32),
        # What is under test is the process's life, not admission: every step the learner
        # takes is publishable (tests/learning/test_gated_publication.py tests the gate).
        publication=PublicationConfig(min_interval_s=0.05, max_action_change=10.0, max_kl=1e3),
        gate=LearnerGateConfig(
            offline=OfflineStageConfig(min_observations=1, max_action_change=10.0, max_kl=1e3),
            simulation=SimulationStageConfig(enabled=False),
        ),
        fine_tune=False,
        updates_per_transition=None,  # full speed
        checkpoint_interval_s=0.2,
        restart_backoff_s=0.1,
        torch_threads=1,
        nice=0,
    )
    assert small_bundle.path is not None
    with (
        TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=2048)) as channel,
        SharedWeights.create(arch) as weights,
    ):
        learner = LearnerProcess(
            small_bundle.path,
            config,
            weights=weights,
            channel=channel,
            checkpoint_dir=tmp_path / "ckpt",
            verdict_dir=tmp_path / "verdicts",
        )
        learner.start()
        try:
            channel.put_arrays(traffic(small_bundle, 256))
            wait_for(
                lambda: (
                    learner.counters().checkpoints >= 1 and learner.counters().publications >= 1
                ),
                90,
                "a checkpoint and a publication",
                learner,
            )
            first_pid = learner.pid
            assert first_pid is not None
            # The learner runs on its own cores, chosen by the parent.
            assert os.sched_getaffinity(first_pid) == set(learner.cores)
            assert learner.cores == learner_placement().learner_cores
            served = weights.read()
            assert served is not None
            # Gated before it was published, and the verdicts are on disk for the server.
            record = read_gate_record(tmp_path / "verdicts", served.version)
            assert record is not None
            assert record.passed

            os.kill(first_pid, signal.SIGKILL)
            wait_for(
                lambda: any(e.kind is LearnerEventKind.RESTARTED for e in learner.events()),
                30,
                "the restart",
                learner,
            )
            # Serving never lost its weights: the last publication is still readable.
            still = weights.read()
            assert still is not None
            assert still.version >= served.version

            wait_for(lambda: learner.counters().resumed_from_updates > 0, 90, "the resume", learner)
            resumed_at = learner.counters().resumed_from_updates
            channel.put_arrays(traffic(small_bundle, 64, seed=1))
            wait_for(
                lambda: learner.counters().updates > resumed_at, 45, "updates after resume", learner
            )
            assert learner.pid != first_pid
            crashes = [e for e in learner.events() if e.kind is LearnerEventKind.CRASHED]
            assert [e.exitcode for e in crashes] == [-signal.SIGKILL]
            # Nothing new is published until the server resolves the pending candidate;
            # then versions continue the lineage instead of restarting from the bundle's id.
            assert weights.latest_version() == still.version
            resolve_pending(weights, promote=True)
            wait_for(
                lambda: weights.latest_version() != still.version, 45, "a new publication", learner
            )
            latest = weights.read()
            assert latest is not None
            assert latest.version > still.version
        finally:
            learner.stop()
    assert learner.events()[-1].kind is LearnerEventKind.STOPPED


def test_default_placement_splits_cores() -> None:
    two = learner_placement((0, 1))
    assert (two.learner_cores, two.serving_cores, two.torch_threads) == ((1,), (0,), 1)
    four = learner_placement((0, 1, 2, 3))
    assert (four.learner_cores, four.serving_cores, four.torch_threads) == ((2, 3), (0, 1), 2)
    sixteen = learner_placement(tuple(range(16)))
    assert sixteen.learner_cores == tuple(range(8, 16))
    assert sixteen.serving_cores == tuple(range(8))
    assert sixteen.torch_threads == 4
    one = learner_placement((0,))
    assert one.learner_cores == one.serving_cores == (0,)
