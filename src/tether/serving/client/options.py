"""How a client connects: target, deadlines, retries, keepalive, load balancing, TLS, token.

Keyword-only and validated, so an ambiguous setting (a token without TLS to a remote
host is allowed, but a root certificate path that does not exist is not) fails at
construction. The retry policy is gRPC's own (service config), applied to UNAVAILABLE
only: a request refused for a reason (INVALID_ARGUMENT, RESOURCE_EXHAUSTED...) is not
repeated blindly.

Discovery is gRPC's too: a ``dns:`` target (``dns:///tether.robots.svc:50051``, a
Kubernetes headless Service) resolves to every ready server, and the channel spreads
calls over them round-robin, watching each one's ``grpc.health.v1`` status, so a server
that stops answering SERVING, or goes away, gets no new calls or sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether.v1 import policy_pb2 as pb

_SERVICE = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name

LoadBalancing = Literal["auto", "pick_first", "round_robin"]


def is_dns_target(target: str) -> bool:
    """Whether ``target`` names gRPC's DNS resolver explicitly (``dns:///host:port``)."""
    return target.startswith("dns:")


class ClientOptions(BaseModel):
    """Connection settings of a policy client."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(
        default=1.0, description="Deadline of every unary call (GetAction, Describe) (s)"
    )
    open_timeout_s: float = Field(
        default=5.0, description="Longest wait for a Control session to be accepted (s)"
    )
    retry_attempts: int = Field(
        default=4, description="Attempts of a call that fails UNAVAILABLE, first one included"
    )
    retry_initial_backoff_s: float = Field(
        default=0.05, description="Backoff before the first retry; doubles each time (s)"
    )
    retry_max_backoff_s: float = Field(default=1.0, description="Longest backoff (s)")
    keepalive_time_s: float = Field(
        default=10.0, description="Interval of keepalive pings, to notice a dead link (s)"
    )
    keepalive_timeout_s: float = Field(
        default=5.0, description="A keepalive ping unanswered this long closes the link (s)"
    )
    tls_root_cert_file: Path | None = Field(
        default=None, description="PEM root certificate to verify the server; None: plaintext"
    )
    tls_server_name: str | None = Field(
        default=None, description="Override of the name checked in the server certificate"
    )
    bearer_token: str | None = Field(
        default=None, description="Token sent as 'authorization: Bearer <token>'"
    )
    max_message_bytes: int = Field(
        default=65536, description="Largest message sent or received (bytes)"
    )
    load_balancing: LoadBalancing = Field(
        default="auto",
        description="How calls spread over the addresses the target resolves to: "
        "'round_robin' (every ready server; a robot fails over), 'pick_first' (one server), "
        "'auto' (round_robin for a dns: target, pick_first otherwise)",
    )
    health_check_service: str | None = Field(
        default=_SERVICE,
        description="grpc.health.v1 service each server is watched on under round_robin: "
        "one not SERVING gets no new calls; None: no client-side health checking",
    )
    reopen_sessions: bool = Field(
        default=True,
        description="Reopen a Control session whose server went away (UNAVAILABLE, or the "
        "server ended it) at the next step, on whichever ready server the channel picks; "
        "attempts are spaced by the retry backoff (flag)",
    )

    @field_validator("timeout_s", "open_timeout_s", "keepalive_time_s", "keepalive_timeout_s")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"must be a positive number of seconds, got {v}")
        return v

    @field_validator("retry_attempts")
    @classmethod
    def _attempts(cls, v: int) -> int:
        if not 1 <= v <= 5:  # gRPC caps maxAttempts at 5
            raise ValueError(f"retry_attempts must be between 1 and 5, got {v}")
        return v

    @field_validator("tls_root_cert_file")
    @classmethod
    def _exists(cls, v: Path | None) -> Path | None:
        if v is not None and not Path(v).is_file():
            raise ValueError(f"tls_root_cert_file {v} does not exist")
        return v

    def balancing_for(self, target: str) -> Literal["pick_first", "round_robin"]:
        """The load-balancing policy a channel to ``target`` uses (resolves 'auto')."""
        if self.load_balancing != "auto":
            return self.load_balancing
        return "round_robin" if is_dns_target(target) else "pick_first"

    def channel_options(self, target: str = "") -> list[tuple[str, int | str]]:
        opts: list[tuple[str, int | str]] = [
            ("grpc.keepalive_time_ms", int(self.keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", self.service_config(target)),
        ]
        if self.tls_server_name:
            opts.append(("grpc.ssl_target_name_override", self.tls_server_name))
        return opts

    def service_config(self, target: str = "") -> str:
        retry = {
            "maxAttempts": self.retry_attempts,
            "initialBackoff": f"{self.retry_initial_backoff_s}s",
            "maxBackoff": f"{self.retry_max_backoff_s}s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }
        config: dict[str, object] = {
            "methodConfig": [
                {
                    "name": [
                        {"service": _SERVICE, "method": "GetAction"},
                        {"service": _SERVICE, "method": "Describe"},
                    ],
                    "retryPolicy": retry,
                }
            ]
        }
        if self.balancing_for(target) == "round_robin":
            config["loadBalancingConfig"] = [{"round_robin": {}}]
            if self.health_check_service is not None:
                # Client-side health checking: the channel watches Health/Watch on each
                # subchannel and picks only those reporting SERVING (a server without
                # the health service counts as healthy).
                config["healthCheckConfig"] = {"serviceName": self.health_check_service}
        return json.dumps(config)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self.bearer_token is None:
            return ()
        return (("authorization", f"Bearer {self.bearer_token}"),)

    def root_certificate(self) -> bytes | None:
        return None if self.tls_root_cert_file is None else self.tls_root_cert_file.read_bytes()
