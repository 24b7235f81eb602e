"""How the dashboard and the report show a degradation level: its rank and its colour.

Snapshots carry the level by name (``SystemSnapshot.degradation_level``), the names of
``tether.safety.DegradationLevel``. Both views rank and colour a level through this one
table, so the terminal and the plots never disagree; an unknown name ranks as -1 and is
shown as it is, never dropped.
"""

from __future__ import annotations

from typing import NamedTuple


class LevelStyle(NamedTuple):
    rank: int
    rich_style: str
    plot_color: str


_STYLES: dict[str, LevelStyle] = {
    "NORMAL": LevelStyle(0, "bold green", "#2e7d32"),
    "RESTRICTED": LevelStyle(1, "bold yellow", "#f9a825"),
    "PAUSED": LevelStyle(2, "bold dark_orange", "#ef6c00"),
    "TAKEOVER": LevelStyle(3, "bold white on red", "#c62828"),
}
_UNKNOWN = LevelStyle(-1, "bold magenta", "#6a1b9a")

LEVEL_NAMES: tuple[str, ...] = tuple(_STYLES)


def level_style(name: str) -> LevelStyle:
    """The style of level ``name`` (any case); unknown names get a distinct style."""
    return _STYLES.get(name.strip().upper(), _UNKNOWN)
