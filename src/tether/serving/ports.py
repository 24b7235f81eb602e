"""Binding a server's port exclusively, and saying which flag to change when it is taken.

gRPC sets SO_REUSEPORT by default on Linux, so a second server on a port already in use
starts silently and takes a share of the first one's clients; every tether gRPC server is
built with :data:`EXCLUSIVE_PORT`. :func:`check_port_free` is asked first, so a clash is
answered in one line naming the port and the flag, before gRPC's core logs its own.
"""

from __future__ import annotations

import errno
import socket

from tether.serving.errors import ServerSetupError

EXCLUSIVE_PORT: tuple[tuple[str, int], ...] = (("grpc.so_reuseport", 0),)


def check_port_free(host: str, port: int, flag: str) -> None:
    """Raise :class:`ServerSetupError` if ``host:port`` cannot be bound now (0 always can)."""
    if port == 0:
        return
    bare = host.strip("[]")
    try:
        infos = socket.getaddrinfo(bare, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ServerSetupError(
            f"cannot bind {host}:{port}: {host!r} does not resolve ({exc.strerror})"
        ) from exc
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(address)
        except OSError as exc:
            why = (
                "the port is in use"
                if exc.errno == errno.EADDRINUSE
                else "the host is not an address of this machine"
                if exc.errno == errno.EADDRNOTAVAIL
                else exc.strerror or str(exc)
            )
            raise ServerSetupError(
                f"cannot bind {host}:{port}: {why}; choose another {flag} (0 picks a free one)"
            ) from exc
