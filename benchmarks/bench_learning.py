"""Learning-layer speed and sample efficiency, each side by side with its reference.

1. SAC updates/s (batch 256, 256x256 networks, 1 thread) beside Stable-Baselines3's SAC
   ``train()`` step on the same machine, in alternating rounds. Target: ratio >= 1.0.
2. SharedWeights publish-to-first-use latency: a writer process publishes, a reader
   that runs inference "batches" applies each new version between batches; latency is
   first use minus publication on the shared monotonic clock. Also the publish cost.
3. (``--sample-efficiency``; long) episodes until the deterministic policy reaches the
   arm's success threshold on the nominal arm, tether SAC vs SB3 SAC with matched
   hyper-parameters (128x128, batch 256, lr 3e-4, gamma 0.99, tau 0.005, auto alpha).
4. ``--learner-seconds N`` runs the learner process at full speed (no update-to-data
   limit) for N seconds against a feeder of synthetic arm transitions: what the serving
   isolation benchmark runs beside the server. ``start_full_speed_learner()`` is the
   importable form.

    python benchmarks/bench_learning.py [--rounds 3] [--updates 150]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from tether.data.channel import ChannelConfig, TransitionChannel
from tether.data.columns import TransitionArrays
from tether.data.records import TransitionBatch
from tether.learning.config import SACConfig
from tether.learning.evaluation import evaluate_actor
from tether.learning.learner_config import LearnerConfig
from tether.learning.process import LearnerProcess
from tether.learning.publication import PublicationConfig
from tether.learning.sac import SAC
from tether.policy import PolicyBundle, init_bundle
from tether.policy.initialize import normalizer_from_spec
from tether.policy.networks import Actor, ActorArchitecture
from tether.policy.shared_weights import SharedWeights
from tether.policy.transforms import ObservationNormalizer
from tether.sim import ArmEnv, arm_spec

SPEC = arm_spec()
OBS, ACT = SPEC.obs_dim, SPEC.act_dim
BATCH = 256
ARCH = ActorArchitecture(obs_dim=OBS, act_dim=ACT, hidden_sizes=(256, 256))


# --- 1. updates/s -------------------------------------------------------------------


def _random_columns(n: int, seed: int) -> TransitionBatch:
    rng = np.random.default_rng(seed)
    return TransitionBatch(
        rng.standard_normal((n, OBS), dtype=np.float32),
        rng.uniform(-1, 1, (n, ACT)).astype(np.float32),
        rng.standard_normal(n).astype(np.float32),
        rng.standard_normal((n, OBS), dtype=np.float32),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=bool),
    )


def tether_updates_per_s(sac: SAC, data: TransitionBatch, updates: int) -> float:
    """Includes drawing the mini-batch from the columns, as SB3's train() does."""
    rng = np.random.default_rng(0)
    n = len(data)
    start = time.perf_counter()
    for _ in range(updates):
        idx = rng.integers(0, n, BATCH)
        sac.update(TransitionBatch(*(column[idx] for column in data)))
    return updates / (time.perf_counter() - start)


class _Box(gym.Env[np.ndarray, np.ndarray]):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)


def _sb3_model(data: TransitionBatch) -> object:
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.logger import configure

    model = SB3SAC(
        "MlpPolicy",
        _Box(),
        batch_size=BATCH,
        buffer_size=len(data),
        learning_starts=0,
        policy_kwargs={"net_arch": [256, 256]},
        device="cpu",
        seed=0,
    )
    for i in range(len(data)):
        model.replay_buffer.add(
            data.observations[i : i + 1],
            data.next_observations[i : i + 1],
            data.actions[i : i + 1],
            data.rewards[i : i + 1],
            data.terminated[i : i + 1],
            [{}],
        )
    model.set_logger(configure(None, [""]))
    return model


def sb3_updates_per_s(model: object, updates: int) -> float:
    start = time.perf_counter()
    model.train(gradient_steps=updates, batch_size=BATCH)  # type: ignore[attr-defined]
    return updates / (time.perf_counter() - start)


def bench_updates(rounds: int, updates: int) -> None:
    torch.set_num_threads(1)
    data = _random_columns(20_000, 1)
    sac = SAC(ARCH, SACConfig())
    model = _sb3_model(data)
    tether_updates_per_s(sac, data, 20)  # warm-up: allocator, fused-kernel dispatch
    sb3_updates_per_s(model, 20)
    ours, theirs = [], []
    for _ in range(rounds):  # alternate, so load changes on the machine hit both alike
        ours.append(tether_updates_per_s(sac, data, updates))
        theirs.append(sb3_updates_per_s(model, updates))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(
        f"SAC updates/s (batch {BATCH}, 256x256, 1 thread, median of {rounds} rounds x "
        f"{updates}): tether {o:.1f}  SB3 {t:.1f}  ratio {o / t:.2f}x"
    )


# --- 2. publish-to-first-use --------------------------------------------------------


def _publisher(name: str, n: int, interval_s: float, ready: Event, done: Event) -> None:
    torch.set_num_threads(1)
    weights = SharedWeights.attach(name, ARCH)
    state = {k: v.detach().clone() for k, v in Actor(ARCH).state_dict().items()}
    ready.set()
    costs = []
    for version in range(1, n + 1):
        time.sleep(interval_s)
        start = time.perf_counter()
        weights.publish(version, state, parent=version - 1)
        costs.append(time.perf_counter() - start)
    print(
        f"publish cost: median {statistics.median(costs) * 1e6:.0f} us for {sum(np.prod(v.shape) for v in state.values())} parameters"
    )
    done.set()
    weights.close()


def bench_publish_latency(publications: int, batch_rows: int) -> None:
    torch.set_num_threads(1)
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    actor = Actor(ARCH).eval()
    obs = torch.zeros(batch_rows, OBS)
    latencies, batch_times = [], []
    with SharedWeights.create(ARCH) as weights:
        writer = ctx.Process(
            target=_publisher, args=(weights.name, publications, 0.02, ready, done)
        )
        writer.start()
        ready.wait(60)
        version = None
        with torch.inference_mode():
            while not (done.is_set() and weights.latest_version() == version):
                snapshot = weights.read_if_newer(version)
                if snapshot is not None:
                    actor.load_state_dict(snapshot.state)
                    version = snapshot.version
                start = time.perf_counter()
                actor(obs)  # the batch that first uses the version
                batch_times.append(time.perf_counter() - start)
                if snapshot is not None:
                    latencies.append((time.monotonic_ns() - snapshot.published_ns) / 1e3)
        writer.join(30)
    q = np.percentile(latencies, [50, 99])
    print(
        f"publish-to-first-use (256x256 actor, batch {batch_rows}, {len(latencies)} of "
        f"{publications} versions used): p50 {q[0]:.0f} us  p99 {q[1]:.0f} us  "
        f"(one inference batch: p50 {np.median(batch_times) * 1e6:.0f} us)"
    )


# --- 3. sample efficiency -----------------------------------------------------------


def _episodes_to_threshold_tether(
    threshold: float, max_steps: int, seed: int
) -> tuple[int | None, int]:
    from tether.learning.pretrain import PretrainConfig, pretrain

    config = PretrainConfig(
        sac=SACConfig(hidden_sizes=(128, 128), seed=seed),
        total_env_steps=max_steps,
        time_budget_s=1e9,
        n_envs=1,
        updates_per_step=1.0,
        randomize=False,
        eval_interval_steps=5_000,
        eval_episodes=10,
        final_eval_episodes=1,
        stop_success_rate=threshold,
        seed=seed,
    )
    with tempfile.TemporaryDirectory() as tmp:
        result = pretrain(config, Path(tmp) / "b")
    for point in result.history:
        if point.result.success_rate >= threshold:
            return point.episodes, point.env_steps
    return None, result.env_steps


def _episodes_to_threshold_sb3(
    threshold: float, max_steps: int, seed: int
) -> tuple[int | None, int]:
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.callbacks import BaseCallback

    normalize = ObservationNormalizer(normalizer_from_spec(SPEC))
    env = gym.wrappers.TransformObservation(
        ArmEnv(seed=seed), lambda o: normalize(o[None, :])[0], ArmEnv(seed=seed).observation_space
    )
    eval_env = ArmEnv(seed=seed + 7)
    found: list[tuple[int, int]] = []

    class Evaluate(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % 5_000:
                return True
            actor = Actor(ActorArchitecture(OBS, ACT, (128, 128)))
            policy = self.model.policy.actor  # type: ignore[attr-defined]
            # SB3's actor: latent_pi (trunk), mu, log_std; same layout as ours.
            state = {
                "trunk.0.weight": policy.latent_pi[0].weight,
                "trunk.0.bias": policy.latent_pi[0].bias,
                "trunk.2.weight": policy.latent_pi[2].weight,
                "trunk.2.bias": policy.latent_pi[2].bias,
                "head.mu.weight": policy.mu.weight,
                "head.mu.bias": policy.mu.bias,
                "head.log_std.weight": policy.log_std.weight,
                "head.log_std.bias": policy.log_std.bias,
            }
            actor.load_state_dict({k: v.detach() for k, v in state.items()})
            result = evaluate_actor(actor, normalize, eval_env, 10)
            if result.success_rate >= threshold:
                episodes = self.num_timesteps // 200
                found.append((episodes, self.num_timesteps))
                return False
            return True

    model = SB3SAC(
        "MlpPolicy",
        env,
        batch_size=BATCH,
        learning_starts=5_000,
        policy_kwargs={"net_arch": [128, 128]},
        device="cpu",
        seed=seed,
    )
    model.learn(max_steps, callback=Evaluate())
    return (found[0][0], found[0][1]) if found else (None, max_steps)


def bench_sample_efficiency(threshold: float, max_steps: int, seed: int) -> None:
    torch.set_num_threads(1)
    for name, run in (
        ("tether", _episodes_to_threshold_tether),
        ("SB3", _episodes_to_threshold_sb3),
    ):
        start = time.monotonic()
        episodes, steps = run(threshold, max_steps, seed)
        took = time.monotonic() - start
        reached = (
            f"{episodes} episodes ({steps} steps)"
            if episodes is not None
            else f"not within {steps} steps"
        )
        print(f"episodes to {threshold:.0%} nominal-arm success, {name}: {reached}, {took:.0f} s")


# --- 4. the learner at full speed ---------------------------------------------------


def start_full_speed_learner(
    bundle: PolicyBundle, workdir: Path
) -> tuple[LearnerProcess, TransitionChannel, SharedWeights]:
    """A learner process updating as fast as it can (UTD unlimited), publishing every 0.5 s."""
    arch = bundle.architecture
    channel = TransitionChannel(arch.obs_dim, arch.act_dim, ChannelConfig(capacity=8192))
    weights = SharedWeights.create(arch)
    config = LearnerConfig(
        updates_per_transition=None,
        fine_tune=False,
        publication=PublicationConfig(min_interval_s=0.5, max_action_change=10.0, max_kl=1e3),
    )
    assert bundle.path is not None
    learner = LearnerProcess(
        bundle.path, config, weights=weights, channel=channel, checkpoint_dir=workdir / "ckpt"
    )
    learner.start()
    rows = TransitionArrays.empty(4096, arch.obs_dim, arch.act_dim)
    rows.observations[:] = np.random.default_rng(0).standard_normal((4096, arch.obs_dim))
    rows.next_observations[:] = rows.observations
    channel.put_arrays(rows)
    return learner, channel, weights


def bench_full_speed_learner(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bundle = init_bundle(Path(tmp) / "b", SPEC, with_training=True)
        learner, channel, weights = start_full_speed_learner(bundle, Path(tmp))
        try:
            while learner.counters().updates == 0:
                time.sleep(0.1)
            first = learner.counters().updates
            time.sleep(seconds)
            c = learner.counters()
            print(
                f"learner process at full speed: {(c.updates - first) / seconds:.1f} updates/s, "
                f"{c.publications} publications, pinned per learner_placement()"
            )
        finally:
            learner.stop()
            channel.close()
            weights.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds of the updates/s comparison"
    )
    parser.add_argument("--updates", type=int, default=150, help="updates per round and side")
    parser.add_argument(
        "--publications", type=int, default=200, help="versions the latency writer publishes"
    )
    parser.add_argument(
        "--sample-efficiency",
        action="store_true",
        help="also run the (long) episodes-to-threshold comparison",
    )
    parser.add_argument(
        "--threshold", type=float, default=0.8, help="success rate that counts as solved (fraction)"
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=100_000,
        help="env-step cap per side for --sample-efficiency",
    )
    parser.add_argument(
        "--learner-seconds",
        type=float,
        default=0.0,
        help="run the full-speed learner process for N s",
    )
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores, "
        f"python {platform.python_version()}, torch {torch.__version__}"
    )
    bench_updates(args.rounds, args.updates)
    bench_publish_latency(args.publications, 32)
    if args.learner_seconds > 0:
        bench_full_speed_learner(args.learner_seconds)
    if args.sample_efficiency:
        bench_sample_efficiency(args.threshold, args.max_steps, 0)


if __name__ == "__main__":
    main()
