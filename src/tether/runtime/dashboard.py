"""The live terminal dashboard of ``tether run``.

``Dashboard.update(snapshot, recent_events)`` is called from the run's loop every time a
``SystemSnapshot`` is taken. On a terminal it redraws a ``rich.live`` view in place; when
stdout is not a terminal (CI, a pipe, a log file) or ``plain`` is set, it prints one plain
line per snapshot at most every ``plain_interval_s``, and each new event once as it comes.

Invariant: the dashboard never raises into the caller's loop. Drawing is a view of the
run, not part of it; a render or write failure is logged once per kind and the run
goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.live import Live

from tether.runtime.dashboard_view import plain_event, plain_line, render, waiting
from tether.runtime.records import RunEvent, SystemSnapshot

_log = logging.getLogger(__name__)


class DashboardConfig(BaseModel):
    """How the live dashboard draws."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plain: bool = Field(
        default=False,
        description="print plain log lines even on a terminal, instead of the live view (flag)",
    )
    plain_interval_s: float = Field(
        default=5.0,
        ge=0.0,
        le=3600.0,
        description="least time between two plain snapshot lines; 0 prints every update (s)",
    )
    recent_events: int = Field(
        default=6, ge=0, le=100, description="latest run events shown under the tables (events)"
    )


EventKey = tuple[float, str, str, int | None, str | None]


class Dashboard:
    """A live view of the running system; use as a context manager around the run loop."""

    def __init__(
        self,
        config: DashboardConfig | None = None,
        *,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or DashboardConfig()
        self.console = console or Console()
        self._clock = clock
        self.plain = self.config.plain or not self.console.is_terminal
        self._live: Live | None = None
        self._last_line_at: float | None = None
        self._events_shown: set[EventKey] = set()
        self._failures_logged: set[str] = set()

    def __enter__(self) -> Dashboard:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Begin the live view (nothing to begin in plain mode)."""
        if self.plain or self._live is not None:
            return
        try:
            live = Live(waiting(), console=self.console, auto_refresh=False, transient=False)
            live.start(refresh=True)
            self._live = live
        except Exception as exc:  # a view must not stop the run: fall back to lines
            self._failed("start", exc)
            self.plain = True

    def stop(self) -> None:
        """End the live view, leaving its last frame on screen."""
        live, self._live = self._live, None
        if live is None:
            return
        try:
            live.stop()
        except Exception as exc:
            self._failed("stop", exc)

    def update(self, snapshot: SystemSnapshot, recent_events: Sequence[RunEvent] = ()) -> None:
        """Show ``snapshot`` and the last ``recent_events``; never raises."""
        try:
            events = (
                list(recent_events)[-self.config.recent_events :]
                if self.config.recent_events
                else []
            )
            if self.plain:
                self._print_plain(snapshot, recent_events)
            elif self._live is not None:
                self._live.update(render(snapshot, events), refresh=True)
        except Exception as exc:
            self._failed("update", exc)

    def _print_plain(self, snapshot: SystemSnapshot, events: Sequence[RunEvent]) -> None:
        # Events are rare and each matters (a rollback, a takeover): print every new one
        # at once; only the periodic snapshot line is rate-limited.
        keys = [(e.t_s, e.kind, e.message, e.version, e.robot_id) for e in events]
        for key, event in zip(keys, events, strict=True):
            if key not in self._events_shown:
                self._line(plain_event(event))
        # Only keys still in the caller's window can come again, so the set stays small.
        self._events_shown = set(keys)
        now = self._clock()
        if self._last_line_at is None or now - self._last_line_at >= self.config.plain_interval_s:
            self._last_line_at = now
            self._line(plain_line(snapshot))

    def _line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def _failed(self, what: str, exc: Exception) -> None:
        key = f"{what}:{type(exc).__name__}"
        if key in self._failures_logged:
            _log.debug("dashboard %s failed again: %s", what, exc)
            return
        self._failures_logged.add(key)
        _log.warning(
            "dashboard %s failed (%s: %s); the run continues without this frame",
            what,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )


class NoDashboard:
    """What a run with ``dashboard: off`` shows: nothing."""

    def __enter__(self) -> NoDashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def update(self, snapshot: SystemSnapshot, events: tuple[RunEvent, ...]) -> None:
        return None


def dashboard_for(mode: str) -> Dashboard | NoDashboard:
    """The dashboard a run config's ``dashboard`` mode asks for (auto, live, plain, off)."""
    if mode == "off":
        return NoDashboard()
    return Dashboard(DashboardConfig(plain=(mode == "plain")))
