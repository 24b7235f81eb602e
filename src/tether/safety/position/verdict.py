"""What the position supervisor did to one command: a :class:`SafetyVerdict` that also
says how far each check moved it.

``moved_rad`` lists, for each check that moved the command, the Euclidean distance (rad,
over the joints) it moved it, in the order the checks run; the checks' bits, the source,
the total correction and the changed joints mean what they mean for every verdict, so
serving, metrics and the degradation machine read it as any other. A command passed
untouched gets the shared :data:`~tether.safety.verdict.PASSED`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.safety.verdict import SafetyCheck, SafetyVerdict


@dataclass(frozen=True)
class PositionVerdict(SafetyVerdict):
    """A verdict on a commanded position. For a replaced command (``source=BACKUP``),
    ``correction_norm`` is the distance of the executed command from the measured pose
    (or from the last pose known, when the observation is unreadable)."""

    moved_rad: tuple[tuple[SafetyCheck, float], ...] = ()

    def moved_by(self, check: SafetyCheck) -> float:
        """How far ``check`` moved the command (rad; 0 when it did not)."""
        return sum(d for c, d in self.moved_rad if c == check)
