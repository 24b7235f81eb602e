"""The numbers a run is judged by, as one typed ``RunSummary``.

Per role (``learning`` robots follow the live version, the ``baseline`` is pinned to the
first one): the pre-drift return (mean episode return before the first ``drift`` event),
the post-drift return (mean over the episodes that end in the last
``post_drift_fraction`` of the run, and after the first drift), their ratio, success
rates, interventions, and the violations and contacts MuJoCo measured (a safe run has 0).
Plus every promotion, rejection and rollback with its reason.

Invariant: a number that the run's data cannot support is ``None`` with a line in
``notes`` saying why, never a made-up 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tether.runtime.degradation_view import level_style
from tether.runtime.records import FLEET_FILE, EpisodeRecord, RunEvent
from tether.runtime.report_config import ReportConfig, ReportError
from tether.runtime.report_data import RunData, load_run
from tether.runtime.report_stats import mean_and_error, ratio_interval, wilson_interval

GATE_EVENT_KINDS = ("promotion", "rejection", "rollback", "rollback_check")


@dataclass(frozen=True)
class RoleSummary:
    """One role's episodes (all its robots together), before and after the drift."""

    role: str
    robots: tuple[str, ...]
    episodes: int
    pre_drift_episodes: int
    post_drift_episodes: int
    pre_drift_return: float | None
    post_drift_return: float | None
    success_rate: float | None
    pre_drift_success_rate: float | None
    post_drift_success_rate: float | None
    interventions: int
    backups: int
    violations: int
    contacts: int
    # How sure the success figures are (95 %, see report_stats), and the episodes' final
    # distance to the target (mean, standard error), before the drift and at the end.
    pre_drift_successes: int = 0
    post_drift_successes: int = 0
    pre_drift_success_ci: tuple[float, float] | None = None
    post_drift_success_ci: tuple[float, float] | None = None
    success_kept: tuple[float, float, float] | None = None  # post/pre success: ratio, low, high
    pre_drift_final_distance_m: tuple[float, float] | None = None
    post_drift_final_distance_m: tuple[float, float] | None = None


@dataclass(frozen=True)
class GateEvent:
    """A promotion, rejection or rollback, with the reason the system gave and the numbers
    behind it (the event's ``details`` other than ``stage``, as text)."""

    t_s: float
    kind: str
    version: int | None
    reason: str
    stage: str | None
    numbers: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RunSummary:
    """What ``tether report`` tables and what acceptance tests assert on."""

    run_dir: Path
    start_s: float
    end_s: float
    first_drift_s: float | None
    drift_times_s: tuple[float, ...]
    post_drift_from_s: float
    roles: tuple[RoleSummary, ...]
    promotions: tuple[GateEvent, ...]
    rejections: tuple[GateEvent, ...]
    rollbacks: tuple[GateEvent, ...]
    checks: tuple[GateEvent, ...]  # the rollback monitor's checks that reached a verdict
    degradation_transitions: int
    worst_degradation_level: str | None
    final_live_version: int | None
    latency_samples: int
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    missing: tuple[str, ...]
    unreadable: tuple[str, ...]
    notes: tuple[str, ...]
    interrupted_by: str | None = None  # the signal that stopped the run early, if one did
    backend: str = "embedded"  # "ray" when fleet.json says so
    actors: tuple[str, ...] = ()  # where each actor ran (the Ray backend), one line each

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def violations(self) -> int:
        """Joint-limit violations MuJoCo measured, all robots together."""
        return sum(r.violations for r in self.roles)

    @property
    def contacts(self) -> int:
        """Obstacle contacts MuJoCo measured, all robots together."""
        return sum(r.contacts for r in self.roles)

    def role(self, name: str) -> RoleSummary:
        """The summary of role ``name``; raises ``ReportError`` if the run had no such robots."""
        for summary in self.roles:
            if summary.role == name:
                return summary
        found = ", ".join(r.role for r in self.roles) or "no episodes at all"
        raise ReportError(
            f"role {name!r}: expected episodes of that role in {self.run_dir}/episodes.jsonl, "
            f"found {found}; check the run's robot roles or that it ran long enough"
        )


def summarize_run(run_dir: Path, config: ReportConfig | None = None) -> RunSummary:
    """Read ``run_dir`` and summarize it (see the module docstring for each number)."""
    return summarize(load_run(run_dir), config or ReportConfig())


def _placement(run_dir: Path) -> tuple[str, tuple[str, ...]]:
    """The backend and where each actor ran, from ``fleet.json`` (the embedded backend
    writes none: one machine, the server here and the learner in its own process)."""
    try:
        doc = json.loads((run_dir / FLEET_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "embedded", ()
    except (OSError, ValueError):
        return "ray", (f"{FLEET_FILE} unreadable",)
    actors = tuple(
        f"{a.get('name')} ({a.get('role')}) on node {a.get('node_ip') or a.get('node_id')}, "
        f"pid {a.get('pid')}"
        for a in doc.get("actors", [])
        if isinstance(a, dict)
    )
    return f"{doc.get('backend', 'ray')} ({doc.get('ray_address', 'local')})", actors


def summarize(data: RunData, config: ReportConfig) -> RunSummary:
    """Summarize already loaded run data (``build_report`` loads once for summary and plots)."""
    notes: list[str] = []
    drifts = data.drift_times_s
    first_drift = drifts[0] if drifts else None
    if first_drift is None:
        notes.append("no drift event in events.jsonl: pre-drift return and ratio undefined")
    start, end = data.start_s, data.end_s
    post_from = start + (1.0 - config.post_drift_fraction) * (end - start)
    if first_drift is not None and first_drift > post_from:
        notes.append(
            f"the first drift ({first_drift:.1f} s) is inside the final "
            f"{config.post_drift_fraction:.0%} of the run: post-drift uses only episodes after it"
        )
        post_from = first_drift
    roles = tuple(
        _role_summary(
            role, [e for e in data.episodes if e.role == role], first_drift, post_from, notes
        )
        for role in sorted({e.role for e in data.episodes}, key=role_order)
    )
    gate = [e for e in data.events if e.kind in GATE_EVENT_KINDS]
    levels = [s.degradation_level for s in data.snapshots] + _degradation_targets(data.events)
    latency = data.latency_ms
    backend, actors = _placement(data.run_dir)
    return RunSummary(
        run_dir=data.run_dir,
        backend=backend,
        actors=actors,
        start_s=start,
        end_s=end,
        first_drift_s=first_drift,
        drift_times_s=drifts,
        post_drift_from_s=post_from,
        roles=roles,
        promotions=_gate_events(gate, "promotion"),
        rejections=_gate_events(gate, "rejection"),
        rollbacks=_gate_events(gate, "rollback"),
        checks=_gate_events(gate, "rollback_check"),
        degradation_transitions=sum(1 for e in data.events if e.kind == "degradation"),
        worst_degradation_level=max(levels, key=lambda n: level_style(n).rank) if levels else None,
        final_live_version=data.snapshots[-1].live_version if data.snapshots else None,
        latency_samples=int(latency.size),
        latency_p50_ms=float(np.percentile(latency, 50)) if latency.size else None,
        latency_p99_ms=float(np.percentile(latency, 99)) if latency.size else None,
        missing=data.missing,
        unreadable=data.unreadable,
        notes=tuple(notes),
        interrupted_by=next(
            (
                str(e.details.get("signal", "a signal"))
                for e in data.events
                if e.kind == "interrupted"
            ),
            None,
        ),
    )


def role_order(role: str) -> tuple[int, str]:
    """Sort key of roles: learning robots first, the baseline they are compared with next."""
    # Learning robots first, the baseline they are compared with second, anything else after.
    return ({"learning": 0, "baseline": 1}.get(role, 2), role)


def _role_summary(
    role: str,
    episodes: Sequence[EpisodeRecord],
    first_drift: float | None,
    post_from: float,
    notes: list[str],
) -> RoleSummary:
    pre = [e for e in episodes if first_drift is not None and e.t_s < first_drift]
    post = [e for e in episodes if e.t_s >= post_from]
    pre_return = _mean([e.episode_return for e in pre])
    post_return = _mean([e.episode_return for e in post])
    if first_drift is not None and not pre:
        notes.append(f"{role}: no episode ended before the first drift: pre-drift return undefined")
    if not post:
        notes.append(
            f"{role}: no episode ended after {post_from:.1f} s: post-drift return undefined"
        )
    k_pre, k_post = sum(e.success for e in pre), sum(e.success for e in post)
    return RoleSummary(
        role=role,
        robots=tuple(sorted({e.robot_id for e in episodes})),
        episodes=len(episodes),
        pre_drift_episodes=len(pre),
        post_drift_episodes=len(post),
        pre_drift_return=pre_return,
        post_drift_return=post_return,
        success_rate=_mean([float(e.success) for e in episodes]),
        pre_drift_success_rate=_mean([float(e.success) for e in pre]),
        post_drift_success_rate=_mean([float(e.success) for e in post]),
        interventions=sum(e.interventions for e in episodes),
        backups=sum(e.backups for e in episodes),
        violations=sum(e.violations for e in episodes),
        contacts=sum(e.contacts for e in episodes),
        pre_drift_successes=k_pre,
        post_drift_successes=k_post,
        pre_drift_success_ci=wilson_interval(k_pre, len(pre)),
        post_drift_success_ci=wilson_interval(k_post, len(post)),
        success_kept=ratio_interval(k_post, len(post), k_pre, len(pre)),
        pre_drift_final_distance_m=mean_and_error(_distances(pre)),
        post_drift_final_distance_m=mean_and_error(_distances(post)),
    )


def _distances(episodes: Sequence[EpisodeRecord]) -> list[float]:
    return [e.final_distance_m for e in episodes if e.final_distance_m is not None]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _gate_events(events: Sequence[RunEvent], kind: str) -> tuple[GateEvent, ...]:
    return tuple(
        GateEvent(
            t_s=e.t_s,
            kind=e.kind,
            version=e.version,
            reason=e.message,
            stage=str(e.details["stage"]) if "stage" in e.details else None,
            numbers=tuple((k, _detail(v)) for k, v in e.details.items() if k != "stage"),
        )
        for e in events
        if e.kind == kind
    )


def _detail(value: object) -> str:
    # Gate numbers are floats like 0.8734512; four significant digits are enough to judge.
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _degradation_targets(events: Sequence[RunEvent]) -> list[str]:
    return [str(e.details["to"]) for e in events if e.kind == "degradation" and "to" in e.details]


def headline(s: RunSummary) -> str:
    """The run's outcome in words: did learning help, by how much, and how sure."""
    parts = []
    for role, who in (("learning", "the learning robots"), ("baseline", "the frozen baseline")):
        summary = next((r for r in s.roles if r.role == role), None)
        if summary is None or summary.success_kept is None:
            continue
        kept, low, high = summary.success_kept
        parts.append(
            f"{who} kept {kept:.0%} of their pre-drift success (95 % CI {low:.0%}–{high:.0%}; "
            f"{summary.post_drift_successes}/{summary.post_drift_episodes} episodes at the end "
            f"against {summary.pre_drift_successes}/{summary.pre_drift_episodes} before the drift)"
        )
    if not parts:
        return "Not enough episodes before the drift and at the end to say whether learning helped."
    verdict = ""
    learning = next((r for r in s.roles if r.role == "learning"), None)
    baseline = next((r for r in s.roles if r.role == "baseline"), None)
    if learning and baseline and learning.success_kept and baseline.success_kept:
        if learning.success_kept[1] > baseline.success_kept[2]:
            verdict = "Learning helped: "
        elif learning.success_kept[2] < baseline.success_kept[1]:
            verdict = "Learning hurt: "
        else:
            verdict = "No clear effect of learning (the intervals overlap): "
    return verdict + "; ".join(parts) + "."


def summary_document(s: RunSummary) -> dict[str, object]:
    """``summary.json``: the run's figures for scripts and CI, one entry per role."""

    def interval(ci: tuple[float, ...] | None) -> list[float] | None:
        return None if ci is None else [round(float(v), 6) for v in ci]

    return {
        "run_dir": str(s.run_dir),
        "headline": headline(s),
        "backend": s.backend,
        "actors": list(s.actors),
        "duration_s": s.duration_s,
        "interrupted_by": s.interrupted_by,
        "first_drift_s": s.first_drift_s,
        "post_drift_from_s": s.post_drift_from_s,
        "roles": {
            r.role: {
                "robots": list(r.robots),
                "episodes": r.episodes,
                "pre_drift": {
                    "episodes": r.pre_drift_episodes,
                    "successes": r.pre_drift_successes,
                    "success_rate": r.pre_drift_success_rate,
                    "success_ci95": interval(r.pre_drift_success_ci),
                    "final_distance_m": interval(r.pre_drift_final_distance_m),
                    "return": r.pre_drift_return,
                },
                "post_drift": {
                    "episodes": r.post_drift_episodes,
                    "successes": r.post_drift_successes,
                    "success_rate": r.post_drift_success_rate,
                    "success_ci95": interval(r.post_drift_success_ci),
                    "final_distance_m": interval(r.post_drift_final_distance_m),
                    "return": r.post_drift_return,
                },
                "success_kept": interval(r.success_kept),
                "interventions": r.interventions,
                "backups": r.backups,
                "violations": r.violations,
                "contacts": r.contacts,
            }
            for r in s.roles
        },
        "promotions": [{"t_s": g.t_s, "version": g.version} for g in s.promotions],
        "rejections": [
            {"t_s": g.t_s, "version": g.version, "stage": g.stage} for g in s.rejections
        ],
        "rollbacks": [{"t_s": g.t_s, "version": g.version} for g in s.rollbacks],
        "rollback_checks": [{"t_s": g.t_s, "version": g.version} for g in s.checks],
        "degradation_transitions": s.degradation_transitions,
        "worst_degradation_level": s.worst_degradation_level,
        "violations": s.violations,
        "contacts": s.contacts,
        "latency_ms": {
            "p50": s.latency_p50_ms,
            "p99": s.latency_p99_ms,
            "samples": s.latency_samples,
        },
    }
