"""A DNS server on loopback that answers one name with several A records, for tests.

gRPC's ``dns://AUTHORITY/name:port`` target asks the DNS server at AUTHORITY, so a
client test can resolve a fleet name the way a Kubernetes headless Service resolves:
one A record per ready server. Other names and record types get an empty answer. It
runs on a thread with a stop flag and a short socket timeout, so it ends by itself.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

from dnslib import QTYPE, RR, A, DNSRecord


class FleetDns:
    """Answers ``name`` with ``addresses`` (A records) on 127.0.0.1, a free UDP port."""

    def __init__(self, name: str, addresses: tuple[str, ...], ttl_s: int = 1) -> None:
        self.name = name.rstrip(".") + "."
        self.addresses = addresses
        self.ttl_s = ttl_s
        self.queries: list[tuple[str, str]] = []  # (name, record type) in arrival order
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fleet-dns", daemon=True)

    @property
    def authority(self) -> str:
        host, port = self._sock.getsockname()
        return f"{host}:{port}"

    def target(self, port: int) -> str:
        """The gRPC target that resolves ``name`` through this server."""
        return f"dns://{self.authority}/{self.name.rstrip('.')}:{port}"

    def __enter__(self) -> FleetDns:
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            query = DNSRecord.parse(data)
            reply = query.reply()
            qname, qtype = str(query.q.qname), QTYPE[query.q.qtype]
            self.queries.append((qname, qtype))
            if qname.lower() == self.name.lower() and qtype == "A":
                for address in self.addresses:
                    reply.add_answer(RR(qname, QTYPE.A, rdata=A(address), ttl=self.ttl_s))
            self._sock.sendto(reply.pack(), peer)
