"""SharedWeights: no torn reads while a writer process publishes as fast as it can."""

from __future__ import annotations

import multiprocessing as mp
import time
from multiprocessing.synchronize import Event

import numpy as np
import pytest
import torch

from tether.policy.networks import Actor, ActorArchitecture
from tether.policy.shared_weights import SharedWeights, SharedWeightsError
from tether.policy.tensors import state_sha256

ARCH = ActorArchitecture(obs_dim=6, act_dim=2, hidden_sizes=(64, 64))
N_WEIGHT_SETS = 32  # version v carries weight set v % N_WEIGHT_SETS
BURST = 16
OBS = torch.linspace(-1.0, 1.0, ARCH.obs_dim).reshape(1, -1)


def weight_set(k: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(1000 + k)
    return {n: t.detach().clone() for n, t in Actor(ARCH).state_dict().items()}


def reference_outputs(actor: Actor, sets: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    outs = []
    with torch.inference_mode():
        for state in sets:
            actor.load_state_dict(state)
            outs.append(actor(OBS)[0][0])
    return torch.stack(outs)


def matching_sets(output: torch.Tensor, refs: torch.Tensor) -> list[int]:
    """Indices of the weight sets whose reference output equals ``output`` bit for bit."""
    return [k for k in range(refs.shape[0]) if torch.equal(output, refs[k])]


def _writer(name: str, stop: Event, started: Event) -> None:
    torch.set_num_threads(1)
    sets = [weight_set(k) for k in range(N_WEIGHT_SETS)]
    shared = SharedWeights.attach(name, ARCH)
    started.set()
    version = 1
    # Bursts of back-to-back publications (each read during one races the writer, and
    # the writer laps slow readers), separated by pauses so the reader also runs many
    # inferences on each version, as a server does between swaps.
    while not stop.is_set():
        for _ in range(BURST):
            shared.publish(version, sets[version % N_WEIGHT_SETS], parent=version - 1)
            version += 1
        time.sleep(0.002)
    shared.close()


@pytest.fixture
def torch_one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.usefixtures("torch_one_thread")
def test_every_inference_matches_exactly_one_published_version() -> None:
    sets = [weight_set(k) for k in range(N_WEIGHT_SETS)]
    actor = Actor(ARCH)
    refs = reference_outputs(actor, sets)
    assert all(len(matching_sets(refs[k], refs)) == 1 for k in range(N_WEIGHT_SETS))

    ctx = mp.get_context("spawn")
    stop, started = ctx.Event(), ctx.Event()
    with SharedWeights.create(ARCH) as shared:
        writer = ctx.Process(target=_writer, args=(shared.name, stop, started), daemon=True)
        writer.start()
        try:
            assert started.wait(60), "writer process did not start"
            while shared.latest_version() is None:
                time.sleep(0.001)
            version: int | None = None
            versions_used: set[int] = set()
            mismatches = 0
            with torch.inference_mode():
                for _ in range(100_000):
                    snap = shared.read_if_newer(version)
                    if snap is not None:
                        actor.load_state_dict(snap.state)
                        version = snap.version
                        versions_used.add(version)
                        assert snap.parent == version - 1
                    assert version is not None
                    out = actor(OBS)[0][0]
                    # References are pairwise distinct (asserted above), so equality with the
                    # claimed version's reference means "exactly one published version".
                    if not torch.equal(out, refs[version % N_WEIGHT_SETS]):
                        mismatches += 1
            publications = shared.publications
        finally:
            stop.set()
            writer.join(30)
    assert mismatches == 0
    assert publications >= 1_000
    assert len(versions_used) >= 100


def test_the_check_detects_a_torn_state() -> None:
    """The check above can fail: half of one version and half of another matches none."""
    sets = [weight_set(0), weight_set(1)]
    actor = Actor(ARCH)
    refs = reference_outputs(actor, sets)
    names = list(sets[0])
    torn = {n: sets[0][n] if i < len(names) // 2 else sets[1][n] for i, n in enumerate(names)}
    with torch.inference_mode():
        actor.load_state_dict(torn)
        out = actor(OBS)[0][0]
    assert matching_sets(out, refs) == []


def test_snapshot_survives_later_publications() -> None:
    with SharedWeights.create(ARCH) as shared:
        assert shared.read() is None
        shared.publish(1, weight_set(1))
        snap = shared.read()
        assert snap is not None
        for v in range(2, 6):
            shared.publish(v, weight_set(v))
        assert snap.version == 1
        assert snap.parent is None
        for key, tensor in weight_set(1).items():
            assert torch.equal(snap.state[key], tensor)
        assert shared.latest_version() == 5
        assert shared.read_if_newer(5) is None
        assert shared.publications == 5


def test_snapshot_names_its_version_for_the_engine() -> None:
    with SharedWeights.create(ARCH) as shared:
        state = weight_set(2)
        shared.publish(9, state, parent=4, promote_directly=True)
        snap = shared.read()
        assert snap is not None
        assert snap.promote_directly
        info = snap.version_info()
        assert (info.id, info.parent) == (9, 4)
        assert info.weights_sha256 == state_sha256(state)
        shared.publish(10, state, parent=9)
        later = shared.read()
        assert later is not None
        assert not later.promote_directly


def test_degradation_level_round_trips() -> None:
    with SharedWeights.create(ARCH) as shared:
        other = SharedWeights.attach(shared.name, ARCH)
        shared.set_degradation_level(2)
        assert other.degradation_level() == 2
        other.close()


def test_live_and_resolved_versions_cross_processes_and_gate_the_next_publication() -> None:
    with SharedWeights.create(ARCH) as shared:
        learner = SharedWeights.attach(shared.name, ARCH)
        assert (learner.live_version(), learner.resolved_version()) == (None, None)
        assert learner.pending_version() is None
        learner.publish(3, weight_set(3), parent=2)
        assert shared.pending_version() == 3  # published, not yet judged
        shared.set_live_version(2)
        shared.set_resolved_version(3)  # rejected: live unchanged
        assert (learner.live_version(), learner.resolved_version()) == (2, 3)
        assert learner.pending_version() is None
        shared.set_resolved_version(1)  # a late verdict on an older candidate changes nothing
        assert learner.resolved_version() == 3
        learner.publish(4, weight_set(4), parent=2)
        assert learner.pending_version() == 4
        shared.set_live_version(4)
        shared.set_resolved_version(4)
        assert (learner.live_version(), learner.pending_version()) == (4, None)
        with pytest.raises(SharedWeightsError):
            shared.set_live_version(-1)
        learner.close()


def test_mismatched_state_and_block_are_refused() -> None:
    with SharedWeights.create(ARCH) as shared:
        state = weight_set(0)
        state.pop("head.mu.bias")
        with pytest.raises(SharedWeightsError, match=r"head\.mu\.bias"):
            shared.publish(1, state)
        bad = weight_set(0)
        bad["head.mu.bias"] = torch.zeros(3)
        with pytest.raises(SharedWeightsError, match="shape"):
            shared.publish(1, bad)
        assert shared.latest_version() is None
        bigger = ActorArchitecture(obs_dim=6, act_dim=2, hidden_sizes=(128, 64))
        with pytest.raises(SharedWeightsError, match="bytes"):
            SharedWeights.attach(shared.name, bigger)
    with pytest.raises(SharedWeightsError, match="no shared weights block"):
        SharedWeights.attach("tether_w_does_not_exist", ARCH)


def test_published_state_is_float32_exact() -> None:
    with SharedWeights.create(ARCH) as shared:
        state = weight_set(3)
        shared.publish(7, state)
        snap = shared.read()
        assert snap is not None
        flat_in = np.concatenate([t.reshape(-1).numpy() for t in state.values()])
        flat_out = np.concatenate([t.reshape(-1).numpy() for t in snap.state.values()])
        assert flat_in.tobytes() == flat_out.tobytes()
