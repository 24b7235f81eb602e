"""The live model holder: the one place that answers "which engine serves this request".

Serving reads the engine through a :class:`ModelSource` once per batch, so a swap done
between batches is seen by the next batch and never by half of one. :class:`LiveModel`
holds one engine; the registry (``tether.versions.registry``, pins to retired versions)
answers the same two calls, ``engine_for`` and ``live_engine``.

Invariant: ``engine_for`` returns an engine whose version is the one the request may
be served by, or raises (``NoPolicyLoaded``, ``VersionUnavailable``); it never guesses.
"""

from __future__ import annotations

import threading
from typing import Protocol

from tether.versions.errors import NoPolicyLoaded, VersionUnavailable
from tether.versions.protocols import EngineLike


class ModelSource(Protocol):
    """The routing interface the service uses; ``LiveModel`` and the registry provide it."""

    def engine_for(self, pinned_version: int | None) -> EngineLike: ...

    def live_engine(self) -> EngineLike | None: ...


class LiveModel:
    """Holds at most one engine, the live one; thread-safe replace/clear."""

    def __init__(self, engine: EngineLike | None = None) -> None:
        self._lock = threading.Lock()
        self._engine = engine

    def live_engine(self) -> EngineLike | None:
        with self._lock:
            return self._engine

    def replace(self, engine: EngineLike | None) -> None:
        """Serve ``engine`` from the next batch on (None: stop serving)."""
        with self._lock:
            self._engine = engine

    def engine_for(self, pinned_version: int | None) -> EngineLike:
        engine = self.live_engine()
        if engine is None:
            raise NoPolicyLoaded(
                "no verified policy is loaded on this server; retry once health reports "
                "SERVING, or start it with --bundle"
            )
        if pinned_version is not None and pinned_version != engine.version.id:
            raise VersionUnavailable(
                f"model_version is pinned to {pinned_version}, but the live version is "
                f"{engine.version.id} ({engine.version.name!r}); unpin, or pin the live version"
            )
        return engine
