"""``EngineConfig``: how the inference engine runs (execution path, device, threads, batching)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

Execution = Literal["auto", "eager", "jit", "int8", "numpy", "compiled"]

_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class EngineConfig(BaseModel):
    """Configuration of one :class:`~tether.policy.engine.PolicyEngine`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    execution: Execution = Field(
        default="auto",
        description=(
            "execution path: 'auto' measures the exact candidates at load and keeps the "
            "fastest; or one of 'eager', 'jit', 'int8', 'numpy', 'compiled' (the whole row "
            "in one numba call; cpu, vector bundles) (name)"
        ),
    )
    device: str = Field(
        default="cpu", description="where inference runs: 'cpu', 'cuda' or 'cuda:N' (device)"
    )
    num_threads: int = Field(
        default=1,
        description="torch intra-op threads every forward runs with, whichever thread calls "
        "it; at most the constructing thread's count, 1-256 (threads)",
    )
    max_batch_size: int = Field(
        default=1024, description="largest batch act() accepts, 1-65536 (rows)"
    )
    row_block: int = Field(
        default=8,
        description=(
            "rows per GEMM; every row goes through a GEMM of exactly this many rows, which "
            "makes results independent of batch size, 1-256 (rows)"
        ),
    )
    seed: int | None = Field(
        default=0,
        description="seed of the sampling generator; null seeds from OS entropy (integer)",
    )
    auto_candidates: tuple[Literal["eager", "jit", "int8", "numpy", "compiled"], ...] = Field(
        default=("eager", "jit", "numpy", "compiled"),
        description="paths 'auto' may pick; int8 is opt-in because it is not exact; "
        "compiled is measured on cpu where numba imports (names)",
    )
    auto_tolerance: float = Field(
        default=1e-5,
        description="largest action difference from eager 'auto' accepts (action units)",
    )
    auto_repeats: int = Field(
        default=20,
        description="timed calls per candidate and batch size during 'auto', 1-10000 (calls)",
    )

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not _DEVICE.match(v):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {v!r}")
        return v

    @field_validator("num_threads", "max_batch_size", "row_block", "auto_repeats")
    @classmethod
    def _bounded(cls, v: int, info: ValidationInfo) -> int:
        bounds = {
            "num_threads": (1, 256),
            "max_batch_size": (1, 65536),
            "row_block": (1, 256),
            "auto_repeats": (1, 10000),
        }
        name = info.field_name or ""
        lo, hi = bounds[name]
        if not lo <= v <= hi:
            raise ValueError(f"{name} must be between {lo} and {hi}, got {v}")
        return v

    @field_validator("auto_tolerance")
    @classmethod
    def _tolerance(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"auto_tolerance must be positive, got {v}")
        return v

    @field_validator("auto_candidates")
    @classmethod
    def _candidates(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("auto_candidates must name at least one path, got none")
        return v
