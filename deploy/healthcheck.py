"""The container's health check: exit 0 when the server answers SERVING, 1 otherwise.

``python /etc/tether/healthcheck.py [HOST:PORT] [SERVICE]`` asks ``grpc.health.v1``
for SERVICE (default ``tether.v1.PolicyService``: SERVING only while a verified policy
is live) — the same question Kubernetes' gRPC probes ask. Docker's HEALTHCHECK and
compose's ``depends_on: condition: service_healthy`` use it.
"""

from __future__ import annotations

import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str]) -> int:
    target = argv[1] if len(argv) > 1 else "127.0.0.1:50051"
    service = argv[2] if len(argv) > 2 else "tether.v1.PolicyService"
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2.0)
        except grpc.RpcError as exc:
            print(f"{target}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{target} {service or '(server)'}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
