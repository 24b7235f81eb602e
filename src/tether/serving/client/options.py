"""How a client connects: target, deadlines, retries, keepalive, TLS and token.

Keyword-only and validated, so an ambiguous setting (a token without TLS to a remote
host is allowed, but a root certificate path that does not exist is not) fails at
construction. The retry policy is gRPC's own (service config), applied to UNAVAILABLE
only: a request refused for a reason (INVALID_ARGUMENT, RESOURCE_EXHAUSTED...) is not
repeated blindly.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether.v1 import policy_pb2 as pb

_SERVICE = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name


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

    def channel_options(self) -> list[tuple[str, int | str]]:
        opts: list[tuple[str, int | str]] = [
            ("grpc.keepalive_time_ms", int(self.keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", self.service_config()),
        ]
        if self.tls_server_name:
            opts.append(("grpc.ssl_target_name_override", self.tls_server_name))
        return opts

    def service_config(self) -> str:
        retry = {
            "maxAttempts": self.retry_attempts,
            "initialBackoff": f"{self.retry_initial_backoff_s}s",
            "maxBackoff": f"{self.retry_max_backoff_s}s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        }
        config = {
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
        return json.dumps(config)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self.bearer_token is None:
            return ()
        return (("authorization", f"Bearer {self.bearer_token}"),)

    def root_certificate(self) -> bytes | None:
        return None if self.tls_root_cert_file is None else self.tls_root_cert_file.read_bytes()
