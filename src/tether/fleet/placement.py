"""Where each fleet actor runs, and what it asks Ray for.

Edges go where the robots are: ``tether run`` starts its simulated robots on the
driver's machine, so edges are pinned (soft node affinity) to the driver's node; on a
cluster whose robots sit elsewhere, an operator starts the driver there. The learner
goes where the resources are: one GPU when the cluster has one (``learner_gpus``), and
otherwise anywhere with a CPU. The replay actor and the version service ask for no
CPU of their own (they only move bytes and hold a registry) and sit on the driver's
node too, so the edges' transitions and syncs stay on one machine.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, cast

from tether.fleet.errors import FleetError

# Scheduling shares: on a 2-CPU machine two edges and the learner fit at once.
EDGE_CPUS = 0.25
LEARNER_CPUS = 0.5


@dataclass(frozen=True)
class ActorPlacement:
    """One actor, as the report records it."""

    name: str
    role: str  # edge, learner, replay, versions
    node_id: str
    node_ip: str
    pid: int
    resources: dict[str, float]
    address: str | None = None  # an edge's gRPC address


def here() -> tuple[str, str, int]:
    """(node id, node address, pid) of the calling actor's process."""
    import ray

    return (
        ray.get_runtime_context().get_node_id(),
        cast(Any, ray).util.get_node_ip_address(),
        os.getpid(),
    )


def learner_resources(cluster: dict[str, float], learner_gpus: str) -> dict[str, float]:
    """What the learner actor asks for: a GPU when there is one and it may have it."""
    gpus = float(cluster.get("GPU", 0.0))
    if learner_gpus == "one" and gpus < 1:
        raise FleetError(
            "ray.learner_gpus is 'one' but the cluster has no GPU "
            f"(resources: {sorted(cluster)}); set it to 'auto' or 'none', or join a cluster "
            "with a GPU node"
        )
    wants_gpu = learner_gpus == "one" or (learner_gpus == "auto" and gpus >= 1)
    return {"num_cpus": LEARNER_CPUS, "num_gpus": 1.0 if wants_gpu else 0.0}


def on_node(node_id: str) -> Any:
    """A soft node-affinity strategy: that node if it can host the actor, else anywhere."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=True)


def free_port(host: str) -> int:
    """A port free on ``host`` now: an edge keeps it across restarts (robots reconnect to it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def local_cpus() -> int:
    """The CPUs this process may use: what a local Ray instance is sized to."""
    return len(os.sched_getaffinity(0))
