"""What ``tether report`` can be told, and the one way it fails.

The report reads a finished (or killed) run directory; a missing or torn file is a fact
the report states, never a failure. ``ReportError`` is raised only when there is no run
directory to read at all, or the report cannot be written.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tether.errors import TetherError


class ReportError(TetherError):
    """The run report cannot be made: no run directory, or its output cannot be written."""


class ReportConfig(BaseModel):
    """How the run report summarizes and draws a run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    return_window_episodes: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="episodes in the moving average of a robot's episode return (episodes)",
    )
    post_drift_fraction: float = Field(
        default=0.25,
        gt=0.0,
        le=1.0,
        description="final share of the run whose episodes make the post-drift return (fraction of run time)",
    )
    latency_bins: int = Field(
        default=60, ge=5, le=1000, description="bins of the latency histogram (bins)"
    )
    plot_dpi: int = Field(
        default=110, ge=50, le=400, description="resolution of the PNG plots (dots per inch)"
    )
