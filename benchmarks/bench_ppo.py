"""PPO update throughput: tether's PPO beside Stable-Baselines3's PPO on the same machine.

Both learn from one full rollout of ``--rollout`` transitions of the built-in arm's
shapes (random observations, actions in (-1, 1), 200-step trajectories), with the same
network widths (``--hidden``, actor and value), mini-batch, epochs, clip, value and
entropy coefficients, gradient clip and learning rate, no KL early stop, one torch
thread. Timed per rollout, in alternating rounds so load on the shared machine hits
both alike:

- tether: ``PPO.schedule`` -- old log-probs from the behaviour weights, values, GAE over
  trajectories rebuilt from ingress stamps, then every epoch's mini-batch update;
- SB3: ``RolloutBuffer.compute_returns_and_advantage`` then ``PPO.train()`` (its old
  log-probs and values were stored while collecting, which is not timed).

The networks are not identical: tether's actor is the bundle's tanh-squashed Gaussian
with a state-dependent log-std head; SB3's ``MlpPolicy`` has a state-independent log-std
and no squash. Both have the same hidden layers.

    python benchmarks/bench_ppo.py [--rounds 3] [--rollout 2048] [--minibatch 64]
        [--epochs 10] [--hidden 256,256]

Numbers are in docs/benchmarks.md ("Online PPO (issue 20)").
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from tether.data.columns import TransitionArrays
from tether.learning.config import PPOConfig
from tether.learning.ppo import PPO
from tether.policy.networks import ActorArchitecture
from tether.sim import arm_spec

SPEC = arm_spec()
OBS, ACT = SPEC.obs_dim, SPEC.act_dim
EPISODE = 200


def rollout_rows(n: int, seed: int) -> TransitionArrays:
    """``n`` transitions in ``EPISODE``-step trajectories, stamped as the recorder does."""
    rng = np.random.default_rng(seed)
    rows = TransitionArrays.empty(n, OBS, ACT)
    states = rng.standard_normal((n + 1, OBS)).astype(np.float32)
    rows.observations[:] = states[:-1]
    rows.next_observations[:] = states[1:]
    rows.actions[:] = rng.uniform(-0.99, 0.99, (n, ACT))
    rows.proposed_actions[:] = rows.actions
    rows.rewards[:] = rng.standard_normal(n)
    rows.ingress_ns[:] = 20_000_000 * np.arange(n)
    rows.next_ingress_ns[:] = rows.ingress_ns + 20_000_000
    rows.truncated[EPISODE - 1 :: EPISODE] = True
    return rows


def tether_rollout_s(ppo: PPO, rows: TransitionArrays, behaviour: dict[str, torch.Tensor]) -> float:
    start = time.perf_counter()
    for _ in ppo.schedule(rows, behaviour):
        pass
    return time.perf_counter() - start


class _Box(gym.Env[np.ndarray, np.ndarray]):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)


def sb3_model(args: argparse.Namespace, hidden: list[int]) -> object:
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.logger import configure

    model = SB3PPO(
        "MlpPolicy",
        _Box(),
        n_steps=args.rollout,
        batch_size=args.minibatch,
        n_epochs=args.epochs,
        learning_rate=3e-4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        target_kl=None,
        policy_kwargs={"net_arch": {"pi": hidden, "vf": hidden}},
        device="cpu",
        seed=0,
    )
    model.set_logger(configure(None, [""]))
    return model


def fill_sb3(model: object, rows: TransitionArrays) -> None:
    """Store the rollout as SB3's collection would, with its policy's values/log-probs."""
    buffer = model.rollout_buffer  # type: ignore[attr-defined]
    policy = model.policy  # type: ignore[attr-defined]
    buffer.reset()
    with torch.no_grad():
        obs = torch.from_numpy(rows.observations)
        values = policy.predict_values(obs).numpy()[:, 0]
        log_probs = policy.get_distribution(obs).log_prob(torch.from_numpy(rows.actions)).numpy()
    starts = np.zeros(len(rows), dtype=np.float32)
    starts[EPISODE::EPISODE] = 1.0
    for i in range(len(rows)):
        buffer.add(
            rows.observations[i : i + 1],
            rows.actions[i : i + 1],
            rows.rewards[i : i + 1],
            starts[i : i + 1],
            torch.tensor([values[i]]),
            torch.tensor([log_probs[i]]),
        )


def sb3_rollout_s(model: object, rows: TransitionArrays) -> float:
    fill_sb3(model, rows)
    buffer = model.rollout_buffer  # type: ignore[attr-defined]
    last = torch.zeros(1)
    start = time.perf_counter()
    buffer.compute_returns_and_advantage(last_values=last, dones=np.zeros(1))
    model.train()  # type: ignore[attr-defined]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating timed rounds")
    parser.add_argument("--rollout", type=int, default=2048, help="transitions per rollout")
    parser.add_argument("--minibatch", type=int, default=64, help="transitions per update")
    parser.add_argument("--epochs", type=int, default=10, help="passes per rollout")
    parser.add_argument("--hidden", default="256,256", help="hidden widths, actor and value")
    args = parser.parse_args()
    hidden = [int(h) for h in args.hidden.split(",")]
    torch.set_num_threads(1)
    import stable_baselines3

    print(f"# {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}")
    print(f"# stable-baselines3 {stable_baselines3.__version__}")
    arch = ActorArchitecture(obs_dim=OBS, act_dim=ACT, hidden_sizes=tuple(hidden))
    cfg = PPOConfig(
        rollout_length=args.rollout,
        minibatch_size=args.minibatch,
        epochs=args.epochs,
        kl_target=None,
        value_warmup_rollouts=0,
    )
    ppo = PPO(arch, cfg)
    behaviour = ppo.actor_state()
    model = sb3_model(args, hidden)
    rows = rollout_rows(args.rollout, seed=1)
    updates = args.epochs * (args.rollout // args.minibatch)
    # Warm-up: allocator, fused-kernel dispatch.
    tether_rollout_s(ppo, rows, behaviour)
    sb3_rollout_s(model, rows)
    ours, theirs = [], []
    for _ in range(args.rounds):
        ours.append(tether_rollout_s(ppo, rows, behaviour))
        theirs.append(sb3_rollout_s(model, rows))
    o, t = statistics.median(ours), statistics.median(theirs)
    print(
        f"PPO rollout of {args.rollout} ({args.epochs} epochs x {args.rollout // args.minibatch} "
        f"mini-batches of {args.minibatch} = {updates} updates, {args.hidden}, 1 thread, "
        f"median of {args.rounds} rounds): tether {o:.2f} s ({updates / o:.0f} updates/s)  "
        f"SB3 {t:.2f} s ({updates / t:.0f} updates/s)  ratio {t / o:.2f}x"
    )


if __name__ == "__main__":
    main()
