"""What a robot's own model costs the position supervisor, beside the built-in arm's kernel.

The built-in arm's MJCF with its joints renamed stands in for another robot: tether has
no kinematics of its own for it, so ``tether serve --kinematics`` gives the supervisor
``ModelKinematics`` (MuJoCo evaluates every pose; the Python path). A random command
policy (a fresh uniform target every 25 steps) drives the MuJoCo arm through the built-in
arm's supervisor for ``--steps`` steps; each supervisor then filters the same recorded
(observation, command, previous command) rows, timed one call at a time: the built-in
arm's compiled kernel, the model's kinematics with its reach bound, and without it.

    python benchmarks/bench_model_kinematics.py [--steps 3000]
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
from bench_supervisor import trajectory

from tether.safety.for_spec import limits_for, supervisor_for
from tether.safety.model_kinematics import ModelKinematics
from tether.safety.supervises import ActionSupervisor
from tether.sim import arm_spec
from tether.sim.mjcf import build_mjcf


def timed(supervisor: ActionSupervisor, rows: list) -> np.ndarray:  # type: ignore[type-arg]
    out = []
    for obs, command, previous in rows:
        start = time.perf_counter()
        supervisor.filter(obs, command, previous)
        out.append(time.perf_counter() - start)
    return np.array(out) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    arm = arm_spec("position")
    names = {old: f"j{i}" for i, old in enumerate(arm.joint_names)}
    xml = build_mjcf(command_interface="position")
    for old, new in names.items():
        xml = xml.replace(f'"{old}"', f'"{new}"')
    model = Path(tempfile.mkdtemp()) / "robot.xml"
    model.write_text(xml)
    spec = dataclasses.replace(arm, name="my-arm", joint_names=tuple(names.values()))
    kinematics = ModelKinematics(model, spec, "end_effector")
    rows = trajectory(args.steps, seed=0, command_interface="position", hold_steps=25)
    cases = {
        "built-in arm, compiled kernel": lambda: supervisor_for(arm),
        "robot model, reach bound": lambda: supervisor_for(
            spec, limits_for(spec), kinematics=kinematics
        ),
    }
    print(f"# {platform.processor() or platform.machine()}, {len(rows)} recorded steps")
    print("| supervisor | median µs | p99 µs | max µs |")
    print("|---|---|---|---|")
    for name, make in cases.items():
        us = timed(make(), rows)
        print(f"| {name} | {np.median(us):.0f} | {np.percentile(us, 99):.0f} | {us.max():.0f} |")
    with mock.patch.object(ModelKinematics, "joint_reach", return_value=None):
        us = timed(supervisor_for(spec, limits_for(spec), kinematics=kinematics), rows)
    print(
        f"| robot model, no reach bound | {np.median(us):.0f} | {np.percentile(us, 99):.0f} "
        f"| {us.max():.0f} |"
    )


if __name__ == "__main__":
    main()
