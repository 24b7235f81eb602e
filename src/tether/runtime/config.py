"""The one configuration of ``tether run``: the fleet, the run, and every component's own model.

``RunConfig`` composes the component configs (server, learner, gate, safety, data,
dashboard) rather than copying their fields, so a YAML file written for ``tether run``
uses exactly the sections each component documents, and ``tether config`` prints every
field with its default, unit and help line from the same models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tether.config import describe_validation_error
from tether.data.channel import ChannelConfig
from tether.data.log import ExperienceLogConfig
from tether.data.recorder import RecorderConfig
from tether.errors import ConfigError
from tether.learning.learner_config import LearnerConfig
from tether.policy import kernel as policy_kernel
from tether.policy.config import EngineConfig
from tether.policy.networks import ActorArchitecture
from tether.runtime.ray_config import Backend, RayConfig
from tether.safety.degradation_config import DegradationConfig
from tether.serving.config import ServerConfig
from tether.sim.drift import DriftSchedule
from tether.versions.facade import VersionsConfig
from tether.versions.rollback import RollbackCheckConfig, RollbackConfig
from tether.versions.server_gate import ServerGateConfig
from tether.versions.stages.canary import CanaryConfig

_FROZEN = ConfigDict(extra="forbid", frozen=True)

# The serving defaults judge a canary on 30 task pairs at a 20 % share: 150 episodes of a
# learning robot, 10 minutes at 50 Hz, longer than the whole default run. With one
# learning robot every episode goes to the experiment while a canary runs (half to the
# canary, half to its control, live on the same tasks: the robot runs each task twice in
# a row), and the canary is judged on 4 pairs (8 episodes, about 35 s), so that the gate
# can judge a candidate learned after the drift and the next ones before the run's last
# quarter. The learner publishes again as soon as a verdict lands, so the learning robot
# serves the experiment nearly all the time: the canary and its control act at the live
# limits (tightening 1.0; the serving default 0.9 shrinks each joint's usable range by a
# tenth, which put a target near the base's range out of reach of the learning robot for
# the whole run while the baseline kept it). The supervisor still checks every canary
# action against those limits. A harm test on 4 pairs catches a clearly harmful
# candidate (negated actions: every pair far worse in final distance) but not a subtle
# regression: the rollback monitor is what catches that. It watches live's episodes, its
# canary control episodes among them, and before it rolls back it serves the
# last-known-good beside live on 6 to 24 task pairs (every task episode of the learning
# robot while the check runs), so that the drift, which hurts every version alike, is
# not taken for a regression.
_RUN_VERSIONS = VersionsConfig(
    promotion=ServerGateConfig(canary=CanaryConfig(fraction=0.5, pairs=4, safety_tightening=1.0)),
    rollback=RollbackConfig(
        window_episodes=15,
        min_episodes=8,
        sustain_episodes=3,
        check=RollbackCheckConfig(pairs=6, max_pairs=24, fraction=0.5),
    ),
)


class FleetConfig(BaseModel):
    """The simulated robots ``tether run`` drives."""

    model_config = _FROZEN

    robots: int = Field(
        default=2, ge=1, le=32, description="Simulated robots, one process each (count)"
    )
    baseline: bool = Field(
        default=True,
        description="Pin robot 0 to the initial version as a frozen, non-learning baseline (flag)",
    )
    control_rate_hz: float = Field(
        default=50.0, gt=0.0, le=1000.0, description="Control rate of each robot in real time (Hz)"
    )
    deterministic: bool | None = Field(
        default=None,
        description="Robots ask for the mean action instead of a sample (flag); unset: the "
        "mean under the hindsight learner, which learns from the error at rest and needs no "
        "exploration (a sample only costs precision), a sample under SAC and PPO, which "
        "explore",
    )
    seed: int = Field(
        default=0, ge=0, description="Seed of the first robot; robot i uses seed+i (1)"
    )
    tasks: int = Field(
        default=16,
        ge=0,
        description="Episodes cycle through this many fixed tasks (start pose and target), the "
        "same list on every robot, so returns before and after the drift, and of the learning "
        "robots and the baseline, compare on the same tasks; 0 draws a fresh task every "
        "episode. 16 tasks (each run twice) take a robot about 128 s: the last quarter sees "
        "half of them, so neither role is judged on a handful of easy or hard ones (tasks)",
    )

    def task_seeds(self) -> tuple[int, ...]:
        """The episode seeds of the task cycle (empty: fresh draws)."""
        return tuple(10_000 + self.seed + k for k in range(self.tasks))


class DriftConfig(BaseModel):
    """When the robots' dynamics drift, as fractions of the run (so short runs drift too)."""

    model_config = _FROZEN

    preset: Literal["demo", "none"] = Field(
        default="demo",
        description="'demo': gain sags to 0.6, friction x4, +0.5 kg payload, one step of delay "
        "(tether.sim.DriftSchedule.demo); 'none': nominal dynamics throughout",
    )
    start_fraction: float = Field(
        default=0.2, ge=0.0, lt=1.0, description="Drift starts this far into the run (fraction)"
    )
    ramp_fraction: float = Field(
        default=0.1,
        gt=0.0,
        lt=1.0,
        description="The drift ramps over this part of the run (fraction)",
    )

    def schedule(self, total_steps: int) -> DriftSchedule:
        """The drift for a run of ``total_steps`` drift-clock steps."""
        if self.preset == "none":
            return DriftSchedule()
        start = int(self.start_fraction * total_steps)
        ramp = max(2, int(self.ramp_fraction * total_steps))
        return DriftSchedule.demo(start_step=start, ramp_steps=ramp)


class RunConfig(BaseModel):
    """Everything ``tether run`` needs; every section defaults to a working demo."""

    model_config = _FROZEN

    duration_s: float = Field(default=300.0, gt=0.0, description="How long the run lasts (s)")
    fast: bool = Field(
        default=False,
        description="Robots run unthrottled instead of at control_rate_hz (tests, CI) (flag)",
    )
    out_dir: Path = Field(default=Path("runs"), description="Where run directories are made (path)")
    bundle: Path | None = Field(
        default=None,
        description="Bundle to start from; None uses the shipped pretrained arm (path)",
    )
    snapshot_interval_s: float = Field(
        default=2.0, gt=0.0, description="Time between system snapshots in the run log (s)"
    )
    dashboard: Literal["auto", "live", "plain", "off"] = Field(
        default="auto",
        description="Terminal dashboard: 'auto' is live on a terminal and plain log lines otherwise",
    )
    backend: Backend = Field(
        default="embedded",
        description="'embedded': everything on this machine as processes; 'ray': edge "
        "servers, learner, replay and version service as Ray actors (the `ray` extra)",
    )
    ray: RayConfig = Field(default_factory=RayConfig, description="Ray backend (backend: ray)")
    fleet: FleetConfig = Field(default_factory=FleetConfig, description="Simulated robots")
    drift: DriftConfig = Field(default_factory=DriftConfig, description="Dynamics drift")
    server: ServerConfig = Field(
        default_factory=lambda: ServerConfig(port=0, metrics_port=0),
        description="gRPC server (tether serve's config)",
    )
    versions: VersionsConfig = Field(
        default_factory=lambda: _RUN_VERSIONS,
        description="Registry, server-side gate and rollback (canary and rollback windows "
        "sized for the default fleet)",
    )
    learner: LearnerConfig = Field(default_factory=LearnerConfig, description="Learner process")
    degradation: DegradationConfig = Field(
        default_factory=DegradationConfig, description="Degradation levels and thresholds"
    )
    recorder: RecorderConfig = Field(default_factory=RecorderConfig, description="Step recorder")
    experience_log: ExperienceLogConfig = Field(
        default_factory=ExperienceLogConfig, description="Experience log on disk"
    )
    channel: ChannelConfig = Field(
        default_factory=ChannelConfig, description="Server-to-learner transition channel"
    )

    @classmethod
    def from_yaml(cls, path: Path, **overrides: Any) -> RunConfig:
        """Load ``path``; ``overrides`` (CLI options that were given) win over the file."""
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read run config {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"run config {path} must be a mapping, got {type(raw).__name__}")
        return cls.build(raw, **overrides)

    @classmethod
    def build(cls, raw: dict[str, Any] | None = None, **overrides: Any) -> RunConfig:
        data = dict(raw or {})
        fleet = dict(data.pop("fleet", {}) or {})
        if "robots" in overrides:  # the CLI options that live in a section
            fleet["robots"] = overrides.pop("robots")
        ray = dict(data.pop("ray", {}) or {})
        if "ray_address" in overrides:
            ray["address"] = overrides.pop("ray_address")
        if "algorithm" in overrides:
            learner = dict(data.pop("learner", {}) or {})
            learner["algorithm"] = overrides.pop("algorithm")
            data["learner"] = learner
        data.update(overrides)
        data["fleet"] = fleet
        data["ray"] = ray
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(
                f"invalid run config:\n  {describe_validation_error(exc, cls)}"
            ) from None

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def served_server(self) -> ServerConfig:
        """The server the robots talk to; with ``fast`` the per-robot rate limit is off,
        because unthrottled robots step many times faster than their declared rate."""
        if not self.fast:
            return self.server
        admission = self.server.admission.model_copy(update={"rate_limit_hz": 0.0})
        return self.server.model_copy(update={"admission": admission})

    def robots_deterministic(self) -> bool:
        """Whether the robots ask for the mean action: ``fleet.deterministic`` when set,
        else only under a learner that does not explore (hindsight)."""
        if self.fleet.deterministic is not None:
            return self.fleet.deterministic
        return self.learner.algorithm == "hindsight"

    def served_engine(self, arch: ActorArchitecture) -> EngineConfig:
        """Every engine a run builds for ``arch`` (the bundle's, each candidate's): a fixed
        path, because "auto" would time every execution path on each candidate, on the
        serving cores. The compiled row path where it can run (an ``mlp_gaussian`` actor,
        numba importable), else eager."""
        compiled = arch.kind == "mlp_gaussian" and policy_kernel.AVAILABLE
        return EngineConfig.model_validate(
            {
                "max_batch_size": self.server.batcher.max_batch_size,
                "execution": "compiled" if compiled else "eager",
            }
        )


def config_reference() -> str:
    """Markdown reference of every RunConfig field: YAML path, default and help line.

    docs/configuration.md is this text (a test keeps them equal), so the reference is
    generated from the models and cannot drift from them.
    """
    lines = [
        "# Configuration reference",
        "",
        "Generated by `tether config --markdown` from the config models; do not edit by hand.",
        "`tether run --config FILE` reads a YAML file with any subset of these keys (nested",
        "sections as YAML mappings); `tether config` prints the full default file.",
        "",
        "| key | default | meaning |",
        "|---|---|---|",
    ]
    _describe(RunConfig, RunConfig(), "", lines)
    return "\n".join(lines) + "\n"


def _describe(model: type[BaseModel], value: BaseModel, prefix: str, lines: list[str]) -> None:
    dumped = value.model_dump(mode="json")
    for name, field in model.model_fields.items():
        current = getattr(value, name)
        key = f"{prefix}{name}"
        if isinstance(current, BaseModel):
            lines.append(f"| `{key}` | (section) | {_cell(field.description or '')} |")
            _describe(type(current), current, f"{key}.", lines)
            continue
        default = json.dumps(dumped[name])
        lines.append(f"| `{key}` | `{_cell(default)}` | {_cell(field.description or '')} |")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
