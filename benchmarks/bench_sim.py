"""Simulated-arm speed: env steps per second (single thread) and kinematics call cost.

Target (issue 2, kept by issue 14): >= 5,000 env steps/s on one thread, for both
command interfaces (torque motors; position targets under the joint impedance
controller, which runs inside MuJoCo's substeps). The physics floor (the same substeps
through bare ``mujoco.mj_step``, no env around them) is measured in the same run, so the
env's own overhead reads as a ratio. Every figure comes from one run of:

    python benchmarks/bench_sim.py [--steps 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable

import mujoco
import numpy as np
import torch

from tether.sim import (
    ArmEnv,
    ArmEnvConfig,
    ArmKinematics,
    DomainRandomization,
    DriftSchedule,
    arm_spec,
)
from tether.sim.geometry import ARM
from tether.sim.mjcf import build_model


def env_steps_per_s(env: ArmEnv, actions: np.ndarray) -> float:
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        *_, truncated, _ = env.step(action)
        if truncated:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def physics_floor_steps_per_s(actions: np.ndarray, position: bool = False) -> float:
    model = build_model(command_interface="position" if position else "torque")
    data = mujoco.MjData(model)
    data.qpos[:] = arm_spec().home_position_rad
    start = time.perf_counter()
    spec = arm_spec("position")
    for i, action in enumerate(actions):
        data.ctrl[:] = spec.commanded_position(action) if position else action
        mujoco.mj_step(model, data, nstep=ARM.substeps)
        if i % 200 == 199:
            mujoco.mj_resetData(model, data)
            data.qpos[:] = arm_spec().home_position_rad
    return len(actions) / (time.perf_counter() - start)


def microseconds_per_call(fn: Callable[[np.ndarray], object], qs: np.ndarray) -> float:
    start = time.perf_counter()
    for q in qs:
        fn(q)
    return (time.perf_counter() - start) / len(qs) * 1e6


def best(repeats: int, measure: Callable[[], float], higher_is_better: bool = True) -> float:
    values = [measure() for _ in range(repeats)]
    return max(values) if higher_is_better else min(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="control steps per measurement")
    parser.add_argument("--repeats", type=int, default=3, help="measurements; the best is kept")
    args = parser.parse_args()
    spec = arm_spec()
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (args.steps, spec.act_dim)).astype(np.float32)
    low, high = np.array(spec.joint_position_low_rad), np.array(spec.joint_position_high_rad)
    qs = rng.uniform(low, high, (args.steps, spec.n_joints))
    kin = ArmKinematics()

    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, python "
        f"{sys.version.split()[0]}, torch {torch.__version__}, mujoco {mujoco.__version__}"
    )
    print(
        f"{args.steps} random-action control steps ({ARM.substeps} physics substeps each), best of {args.repeats}"
    )

    def drifting_env(config: ArmEnvConfig) -> ArmEnv:
        return ArmEnv(
            seed=0,
            randomization=DomainRandomization.default(),
            drift=DriftSchedule.demo(start_step=0, ramp_steps=args.steps),
            config=config,
        )

    print("| interface | measurement | steps/s | vs physics floor |")
    print("|---|---|---|---|")
    for interface in ("torque", "position"):
        config = ArmEnvConfig(command_interface=interface)
        position = interface == "position"
        # Interleaved, so a burst of load from other processes hits every row alike.
        floor = nominal = drifting = 0.0
        for _ in range(args.repeats):
            floor = max(floor, physics_floor_steps_per_s(actions, position))
            nominal = max(nominal, env_steps_per_s(ArmEnv(seed=0, config=config), actions))
            drifting = max(drifting, env_steps_per_s(drifting_env(config), actions))
        print(
            f"| {interface} | bare mj_step x{ARM.substeps} (physics floor) | {floor:,.0f} | 1.00 |"
        )
        print(
            f"| {interface} | ArmEnv.step, nominal dynamics | {nominal:,.0f} | "
            f"{nominal / floor:.2f} |"
        )
        print(
            f"| {interface} | ArmEnv.step, randomization + drift ramping every step | "
            f"{drifting:,.0f} | {drifting / floor:.2f} |"
        )
    print()
    print("| ArmKinematics call | µs/call |")
    print("|---|---|")
    for name, fn in (
        ("end_effector(q)", kin.end_effector),
        (f"collision_spheres(q) ({kin.n_spheres} spheres)", kin.collision_spheres),
        ("gravity_torque(q)", kin.gravity_torque),
    ):
        cost = best(
            args.repeats, lambda fn=fn: microseconds_per_call(fn, qs), higher_is_better=False
        )
        print(f"| {name} | {cost:.1f} |")


if __name__ == "__main__":
    main()
