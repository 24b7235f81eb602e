"""Which version acts for a request: operator A/B split (sticky per session) and canary share.

The router answers with a :class:`RouteDecision` per control step. Its invariants:

- a session keeps the version the operator split gave it for as long as that version
  stays in the split (sticky per session; a new split only moves sessions whose
  version left it);
- a canary and its *control* (the live version under the same tightened limits, so the
  canary is compared with live under equal conditions) run the **same tasks**: an
  episode that declares a task id opens a pair for that task with probability
  ``2 * fraction`` and goes to one arm (which one is drawn per pair, so neither arm
  always runs first); the next episode of that task, from any session, goes to the
  other arm and closes the pair. An episode without a task id is never paired: it is
  served by live at full limits;
- routing is sticky per episode: every step of an episode is served as its first step
  was, also when a canary starts mid-episode (the episode stays live) or stops (its
  remaining steps go to live, still under the tightened limits);
- only versions that passed the gate can be chosen (live, retired for A/B; canary for
  the canary share), and a promotion or rollback clears the split, because a split
  names versions that were chosen against the previous live one.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tether.versions.errors import VersionError
from tether.versions.records import LiveChange, VersionState
from tether.versions.registry import PINNABLE, ModelRegistry


class Role(StrEnum):
    LIVE = "live"  # the live version (no split, or the split chose it)
    SPLIT = "split"  # another version the operator's A/B split chose
    CANARY = "canary"  # the canary under evaluation, under the canary's limits
    CONTROL = "control"  # live, under the same limits: what the canary is judged against


@dataclass(frozen=True)
class RouteDecision:
    """The version to serve a step with; ``None`` means "whatever is live at the batch".

    ``tightening`` is the factor for ``SafetyLimits.tightened`` the step is served under
    at NORMAL (1: the base limits); a canary and its control carry the canary's.
    """

    version: int | None
    role: Role
    tightening: float = 1.0

    @property
    def tightened(self) -> bool:
        return self.tightening < 1.0

    @property
    def experiment(self) -> bool:
        """Served as a canary or its control (whatever the limits)."""
        return self.role in (Role.CANARY, Role.CONTROL)


@dataclass(frozen=True)
class TrafficSplit:
    """Weights per version id, normalized to sum to 1; empty means all traffic to live."""

    weights: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class CanaryShare:
    version: int
    fraction: float  # share of episodes the canary acts in; as many again are its control
    tightening: float  # SafetyLimits.tightened factor for the canary's and control's steps


_LIVE = RouteDecision(None, Role.LIVE)


def unit_hash(*parts: str) -> float:
    """A stable number in [0, 1) from ``parts`` (same across processes and restarts)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


class TrafficRouter:
    """Routes sessions and episodes to versions; thread-safe, bounded memory."""

    def __init__(self, registry: ModelRegistry[Any], *, max_sessions: int = 65536) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self._registry = registry
        self._max_sessions = max_sessions
        self._lock = threading.Lock()
        self._split = TrafficSplit()
        self._sticky: OrderedDict[str, int] = OrderedDict()
        self._canary: CanaryShare | None = None
        # session -> (episode id, decision of its first step): routing is sticky per episode
        self._episodes: OrderedDict[str, tuple[str, RouteDecision]] = OrderedDict()
        # task id -> the arm its open pair still lacks; task id -> pairs drawn so far
        self._open_pairs: OrderedDict[str, Role] = OrderedDict()
        self._pairs_drawn: OrderedDict[str, int] = OrderedDict()
        registry.add_listener(self._on_live_change)

    # ----------------------------------------------------------------- configuration

    def set_split(self, weights: Mapping[int, float]) -> TrafficSplit:
        """Split sessions between versions by weight; ``{}`` sends everything to live.

        Every version must be loaded and live or retired (gated and served before); the
        weights must be finite, non-negative and not all zero.
        """
        items = []
        for version, weight in sorted(weights.items()):
            if not (weight >= 0.0 and weight < float("inf")):
                raise VersionError(
                    f"traffic weight of version {version} must be a finite number >= 0, got {weight}"
                )
            record = self._registry.get(version)
            if record.state not in PINNABLE or not record.loaded:
                raise VersionError(
                    f"version {version} is {record.state.value}"
                    f"{'' if record.loaded else ' and unloaded'}; an A/B split may only use "
                    "loaded live or retired versions (candidates go through the gate)"
                )
            if weight > 0.0:
                items.append((version, weight))
        if weights and not items:
            raise VersionError(
                f"traffic weights {dict(weights)} are all zero; give at least one version a "
                "positive weight, or pass no weights to send everything to live"
            )
        total = sum(w for _, w in items)
        split = TrafficSplit(tuple((v, w / total) for v, w in items))
        with self._lock:
            self._split = split
            keep = {v for v, _ in split.weights}
            for session in [s for s, v in self._sticky.items() if v not in keep]:
                del self._sticky[session]
        return split

    def split(self) -> TrafficSplit:
        with self._lock:
            return self._split

    def start_canary(self, version: int, fraction: float, tightening: float) -> CanaryShare:
        if not 0.0 < fraction <= 0.5:
            raise VersionError(
                f"canary fraction must be in (0, 0.5], got {fraction}: as many episodes again "
                "are the canary's control"
            )
        if not 0.0 < tightening <= 1.0:
            raise VersionError(f"canary tightening must be in (0, 1], got {tightening}")
        state = self._registry.get(version).state
        if state is not VersionState.CANARY:
            raise VersionError(
                f"version {version} is {state.value}; only a version in the canary state "
                "may receive a canary share (move it through the gate first)"
            )
        share = CanaryShare(version, fraction, tightening)
        with self._lock:
            self._canary = share
            self._open_pairs.clear()
            self._pairs_drawn.clear()
        return share

    def stop_canary(self) -> None:
        with self._lock:
            self._canary = None
            self._open_pairs.clear()
            self._pairs_drawn.clear()

    def canary(self) -> CanaryShare | None:
        with self._lock:
            return self._canary

    # ----------------------------------------------------------------- routing

    def route(self, session_id: str, episode_id: str, task_id: str = "") -> RouteDecision:
        """The version for one step of ``session_id``'s episode ``episode_id``.

        ``task_id`` is the task the robot declared for the episode ("" when none); only
        the episode's first step decides, later steps get the same answer.
        """
        with self._lock:
            canary = self._canary
            split = self._split
            if split.weights:
                version = self._sticky.get(session_id)
                if version is None:
                    version = _pick(split, unit_hash("split", session_id))
                    self._sticky[session_id] = version
                    if len(self._sticky) > self._max_sessions:
                        self._sticky.popitem(last=False)
                else:
                    self._sticky.move_to_end(session_id)
                live = self._registry.live()
                if live is None or version != live.id:
                    return RouteDecision(version, Role.SPLIT)
            seen = self._episodes.get(session_id)
            if seen is not None and seen[0] == episode_id:
                self._episodes.move_to_end(session_id)
                decision = seen[1]
                if decision.role is Role.CANARY and (
                    canary is None or canary.version != decision.version
                ):
                    # The canary ended mid-episode: never serve a version out of the gate.
                    return RouteDecision(None, Role.CONTROL, decision.tightening)
                return decision
            decision = self._first_step(canary, task_id)
            self._episodes[session_id] = (episode_id, decision)
            if len(self._episodes) > self._max_sessions:
                self._episodes.popitem(last=False)
            return decision

    def _first_step(self, canary: CanaryShare | None, task_id: str) -> RouteDecision:
        """The decision for a new episode (called with the lock held)."""
        if canary is None or not task_id:
            return _LIVE
        arm = self._open_pairs.pop(task_id, None)
        if arm is None:
            drawn = self._pairs_drawn.pop(task_id, 0)
            self._pairs_drawn[task_id] = drawn + 1
            if len(self._pairs_drawn) > self._max_sessions:
                self._pairs_drawn.popitem(last=False)
            u = unit_hash("canary", str(canary.version), task_id, str(drawn))
            if u >= 2.0 * canary.fraction:
                return _LIVE  # this task's turn is not in the experiment
            arm = Role.CANARY if u < canary.fraction else Role.CONTROL
            self._open_pairs[task_id] = Role.CONTROL if arm is Role.CANARY else Role.CANARY
            if len(self._open_pairs) > self._max_sessions:
                self._open_pairs.popitem(last=False)
        if arm is Role.CANARY:
            return RouteDecision(canary.version, Role.CANARY, canary.tightening)
        return RouteDecision(None, Role.CONTROL, canary.tightening)

    def forget(self, session_id: str) -> None:
        """A session ended: release its sticky assignment."""
        with self._lock:
            self._sticky.pop(session_id, None)
            self._episodes.pop(session_id, None)

    def _on_live_change(self, change: LiveChange) -> None:
        with self._lock:
            self._split = TrafficSplit()
            self._sticky.clear()
            if self._canary is not None and self._canary.version == change.current.id:
                self._canary = None
                self._open_pairs.clear()
                self._pairs_drawn.clear()


def _pick(split: TrafficSplit, u: float) -> int:
    acc = 0.0
    for version, weight in split.weights:
        acc += weight
        if u < acc:
            return version
    return split.weights[-1][0]  # u within rounding of 1.0
