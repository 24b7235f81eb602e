"""The robots a run starts, one :class:`~tether.runtime.robot.RobotPlan` each; the
embedded and the Ray backends build them here alike."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tether.runtime.config import RunConfig
from tether.runtime.robot import RobotPlan
from tether.serving.client.options import ClientOptions
from tether.serving.security import bearer_token


def robot_plans(
    config: RunConfig, run_dir: Path, *, pin_version: int, address_of: Callable[[int], str]
) -> list[RobotPlan]:
    """The run's robots: ``robot-0`` pinned to ``pin_version`` as the frozen baseline
    (when the fleet has one and more than one robot), robot ``i`` talking to
    ``address_of(i)``, every robot under the run's drift, seeds, tasks and credentials."""
    fleet = config.fleet
    drift = config.drift.schedule(int(config.duration_s * fleet.control_rate_hz))
    security = config.server.security
    client = ClientOptions(
        bearer_token=bearer_token(security), tls_root_cert_file=security.tls_cert_file
    )
    plans = []
    for i in range(fleet.robots):
        baseline = fleet.baseline and i == 0 and fleet.robots > 1
        plans.append(
            RobotPlan(
                robot_id=f"robot-{i}",
                role="baseline" if baseline else "learning",
                address=address_of(i),
                run_dir=run_dir,
                seed=fleet.seed + i,
                task_seeds=fleet.task_seeds(),
                control_rate_hz=fleet.control_rate_hz,
                fast=config.fast,
                deterministic=config.robots_deterministic(),
                duration_s=config.duration_s,
                drift=drift,
                pin_version=pin_version if baseline else None,
                client=client,
                parent_pid=os.getpid(),
            )
        )
    return plans
