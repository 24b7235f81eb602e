"""Configuration of the serving edge: one pydantic model per component, one YAML file.

``ServerConfig`` nests the batcher, admission, validation and security models, so a
single YAML file (``tether serve --config FILE``) configures the whole edge and the
CLI reads its defaults from the same fields. Models are frozen and refuse unknown
keys, so a typo in a YAML file fails at startup instead of being ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tether.config import describe_validation_error
from tether.errors import ConfigError
from tether.safety.for_spec import SupervisionConfig

_FROZEN = ConfigDict(extra="forbid", frozen=True)

# tether's ports sit together (50051 PolicyService, 50052 AdminService, 50053 metrics),
# away from Prometheus's own 9090.
DEFAULT_METRICS_PORT = 50053


class BatcherConfig(BaseModel):
    """How requests from all clients are coalesced into one forward pass."""

    model_config = _FROZEN

    max_batch_size: int = Field(
        default=64, description="Most requests computed in one forward pass (requests)"
    )
    batch_timeout_s: float = Field(
        default=0.0,
        description="Longest a request waits for others to join its batch; 0 batches only "
        "what queued while the engine was busy (s)",
    )
    execution: Literal["auto", "inline", "thread"] = Field(
        default="auto",
        description="Where a batch runs: on the event loop, in a worker thread, or chosen per "
        "batch from its measured compute time (mode)",
    )
    inline_threshold_s: float = Field(
        default=0.005,
        description="In auto mode, batches expected to compute faster than this run on the "
        "event loop: a thread hand-off, and the GIL the batch's Python shares with the "
        "loop, cost more than the loop gains by reading on meanwhile (s)",
    )
    gather_turns: int = Field(
        default=4,
        ge=0,
        le=64,
        description="With batch_timeout_s 0, under load (several requests queued, or the "
        "last batch had several), turns of the event loop the batcher lets pass before it "
        "takes a batch, while each turn queued more and the batch is not full: the loop "
        "reads the requests already on their way, and the batch grows (turns)",
    )

    @field_validator("max_batch_size")
    @classmethod
    def _batch_size(cls, v: int) -> int:
        if not 1 <= v <= 4096:
            raise ValueError(f"max_batch_size must be between 1 and 4096, got {v}")
        return v

    @field_validator("batch_timeout_s", "inline_threshold_s")
    @classmethod
    def _non_negative(cls, v: float) -> float:
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"must be between 0 and 1 second, got {v}")
        return v


class AdmissionConfig(BaseModel):
    """Limits that refuse work with RESOURCE_EXHAUSTED instead of falling over."""

    model_config = _FROZEN

    rate_limit_hz: float | None = Field(
        default=None,
        description="Sustained requests per second per client; None derives it from the "
        "robot's control rate times rate_headroom, 0 disables the limit (Hz)",
    )
    rate_headroom: float = Field(
        default=2.0, description="Multiple of the robot's control rate allowed per client (ratio)"
    )
    burst_s: float = Field(
        default=0.5,
        description="Token bucket depth, as seconds of traffic at the sustained rate (s)",
    )
    max_queued_requests: int = Field(
        default=1024,
        description="Requests waiting for a batch before new ones are refused (requests)",
    )
    max_sessions: int = Field(
        default=1024, description="Control sessions the server holds at once (sessions)"
    )
    max_sessions_per_client: int = Field(
        default=256,
        description="Control sessions one client (a peer host) holds at once (sessions)",
    )
    allow_duplicate_sessions: bool = Field(
        default=False,
        description="Admit a second live session under a robot id that has one; off, it is "
        "refused ALREADY_EXISTS, so no client can feed another robot's session state (flag)",
    )
    max_rss_bytes: int = Field(
        default=0,
        description="Refuse new sessions while process RSS exceeds this; 0 disables (bytes)",
    )
    memory_step_headroom: float = Field(
        default=1.25,
        description="Steps of open sessions (and GetAction) are refused only above "
        "max_rss_bytes times this, so new sessions are refused first (ratio)",
    )
    max_cuda_memory_fraction: float = Field(
        default=0.95,
        description="Refuse requests while allocated CUDA memory exceeds this fraction of the "
        "device total; ignored on CPU (ratio)",
    )
    memory_check_interval_s: float = Field(
        default=0.1, description="How often the memory guard re-reads memory usage (s)"
    )

    @field_validator("max_queued_requests")
    @classmethod
    def _queue(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"max_queued_requests must be at least 1, got {v}")
        return v

    @field_validator("max_sessions", "max_sessions_per_client")
    @classmethod
    def _sessions(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"must be at least 1 session, got {v}")
        return v

    @field_validator("memory_step_headroom")
    @classmethod
    def _headroom(cls, v: float) -> float:
        if not v >= 1.0:
            raise ValueError(f"memory_step_headroom must be at least 1, got {v}")
        return v

    @field_validator("rate_headroom", "burst_s")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"must be positive, got {v}")
        return v

    @field_validator("max_cuda_memory_fraction")
    @classmethod
    def _fraction(cls, v: float) -> float:
        if not 0.0 < v <= 1.0:
            raise ValueError(f"max_cuda_memory_fraction must be in (0, 1], got {v}")
        return v


class ValidationConfig(BaseModel):
    """What a well-formed request looks like beyond its shape."""

    model_config = _FROZEN

    max_abs_observation: float = Field(
        default=1e6, description="Largest magnitude accepted in any observation entry (obs units)"
    )
    max_abs_reward: float = Field(
        default=1e9, description="Largest magnitude accepted for a reward"
    )
    max_id_length: int = Field(
        default=256, description="Longest client, robot or episode id accepted (characters)"
    )


class SecurityConfig(BaseModel):
    """TLS and bearer-token authentication; both off by default for a local robot."""

    model_config = _FROZEN

    tls_cert_file: Path | None = Field(default=None, description="PEM server certificate (path)")
    tls_key_file: Path | None = Field(default=None, description="PEM server private key (path)")
    bearer_token_file: Path | None = Field(
        default=None,
        description="File holding the token clients must send as 'authorization: Bearer "
        "<token>'; health checks stay open (path)",
    )


class KServeConfig(BaseModel):
    """The KServe v2 / Triton ``inference.GRPCInferenceService`` on the gRPC port."""

    model_config = _FROZEN

    enabled: bool = Field(
        default=True, description="Serve GRPCInferenceService beside tether.v1 (switch)"
    )
    model_name: str = Field(
        default="tether",
        description="Model name clients address; the live version's name is accepted too (name)",
    )


class OpenpiConfig(BaseModel):
    """The openpi websocket protocol (``openpi_client.WebsocketClientPolicy``) on its own port."""

    model_config = _FROZEN

    port: int | None = Field(
        default=None, description="Websocket port; 0 picks a free one, None disables (port)"
    )
    host: str = Field(default="127.0.0.1", description="Address the websocket server binds (host)")
    observation_keys: dict[str, str] = Field(
        default_factory=lambda: {"observation/state": "observation"},
        description="openpi observation key -> the policy input it feeds (mapping)",
    )
    ignored_keys: tuple[str, ...] = Field(
        default=("prompt",),
        description="Observation keys accepted and not used; any other unmapped key is "
        "refused (keys)",
    )
    max_message_bytes: int = Field(
        default=1 << 20,
        description="Largest websocket message accepted; a larger one closes the connection "
        "with 1009 (bytes)",
    )
    deterministic: bool = Field(
        default=True, description="Serve the policy's mean action rather than a sample (switch)"
    )

    @field_validator("port")
    @classmethod
    def _port(cls, v: int | None) -> int | None:
        if v is not None and not 0 <= v <= 65535:
            raise ValueError(f"openpi port must be between 0 and 65535, got {v}")
        return v

    @field_validator("max_message_bytes")
    @classmethod
    def _message_bytes(cls, v: int) -> int:
        if not 1024 <= v <= 256 * 1024 * 1024:
            raise ValueError(f"max_message_bytes must be between 1024 and 268435456, got {v}")
        return v

    @field_validator("observation_keys")
    @classmethod
    def _keys(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("observation_keys must map at least one openpi key to an input")
        return v


class ServerConfig(BaseModel):
    """The whole serving edge."""

    model_config = _FROZEN

    host: str = Field(default="127.0.0.1", description="Address the gRPC server binds (host)")
    port: int = Field(default=50051, description="gRPC port; 0 picks a free one (port)")
    metrics_port: int | None = Field(
        default=DEFAULT_METRICS_PORT,
        description="Prometheus HTTP port; 0 picks a free one, None disables (port)",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="Address the metrics server binds (host)"
    )
    grace_s: float = Field(
        default=5.0, description="On shutdown, how long in-flight requests may finish (s)"
    )
    max_message_bytes: int = Field(
        default=65536,
        description="Largest gRPC message the server receives or sends; larger ones are "
        "refused by the transport (bytes)",
    )
    keepalive_time_s: float = Field(
        default=10.0, description="Interval of server keepalive pings on idle connections (s)"
    )
    control_step_deadline_s: float | None = Field(
        default=None,
        description="A Control step still queued this long after arrival is answered "
        "DEADLINE_EXCEEDED instead of computed; None derives it from the robot's control "
        "period times stale_control_periods, 0 disables (s)",
    )
    stale_control_periods: float = Field(
        default=5.0, description="Control periods after which a queued step is stale (periods)"
    )
    busy_poll_us: float = Field(
        default=1000.0,
        ge=0.0,
        le=100_000.0,
        description="While a lone robot's requests arrive within this long of each other, the "
        "server's event loop keeps polling for this long after each one instead of sleeping, "
        "keeping its core awake and its caches warm for the next message "
        "(tether.serving.busy_poll, on either event loop; each turn yields the core to any "
        "thread ready for it). Several robots (Control sessions, openpi connections), or "
        "requests further apart (a robot at 50 Hz), never spin. 0 turns it off (µs)",
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto",
        description="The serving process's event loop (tether.serving.event_loop): auto runs "
        "uvloop where it is installed and asyncio's loop otherwise; uvloop insists on it; "
        "asyncio runs Python's own loop",
    )
    batcher: BatcherConfig = Field(default_factory=BatcherConfig, description="Batching")
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig, description="Admission")
    validation: ValidationConfig = Field(default_factory=ValidationConfig, description="Validation")
    security: SecurityConfig = Field(default_factory=SecurityConfig, description="TLS and auth")
    kserve: KServeConfig = Field(default_factory=KServeConfig, description="KServe v2 gRPC")
    openpi: OpenpiConfig = Field(default_factory=OpenpiConfig, description="openpi websocket")
    supervision: SupervisionConfig = Field(
        default_factory=SupervisionConfig, description="Safety supervisor"
    )

    @field_validator("port")
    @classmethod
    def _port(cls, v: int) -> int:
        if not 0 <= v <= 65535:
            raise ValueError(f"port must be between 0 and 65535, got {v}")
        return v

    @field_validator("metrics_port")
    @classmethod
    def _metrics_port(cls, v: int | None) -> int | None:
        if v is not None and not 0 <= v <= 65535:
            raise ValueError(f"metrics_port must be between 0 and 65535, got {v}")
        return v

    @field_validator("max_message_bytes")
    @classmethod
    def _message_bytes(cls, v: int) -> int:
        if not 1024 <= v <= 64 * 1024 * 1024:
            raise ValueError(f"max_message_bytes must be between 1024 and 67108864, got {v}")
        return v

    def step_deadline(self, control_period_s: float, now: float) -> float | None:
        """When a control step arriving at ``now`` (monotonic s) turns stale: after
        ``control_step_deadline_s``, or ``stale_control_periods`` control periods when that
        is None; None when 0 disables it."""
        limit = self.control_step_deadline_s
        if limit is None:
            limit = self.stale_control_periods * control_period_s
        return now + limit if limit > 0 else None

    @classmethod
    def from_yaml(cls, path: Path) -> ServerConfig:
        """Load a config file; every error names the file and the field."""
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read server config {path}: {exc}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"server config {path} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(
                f"server config {path} must be a mapping of fields, got {type(data).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(
                f"server config {path} is invalid:\n  {describe_validation_error(exc, cls)}"
            ) from None
