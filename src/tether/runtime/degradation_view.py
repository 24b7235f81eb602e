"""How the dashboard and the report show a degradation level: its rank and its colour.

Snapshots carry the level by name (``SystemSnapshot.degradation_level``), a name of
``tether.safety.DegradationLevel``. Both views rank and colour a level through this one
table, so the terminal and the plots never disagree; an unknown name ranks as -1 and is
shown as it is, never dropped.
"""

from __future__ import annotations

from typing import NamedTuple

from tether.safety.levels import DegradationLevel


class LevelStyle(NamedTuple):
    rank: int
    rich_style: str
    plot_color: str


_STYLES: dict[DegradationLevel, tuple[str, str]] = {
    DegradationLevel.NORMAL: ("bold green", "#2e7d32"),
    DegradationLevel.RESTRICTED: ("bold yellow", "#f9a825"),
    DegradationLevel.PAUSED: ("bold dark_orange", "#ef6c00"),
    DegradationLevel.TAKEOVER: ("bold white on red", "#c62828"),
}
_UNKNOWN = LevelStyle(-1, "bold magenta", "#6a1b9a")

LEVEL_NAMES: tuple[str, ...] = tuple(level.name for level in DegradationLevel)


def level_style(name: str) -> LevelStyle:
    """The style of level ``name`` (any case); unknown names get a distinct style."""
    level = DegradationLevel.__members__.get(name.strip().upper())
    if level is None:
        return _UNKNOWN
    rich_style, plot_color = _STYLES[level]
    return LevelStyle(int(level), rich_style, plot_color)
