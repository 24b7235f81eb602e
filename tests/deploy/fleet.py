"""Several real PolicyServers on loopback, one per 127.0.0.x address, all on one port.

That is how a headless Service looks to a client: one name, one port, an address per
ready server. The port is probed free on every address first (bounded tries).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.serving.serving_harness import RunningServer, make_engine, relaxed_limits, server_config
from tether.serving.served_spec import ServedSpec
from tether.serving.server import PolicyServer
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec

ADDRESSES = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


def port_free_on_all(addresses: tuple[str, ...], tries: int = 20) -> int:
    """A TCP port that can be bound on every one of ``addresses`` right now."""
    for _ in range(tries):
        with socket.socket() as first:
            first.bind((addresses[0], 0))
            port = int(first.getsockname()[1])
        try:
            for address in addresses:
                with socket.socket() as probe:
                    probe.bind((address, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all of {addresses} after {tries} tries")


@contextmanager
def fleet(
    bundle: Path, spec: RobotSpec, addresses: tuple[str, ...] = ADDRESSES
) -> Iterator[tuple[int, list[RunningServer]]]:
    """Start one server per address on a shared port; all stopped on exit."""
    port = port_free_on_all(addresses)
    servers: list[RunningServer] = []
    try:
        for address in addresses:
            config = server_config(host=address, port=port, metrics_port=None)
            server = PolicyServer(
                config,
                spec=ServedSpec.from_robot_spec(spec),
                supervisors=SupervisorFactory(spec, limits=relaxed_limits(spec)),
                engine=make_engine(bundle),
            )
            servers.append(RunningServer(server))
        yield port, servers
    finally:
        for running in servers:
            running.stop()
