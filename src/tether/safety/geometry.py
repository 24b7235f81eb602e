"""Signed clearances between the arm's collision spheres and the world.

Positive clearance means "this far inside the allowed region, margin included"; zero
or below means the margin is breached. The supervisor compares clearances of the
current and the predicted pose, so both functions are pure and allocation-light.
"""

from __future__ import annotations

import numpy as np

from tether.safety.limits import SafetyLimits
from tether.spec import Box, Sphere


class Clearance:
    """Obstacle and workspace clearance for one set of limits (arrays precomputed)."""

    def __init__(self, limits: SafetyLimits) -> None:
        spheres = [o for o in limits.obstacles if isinstance(o, Sphere)]
        boxes = [o for o in limits.obstacles if isinstance(o, Box)]
        self._sphere_c = np.array([s.center for s in spheres], dtype=np.float64).reshape(-1, 3)
        self._sphere_r = np.array([s.radius for s in spheres], dtype=np.float64)
        self._sphere_r0 = float(self._sphere_r[0]) if len(spheres) == 1 else 0.0
        self._box_lo = np.array([b.low for b in boxes], dtype=np.float64).reshape(-1, 3)
        self._box_hi = np.array([b.high for b in boxes], dtype=np.float64).reshape(-1, 3)
        self._obstacle_margin = limits.obstacle_margin_m
        ws = limits.workspace
        self._ws_lo = None if ws is None else np.asarray(ws.low, dtype=np.float64)
        self._ws_hi = None if ws is None else np.asarray(ws.high, dtype=np.float64)
        self._ws_margin = limits.workspace_margin_m

    @property
    def has_obstacles(self) -> bool:
        return bool(self._sphere_r.size or self._box_lo.shape[0])

    @property
    def has_workspace(self) -> bool:
        return self._ws_lo is not None

    def obstacles(self, centers: np.ndarray, radii: np.ndarray) -> float:
        """Smallest surface distance of any arm sphere to any obstacle, minus the margin (m)."""
        best = np.inf
        if self._sphere_r.size == 1:
            # The common case, in fewer numpy calls (each costs about a microsecond) and
            # the same bits: the sum is the same length-3 in-order reduction, and
            # subtracting the one obstacle radius after the minimum rounds the same
            # since rounding is monotone.
            diff = centers - self._sphere_c[0]
            diff *= diff
            dist = np.sqrt(diff.sum(axis=1))
            dist -= radii
            best = float(dist.min()) - self._sphere_r0
        elif self._sphere_r.size:
            diff = centers[:, None, :] - self._sphere_c[None, :, :]
            diff *= diff
            dist = np.sqrt(diff.sum(axis=2))
            dist -= radii[:, None]
            dist -= self._sphere_r[None, :]
            best = float(dist.min())
        if self._box_lo.shape[0]:
            # Signed distance to an axis-aligned box: outside part + (negative) inside part.
            d = np.maximum(
                self._box_lo[None, :, :] - centers[:, None, :],
                centers[:, None, :] - self._box_hi[None, :, :],
            )
            outside = np.sqrt(np.sum(np.maximum(d, 0.0) ** 2, axis=2))
            inside = np.minimum(np.max(d, axis=2), 0.0)
            best = min(best, float(np.min(outside + inside - radii[:, None])))
        return best - self._obstacle_margin

    def workspace(self, point: np.ndarray) -> float:
        """Distance of ``point`` inside the workspace box minus the margin (m); +inf without one."""
        if self._ws_lo is None or self._ws_hi is None:
            return float(np.inf)
        inner = min(*(point - self._ws_lo).tolist(), *(self._ws_hi - point).tolist())
        return float(inner) - self._ws_margin
