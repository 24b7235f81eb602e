"""A simulated arm for the compose fleet: drives the built-in arm through a served policy.

``python /etc/tether/sim_robot.py --target dns:///server:50051`` runs
``SimRobotClient`` at the arm's control rate for ``--steps`` steps (0: until SIGTERM)
and prints its statistics. A ``dns:`` target resolves every replica of the compose
service, so with ``--scale server=2`` a robot fails over when one of them goes.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys

from tether.serving.client import PolicyClient
from tether.serving.client.sim_robot import SimRobotClient

FOREVER_STEPS = 10**12  # --steps 0: SIGTERM ends the run


class Stopped(Exception):
    """SIGTERM or SIGINT arrived; the session closes on the way out."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--target", default="dns:///server:50051", help="gRPC target")
    parser.add_argument("--robot-id", default=socket.gethostname(), help="robot id")
    parser.add_argument("--steps", type=int, default=0, help="steps to run; 0: until SIGTERM")
    parser.add_argument("--rate-hz", type=float, default=None, help="control rate; 0: unthrottled")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arm's episodes")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with PolicyClient(args.target) as client:
        robot = SimRobotClient(
            client, robot_id=args.robot_id, control_rate_hz=args.rate_hz, seed=args.seed
        )
        try:
            stats = robot.run(args.steps or FOREVER_STEPS)
        except Stopped as why:
            print(f"{args.robot_id}: stopped by {why}", flush=True)
            return 0
    print(
        f"{args.robot_id}: steps={stats.steps} episodes={stats.episodes} "
        f"rate={stats.steps_per_s:.1f}/s p50={stats.round_trip_p50_s * 1e3:.2f}ms "
        f"p99={stats.round_trip_p99_s * 1e3:.2f}ms watchdog_misses={stats.watchdog_misses} "
        f"interventions={stats.interventions}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
