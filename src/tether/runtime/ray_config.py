"""The keys of ``tether run --backend ray``: where the fleet runs and how it is split (issue 19).

A plain pydantic model with no Ray import, so ``RunConfig`` can carry it (and
``tether config`` document it) on a machine without the ``ray`` extra.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Backend = Literal["embedded", "ray"]


class RayConfig(BaseModel):
    """The Ray backend: the cluster to join, the edge servers, the learner's resources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str | None = Field(
        default=None,
        description="Ray cluster to join ('auto', or host:port of a `ray start --head`); "
        "None starts a local Ray instance sized to this machine (address)",
    )
    edges: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Edge policy servers; robot i talks to edge i mod edges (count)",
    )
    edge_host: str = Field(
        default="127.0.0.1",
        description="Address each edge's gRPC server binds; robots on other machines need "
        "the node's address or 0.0.0.0 (host)",
    )
    learner_gpus: Literal["auto", "none", "one"] = Field(
        default="auto",
        description="'auto' gives the learner actor one GPU when the cluster has one; 'one' "
        "requires it; 'none' keeps it on CPU",
    )
    replay_capacity: int = Field(
        default=65536,
        ge=1,
        description="Transitions the replay actor holds for the learner before it drops "
        "the oldest (transitions)",
    )
    ship_batch: int = Field(
        default=256,
        ge=1,
        description="Transitions an edge sends to the replay actor in one call (transitions)",
    )
    ship_in_flight: int = Field(
        default=4,
        ge=1,
        description="Batches an edge may have on their way to the replay actor; beyond that "
        "new transitions wait in the edge's buffer (batches)",
    )
    edge_buffer: int = Field(
        default=8192,
        ge=1,
        description="Transitions an edge keeps waiting for the replay actor before it "
        "drops new ones, counted (transitions)",
    )
    sync_interval_s: float = Field(
        default=0.1,
        gt=0.0,
        description="How often an edge and the learner ask the version service what is live (s)",
    )
    max_restarts: int = Field(
        default=5,
        ge=0,
        description="Restarts Ray gives a dead edge or learner actor (restarts)",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("address must be 'auto', host:port or null, got an empty string")
        return value
