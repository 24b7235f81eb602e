"""Which version acts for a request: operator A/B split (sticky per session) and paired shares.

The router answers with a :class:`RouteDecision` per control step. Its invariants:

- a session keeps the version the operator split gave it for as long as that version
  stays in the split (sticky per session; a new split only moves sessions whose
  version left it);
- a paired share runs two arms on the **same tasks**: a canary and its *control* (the
  live version under the same tightened limits, so the canary is compared with live
  under equal conditions), or a rollback *check* (the last-known-good version beside
  live, both at the base limits, before the rollback monitor replaces live: a drift that
  hurts every version alike is then not mistaken for a regression). An episode that
  declares a task id opens a pair for that task with probability ``2 * fraction`` and
  goes to one arm (which one is drawn per pair, so neither arm always runs first); the
  next episode of that task, from any session, goes to the other arm and closes the
  pair. An episode without a task id is never paired: it is served by live at full
  limits;
- one paired share runs at a time, and each has its own *trial* number, which every
  decision of its arms carries to the episode's outcome: its evaluator counts only its
  own trial's episodes, never one still in flight from the share before. A canary
  started while a check runs waits for the check to end; a check is refused while a
  canary runs;
- routing is sticky per episode: every step of an episode is served as its first step
  was, also when a canary starts mid-episode (the episode stays live) or stops (its
  remaining steps go to live, still under the tightened limits; likewise a check's
  last-known-good episode when the check ends or that version is unloaded);
- only versions that passed the gate can be chosen (live, retired for A/B and the check;
  canary for the canary share), and a promotion or rollback clears the split, the check
  and a waiting canary, because each names versions chosen against the previous live one.
"""

from __future__ import annotations

import hashlib
import itertools
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
    CONTROL = "control"  # live, under the same limits: what the canary (or check) is judged against
    CHECK = "check"  # the last-known-good beside live, before a rollback (RollbackMonitor)


@dataclass(frozen=True)
class RouteDecision:
    """The version to serve a step with; ``None`` means "whatever is live at the batch".

    ``tightening`` is the factor for ``SafetyLimits.tightened`` the step is served under
    at NORMAL (1: the base limits); a canary and its control carry the canary's.
    ``trial`` numbers the paired share a canary, check or control decision belongs to
    (0: none).
    """

    version: int | None
    role: Role
    tightening: float = 1.0
    trial: int = 0

    @property
    def tightened(self) -> bool:
        return self.tightening < 1.0

    @property
    def experiment(self) -> bool:
        """Served as an arm of a paired share (whatever the limits)."""
        return self.role in _PAIRED_ROLES


@dataclass(frozen=True)
class TrafficSplit:
    """Weights per version id, normalized to sum to 1; empty means all traffic to live."""

    weights: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class PairedShare:
    """A version served beside live on the same tasks: a canary or a rollback check."""

    version: int
    fraction: float  # share of episodes the version acts in; as many again are live's
    tightening: float  # SafetyLimits.tightened factor for both arms' steps
    arm: Role  # Role.CANARY or Role.CHECK: the role of ``version``'s episodes
    trial: int  # carried by every decision of both arms to the episodes' outcomes


_LIVE = RouteDecision(None, Role.LIVE)
_PAIRED_ROLES = frozenset({Role.CANARY, Role.CONTROL, Role.CHECK})
_SHARED_ARMS = frozenset({Role.CANARY, Role.CHECK})  # the arms that are not live


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
        self._trials = itertools.count(1)
        self._share: PairedShare | None = None  # the paired share running now
        self._waiting: PairedShare | None = None  # a canary that waits for a check to end
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

    def start_canary(self, version: int, fraction: float, tightening: float) -> PairedShare:
        """Give the canary ``version`` its share (after a running check, if one runs)."""
        _check_fraction("canary", fraction)
        if not 0.0 < tightening <= 1.0:
            raise VersionError(f"canary tightening must be in (0, 1], got {tightening}")
        state = self._registry.get(version).state
        if state is not VersionState.CANARY:
            raise VersionError(
                f"version {version} is {state.value}; only a version in the canary state "
                "may receive a canary share (move it through the gate first)"
            )
        with self._lock:
            share = PairedShare(version, fraction, tightening, Role.CANARY, next(self._trials))
            if self._share is not None and self._share.arm is Role.CHECK:
                self._waiting = share
            else:
                self._begin(share)
        return share

    def stop_canary(self) -> None:
        """End the canary's share, or drop it while it waits."""
        with self._lock:
            self._waiting = None
            if self._share is not None and self._share.arm is Role.CANARY:
                self._begin(None)

    def canary(self) -> PairedShare | None:
        """The canary acting now (not one that waits for a check)."""
        return self._running(Role.CANARY)

    def start_check(self, version: int, fraction: float) -> PairedShare | None:
        """Serve the last-known-good ``version`` beside live on the same tasks at the base
        limits; None while a canary acts (the caller asks again later)."""
        _check_fraction("check", fraction)
        record = self._registry.get(version)
        if record.state is not VersionState.RETIRED or not record.loaded:
            raise VersionError(
                f"version {version} is {record.state.value}"
                f"{'' if record.loaded else ' and unloaded'}; a rollback check serves only a "
                "loaded retired version (the last-known-good) beside live"
            )
        with self._lock:
            if self._share is not None:
                return None
            share = PairedShare(version, fraction, 1.0, Role.CHECK, next(self._trials))
            self._begin(share)
        return share

    def stop_check(self, trial: int) -> None:
        """End the check numbered ``trial`` (no other); a canary that waited for it starts."""
        with self._lock:
            if self._share is not None and self._share.trial == trial:
                self._begin(self._waiting)
                self._waiting = None

    def check(self) -> PairedShare | None:
        return self._running(Role.CHECK)

    def _running(self, arm: Role) -> PairedShare | None:
        with self._lock:
            share = self._share
        return share if share is not None and share.arm is arm else None

    def _begin(self, share: PairedShare | None) -> None:
        """Make ``share`` the running one (called with the lock held): pairs start afresh."""
        self._share = share
        self._open_pairs.clear()
        self._pairs_drawn.clear()

    # ----------------------------------------------------------------- routing

    def route(self, session_id: str, episode_id: str, task_id: str = "") -> RouteDecision:
        """The version for one step of ``session_id``'s episode ``episode_id``.

        ``task_id`` is the task the robot declared for the episode ("" when none); only
        the episode's first step decides, later steps get the same answer.
        """
        with self._lock:
            share = self._share
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
                if decision.role in _SHARED_ARMS and (
                    share is None
                    or share.trial != decision.trial
                    or (decision.role is Role.CHECK and not self._loaded(decision.version))
                ):
                    # The share ended mid-episode (or its retired version was unloaded):
                    # never serve a version out of the gate, nor one that is gone.
                    return RouteDecision(None, Role.CONTROL, decision.tightening, decision.trial)
                return decision
            decision = self._first_step(share, task_id)
            self._episodes[session_id] = (episode_id, decision)
            if len(self._episodes) > self._max_sessions:
                self._episodes.popitem(last=False)
            return decision

    def _first_step(self, share: PairedShare | None, task_id: str) -> RouteDecision:
        """The decision for a new episode (called with the lock held)."""
        if share is None or not task_id:
            return _LIVE
        if share.arm is Role.CHECK and not self._loaded(share.version):
            return _LIVE
        arm = self._open_pairs.pop(task_id, None)
        if arm is None:
            drawn = self._pairs_drawn.pop(task_id, 0)
            self._pairs_drawn[task_id] = drawn + 1
            if len(self._pairs_drawn) > self._max_sessions:
                self._pairs_drawn.popitem(last=False)
            u = unit_hash(share.arm.value, str(share.version), task_id, str(drawn))
            if u >= 2.0 * share.fraction:
                return _LIVE  # this task's turn is not in the experiment
            arm = share.arm if u < share.fraction else Role.CONTROL
            self._open_pairs[task_id] = Role.CONTROL if arm is share.arm else share.arm
            if len(self._open_pairs) > self._max_sessions:
                self._open_pairs.popitem(last=False)
        if arm is share.arm:
            return RouteDecision(share.version, share.arm, share.tightening, share.trial)
        return RouteDecision(None, Role.CONTROL, share.tightening, share.trial)

    def _loaded(self, version: int | None) -> bool:
        return version is not None and self._registry.get(version).loaded

    def forget(self, session_id: str) -> None:
        """A session ended: release its sticky assignment."""
        with self._lock:
            self._sticky.pop(session_id, None)
            self._episodes.pop(session_id, None)

    def _on_live_change(self, change: LiveChange) -> None:
        with self._lock:
            self._split = TrafficSplit()
            self._sticky.clear()
            # A check and a waiting canary were both chosen against the previous live
            # version; a running canary ends when it became live (the gate abandons any
            # other one itself).
            self._waiting = None
            if self._share is not None and (
                self._share.arm is Role.CHECK or self._share.version == change.current.id
            ):
                self._begin(None)


def _check_fraction(what: str, fraction: float) -> None:
    if not 0.0 < fraction <= 0.5:
        raise VersionError(
            f"{what} fraction must be in (0, 0.5], got {fraction}: as many episodes again "
            "are live's, on the same tasks"
        )


def _pick(split: TrafficSplit, u: float) -> int:
    acc = 0.0
    for version, weight in split.weights:
        acc += weight
        if u < acc:
            return version
    return split.weights[-1][0]  # u within rounding of 1.0
