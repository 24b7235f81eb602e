"""``SimRobotClient``: the built-in simulated arm, driven by a served policy.

It is what a robot's controller does, with MuJoCo in place of the hardware: read the
observation, send it through a ``Control`` session with the reward of the previous
action, execute whatever comes back (the server's safe action, or the watchdog's backup
if the deadline passed), and repeat at the control rate — or as fast as the server
answers (``control_rate_hz=0``), for tests and benchmarks.

Invariant: the env executes only actions returned by the session (server or watchdog);
the client never substitutes its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tether.serving.client.sync import PolicyClient
from tether.sim import ArmEnv


@dataclass(frozen=True)
class SimRunStats:
    """What one run of the simulated robot saw."""

    steps: int
    episodes: int  # episodes that ended (terminated or truncated)
    watchdog_misses: int
    interventions: int  # server actions the supervisor changed or replaced
    mean_episode_return: float
    elapsed_s: float
    round_trip_p50_s: float
    round_trip_p99_s: float

    @property
    def steps_per_s(self) -> float:
        """Steps per second of the run's wall time (0 for a run that took none)."""
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else 0.0


class SimRobotClient:
    """Runs ``ArmEnv`` through a served policy (see the module docstring)."""

    def __init__(
        self,
        client: PolicyClient,
        *,
        env: ArmEnv | None = None,
        robot_id: str = "sim-arm",
        control_rate_hz: float | None = None,
        control_deadline_s: float | None = None,
        deterministic: bool = False,
        seed: int = 0,
    ) -> None:
        self.env = env or ArmEnv(seed=seed)
        spec = self.env.robot_spec
        rate = 1.0 / spec.control_period_s if control_rate_hz is None else control_rate_hz
        if rate < 0:
            raise ValueError(f"control_rate_hz must be >= 0 (0: unthrottled), got {rate}")
        self.period_s = 1.0 / rate if rate > 0 else 0.0
        self.client = client
        self.robot_id = robot_id
        self.deterministic = deterministic
        self.seed = seed
        self.control_deadline_s = control_deadline_s or spec.control_period_s

    def run(self, steps: int) -> SimRunStats:
        """Run ``steps`` control steps (resetting the env at episode ends)."""
        spec = self.env.robot_spec
        session = self.client.session(
            spec, robot_id=self.robot_id, control_deadline_s=self.control_deadline_s
        )
        round_trips: list[float] = []
        returns: list[float] = []
        interventions = 0
        episode_return = 0.0
        obs, _ = self.env.reset(seed=self.seed)
        reward, terminated, truncated = 0.0, False, False
        start = time.monotonic()
        next_tick = start
        try:
            for _ in range(steps):
                sent = time.perf_counter()
                result = session.step(
                    obs,
                    reward=reward,
                    terminated=terminated,
                    truncated=truncated,
                    deterministic=self.deterministic,
                )
                round_trips.append(time.perf_counter() - sent)
                if result.verdict is not None and result.verdict.source != "policy":
                    interventions += 1
                if terminated or truncated:
                    # The final observation was reported; the robot starts over.
                    returns.append(episode_return)
                    episode_return = 0.0
                    obs, _ = self.env.reset()
                    reward, terminated, truncated = 0.0, False, False
                else:
                    obs, reward, terminated, truncated, _ = self.env.step(result.action)
                    reward = float(reward)
                    episode_return += reward
                if self.period_s:
                    next_tick += self.period_s
                    delay = next_tick - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        next_tick = time.monotonic()  # late: do not try to catch up
        finally:
            session.close()
        elapsed = time.monotonic() - start
        rt = np.asarray(round_trips) if round_trips else np.zeros(1)
        return SimRunStats(
            steps=len(round_trips),
            episodes=len(returns),
            watchdog_misses=session.misses,
            interventions=interventions,
            mean_episode_return=float(np.mean(returns)) if returns else 0.0,
            elapsed_s=elapsed,
            round_trip_p50_s=float(np.percentile(rt, 50)),
            round_trip_p99_s=float(np.percentile(rt, 99)),
        )
