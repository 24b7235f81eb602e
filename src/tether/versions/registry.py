"""The model registry: every policy version the server knows, its state, its engine, its numbers.

A version arrives from a bundle on disk or from the learner and moves along a fixed
transition table (anything else raises :class:`IllegalTransition`)::

    candidate → shadow → canary → live → retired
        │          │        │       │      │
        └──────────┴────────┴───────┴──────┴──→ rejected (with a reason; terminal)

(``candidate``/``shadow`` may also go straight to ``canary``/``live`` when the gate has
no server-side stage, or an operator promotes by hand; ``retired`` may return to
``live`` on a rollback.)

Invariants: once any version is live exactly one is; the previous live version becomes
the last-known-good (LKG) one; the live pointer changes under one lock, so a batch that
read the live engine finishes on it while the next batch reads the new one — the swap
happens at a batch boundary and nothing in flight is dropped. Ids are monotonic: a
version keeps the id it declares when that id is fresh, otherwise it gets the next one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Generic, TypeVar

from tether.safety.verdict import SafetyCheck, check_names
from tether.versions.errors import (
    IllegalTransition,
    NoPolicyLoaded,
    UnknownVersion,
    VersionError,
    VersionUnavailable,
)
from tether.versions.protocols import EngineLike
from tether.versions.records import (
    LiveChange,
    VersionMetrics,
    VersionRecord,
    VersionSource,
    VersionState,
)

_S = VersionState
TRANSITIONS: dict[VersionState, frozenset[VersionState]] = {
    _S.CANDIDATE: frozenset({_S.SHADOW, _S.CANARY, _S.LIVE, _S.REJECTED, _S.RETIRED}),
    _S.SHADOW: frozenset({_S.CANARY, _S.LIVE, _S.REJECTED, _S.RETIRED}),
    _S.CANARY: frozenset({_S.LIVE, _S.REJECTED, _S.RETIRED}),
    # live → rejected is a rollback of a version that degraded on the robot.
    _S.LIVE: frozenset({_S.RETIRED, _S.REJECTED}),
    _S.RETIRED: frozenset({_S.LIVE, _S.REJECTED}),
    _S.REJECTED: frozenset(),
}

# States a request may pin: versions that passed the gate and served before.
PINNABLE = (_S.LIVE, _S.RETIRED)

EngineT = TypeVar("EngineT", bound=EngineLike)


@dataclass
class _Entry(Generic[EngineT]):
    record: VersionRecord
    engine: EngineT | None
    steps: int = 0
    interventions: int = 0
    backups: int = 0
    by_check: dict[str, int] = field(default_factory=dict)
    episodes: int = 0
    return_sum: float = 0.0
    successes: int = 0


class ModelRegistry(Generic[EngineT]):
    """Versions, their states and engines, the live and last-known-good pointers.

    Thread-safe: the batcher reads the live engine from its own thread while the admin
    service and the rollout controller change states from the event loop.
    """

    def __init__(self, *, wall_clock: Callable[[], float] = time.time) -> None:
        self._clock = wall_clock
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry[EngineT]] = {}
        self._live: int | None = None
        # Previous live versions, most recent last; the LKG is the newest still eligible.
        self._live_history: list[int] = []
        self._listeners: list[Callable[[LiveChange], None]] = []

    # ----------------------------------------------------------------- registration

    def register(
        self,
        engine: EngineT,
        *,
        source: VersionSource,
        bundle_path: Path | None = None,
        declared_id: int | None = None,
        make_live_if_first: bool = True,
    ) -> VersionRecord:
        """Add a version as a candidate (or live, when it is the very first one).

        ``engine.version.id`` must be fresh (greater than every id seen): a loader asks
        :meth:`next_id_for` first and builds the engine with that id, passing the id the
        bundle declared as ``declared_id`` so lineage displays can show both.
        """
        v = engine.version
        change: LiveChange | None = None
        with self._lock:
            if v.id in self._entries or (self._entries and v.id <= max(self._entries)):
                raise VersionError(
                    f"version id {v.id} ({v.name!r}) is not fresh: expected an id greater than "
                    f"{max(self._entries)}; build the engine with the id next_id_for() returns"
                )
            first = self._live is None and make_live_if_first
            state = VersionState.LIVE if first else VersionState.CANDIDATE
            record = VersionRecord(
                id=v.id,
                name=v.name,
                weights_sha256=v.weights_sha256,
                parent=v.parent,
                source=source,
                created_at_s=self._clock(),
                state=state,
                reason="first version: live on load"
                if first
                else f"registered from {source.value}",
                loaded=True,
                declared_id=v.id if declared_id is None else declared_id,
                bundle_path=bundle_path,
            )
            self._entries[v.id] = _Entry(record=record, engine=engine)
            if first:
                self._live = v.id
                change = LiveChange("initial", None, record, record.reason, record.created_at_s)
        if change is not None:
            self._notify(change)
        return record

    def next_id_for(self, declared_id: int) -> int:
        """The id a version declaring ``declared_id`` will get: its own if fresh, else the next."""
        with self._lock:
            if not self._entries:
                return declared_id
            top = max(self._entries)
            return declared_id if declared_id > top else top + 1

    # ----------------------------------------------------------------- state changes

    def transition(self, version_id: int, to: VersionState, reason: str) -> VersionRecord:
        """Move a version along the table; live changes go through promote/rollback."""
        if to is VersionState.LIVE:
            raise IllegalTransition(
                f"version {version_id}: use promote() or rollback() to make a version live, "
                "so the previous live version and the last-known-good pointer stay consistent"
            )
        with self._lock:
            e = self._entry(version_id)
            if e.record.state is VersionState.LIVE:
                raise IllegalTransition(
                    f"version {version_id} is live; promote another version or roll back "
                    f"before moving it to {to.value}"
                )
            self._check(e.record, to)
            e.record = replace(e.record, state=to, reason=reason)
            return e.record

    def promote(self, version_id: int, reason: str) -> LiveChange:
        """Make ``version_id`` live; the previous live version becomes last-known-good."""
        with self._lock:
            e = self._entry(version_id)
            if e.engine is None:
                raise UnknownVersion(
                    f"version {version_id} is unloaded; load its bundle again before promoting it"
                )
            self._check(e.record, VersionState.LIVE)
            change = self._swap_live(e, "promotion", reason, VersionState.RETIRED, reason)
        self._notify(change)
        return change

    def rollback(self, reason: str) -> LiveChange:
        """Reject the live version and make the last-known-good one live again."""
        with self._lock:
            target = self._lkg_locked()
            if target is None:
                raise VersionError(
                    "cannot roll back: there is no last-known-good version loaded; load a "
                    "known-good bundle and promote it instead"
                )
            e = self._entries[target]
            change = self._swap_live(
                e, "rollback", reason, VersionState.REJECTED, f"rolled back: {reason}"
            )
            # The rolled-back version must never become last-known-good again.
            self._live_history = [i for i in self._live_history if i != target]
        self._notify(change)
        return change

    def unload(self, version_id: int) -> VersionRecord:
        """Drop a version's engine (its record and numbers stay).

        Refused for the live version and for one under evaluation (shadow, canary), whose
        engine the gate and the router still use.
        """
        with self._lock:
            e = self._entry(version_id)
            if e.record.state is VersionState.LIVE:
                raise VersionError(
                    f"version {version_id} is live and cannot be unloaded; promote another "
                    "version or roll back first"
                )
            if e.record.state in (VersionState.SHADOW, VersionState.CANARY):
                raise VersionError(
                    f"version {version_id} is in its {e.record.state.value} stage and cannot "
                    "be unloaded; wait for the gate's verdict or submit a newer candidate"
                )
            e.engine = None
            e.record = replace(e.record, loaded=False)
            return e.record

    def add_listener(self, listener: Callable[[LiveChange], None]) -> None:
        """Call ``listener`` after every change of the live version (e.g. to tell the learner)."""
        with self._lock:
            self._listeners.append(listener)

    # ----------------------------------------------------------------- reads

    def live_engine(self) -> EngineT | None:
        """The engine a batch should use, or None before any version is live.

        Read once per batch: that is what makes a promotion or rollback take effect at a
        batch boundary (the ``tether.versions.holder.ModelSource`` interface).
        """
        with self._lock:
            if self._live is None:
                return None
            return self._entries[self._live].engine

    def engine_for(self, pinned_version: int | None) -> EngineT:
        """The live engine, or the engine of the pinned version (``ModelSource`` interface).

        A request may pin only a version that passed the gate and served before (live or
        retired): pinning a candidate would let ungated weights act on a robot.
        """
        if pinned_version is not None:
            with self._lock:
                state = self._entry(pinned_version).record.state
            if state not in PINNABLE:
                raise VersionUnavailable(
                    f"model_version is pinned to {pinned_version}, which is {state.value}; "
                    f"only {' or '.join(s.value for s in PINNABLE)} versions may be pinned "
                    "(ungated weights never act on a robot); unpin or pick another version"
                )
            return self.engine(pinned_version)
        engine = self.live_engine()
        if engine is None:
            raise NoPolicyLoaded(
                "no policy version is live on this server; load a bundle with "
                "`tether admin load` or start the server with --bundle"
            )
        return engine

    def engine(self, version_id: int) -> EngineT:
        """The engine of a loaded version (for pinned requests, shadow and canary)."""
        with self._lock:
            e = self._entry(version_id)
            if e.engine is None:
                raise UnknownVersion(
                    f"version {version_id} is not loaded (state {e.record.state.value}); "
                    "load its bundle again to serve it"
                )
            return e.engine

    def live(self) -> VersionRecord | None:
        with self._lock:
            return None if self._live is None else self._entries[self._live].record

    def last_known_good(self) -> VersionRecord | None:
        with self._lock:
            lkg = self._lkg_locked()
            return None if lkg is None else self._entries[lkg].record

    def get(self, version_id: int) -> VersionRecord:
        with self._lock:
            return self._entry(version_id).record

    def records(self) -> tuple[VersionRecord, ...]:
        with self._lock:
            return tuple(self._entries[i].record for i in sorted(self._entries))

    def find_by_hash(self, weights_sha256: str) -> VersionRecord | None:
        """The newest version with these weights (reload uses it to skip unchanged bundles)."""
        with self._lock:
            for i in sorted(self._entries, reverse=True):
                if self._entries[i].record.weights_sha256 == weights_sha256:
                    return self._entries[i].record
            return None

    # ----------------------------------------------------------------- metrics

    def record_step(
        self, version_id: int, *, checks: SafetyCheck, intervened: bool, backup: bool
    ) -> None:
        """One supervised control step of ``version_id`` and which checks fired on it."""
        with self._lock:
            e = self._entry(version_id)
            e.steps += 1
            e.interventions += int(intervened)
            e.backups += int(backup)
            for name in check_names(int(checks)):
                e.by_check[name] = e.by_check.get(name, 0) + 1

    def record_episode(self, version_id: int, *, episode_return: float, success: bool) -> None:
        with self._lock:
            e = self._entry(version_id)
            e.episodes += 1
            e.return_sum += float(episode_return)
            e.successes += int(success)

    def metrics(self, version_id: int) -> VersionMetrics:
        with self._lock:
            e = self._entry(version_id)
            return VersionMetrics(
                version=version_id,
                steps=e.steps,
                interventions=e.interventions,
                backups=e.backups,
                interventions_by_check=tuple(sorted(e.by_check.items())),
                episodes=e.episodes,
                return_sum=e.return_sum,
                successes=e.successes,
            )

    # ----------------------------------------------------------------- internals

    def _entry(self, version_id: int) -> _Entry[EngineT]:
        try:
            return self._entries[version_id]
        except KeyError:
            known = ", ".join(str(i) for i in sorted(self._entries)) or "none"
            raise UnknownVersion(
                f"no policy version {version_id} in the registry (known: {known}); "
                "list versions with `tether admin list`"
            ) from None

    @staticmethod
    def _check(record: VersionRecord, to: VersionState) -> None:
        if to not in TRANSITIONS[record.state]:
            allowed = ", ".join(sorted(s.value for s in TRANSITIONS[record.state])) or "nothing"
            raise IllegalTransition(
                f"version {record.id} cannot go from {record.state.value} to {to.value}; "
                f"from {record.state.value} it may go to: {allowed}"
            )

    def _swap_live(
        self,
        new: _Entry[EngineT],
        kind: str,
        reason: str,
        old_state: VersionState,
        old_reason: str,
    ) -> LiveChange:
        previous: VersionRecord | None = None
        if self._live is not None and self._live != new.record.id:
            old = self._entries[self._live]
            old.record = replace(old.record, state=old_state, reason=old_reason)
            previous = old.record
            if old_state is VersionState.RETIRED:
                self._live_history.append(old.record.id)
        new.record = replace(new.record, state=VersionState.LIVE, reason=reason)
        self._live = new.record.id
        return LiveChange(kind, previous, new.record, reason, self._clock())

    def _lkg_locked(self) -> int | None:
        for i in reversed(self._live_history):
            e = self._entries[i]
            if e.engine is not None and e.record.state is VersionState.RETIRED:
                return i
        return None

    def _notify(self, change: LiveChange) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(change)
