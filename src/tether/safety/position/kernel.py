"""The position supervisor's per-command arithmetic as one compiled call.

:class:`PositionSupervisor` reads its inputs, builds verdicts and keeps its robot state
in Python; the numbers in between (the nominal gravity torque, the joint intervals of
:mod:`tether.safety.position.envelope`, and the Cartesian stage: coasting, the swept
workspace and obstacle clearance of :mod:`tether.safety.segment` over the closed form of
:mod:`tether.safety.chain`, and the fallbacks of step 6) run here, in numba, on arrays
packed once per supervisor by :func:`pack`. :func:`step` does one command,
:func:`step_batch` many robots' commands in one call (one row each, each with its own
anchors); :func:`filter_batch` runs the whole array path of
:mod:`tether.safety.position.batch` and of a single action-space call (the action map
of :func:`targets_batch`, previous commands checked, inputs read, both stages,
``_finish``'s arithmetic and the map back, the robots' slots of
:mod:`tether.safety.position.states` read and written) in one call.

Invariant: every result is bit-identical to the Python path's. The functions below are
the Python path's, operation for operation and in the same order (sums accumulate
left to right, the same ``sin``/``cos``/``sqrt`` of the C library, no fast-math and no
fused multiply-add), and the anchors only decide which poses are evaluated, never a
pose's clearance (see :mod:`tether.safety.segment`). ``tests/safety/test_position_corpus.py``
holds both paths to a recorded corpus bit for bit.

The compiled path is used when numba imports and ``TETHER_SAFETY_COMPILED`` is not
``0`` (:data:`AVAILABLE`; tests flip :data:`ENABLED`); otherwise the Python path runs.
Compiled code is cached on disk (``cache=True``) and :func:`warm` compiles it (or
loads the cache) before a supervisor serves its first command.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tether.compiled import compiler, import_numba, warm_once
from tether.safety.reach import SLACK_M
from tether.safety.verdict import (
    ACCELERATION_BIT,
    OBSTACLE_BIT,
    POSITION_BIT,
    TORQUE_BIT,
    VELOCITY_BIT,
    WORKSPACE_BIT,
)

numba: Any = import_numba("TETHER_SAFETY_COMPILED")  # None: plain Python (see tether.compiled)
AVAILABLE = numba is not None

# Whether new supervisors use the compiled path (tests switch it off to run Python).
ENABLED = AVAILABLE

# Columns of the per-joint constant table (``joints``, shape (n, _J)).
(
    _H_LO,
    _H_HI,
    _S_LO,
    _S_HI,
    _STEP,
    _S,
    _TWO_OVER_S,
    _BRAKE,
    _TWO_OVER_B,
    _FAR,
    _KP,
    _KD,
    _TAU,
    _IN_LO,
    _IN_HI,
    _REACH,
    _HALF_OVER_BRAKE,
    _LENGTH,
    _WEIGHT,
) = range(19)
_J = 19
# Slots of the scalar header (``geo``).
(
    _DT,
    _HAS_WS,
    _HAS_OBS,
    _SPACING,
    _MAX_SAMPLES,
    _WS_LX,
    _WS_LY,
    _WS_LZ,
    _WS_HX,
    _WS_HY,
    _WS_HZ,
    _WS_MARGIN,
    _OBS_MARGIN,
    _COLUMN_BEST,
    _BASE,
    _EE_OFFSET,
    _HAS_GRAVITY,
    _CARTESIAN,
    _COASTING,
    _WAY_OUT,
) = range(20)
_GEO = 20
# Output layout of :func:`step`: placed (n), candidate (n), then these slots.
OUT_MOVED = 0  # four squared distances
OUT_JOINT_CHECKS = 4
OUT_INSIDE = 5
OUT_CARTESIAN = 6
OUT_STOPPED = 7  # 1.0: the clearance stopped the command outside the rate limits
OUT_EXTRA = 8
# A command whose last change is within this on every joint (rad) is steady: an arm at
# rest under it shows its sag (``PositionSupervisor._learn_sag``).
STEADY_RAD = 1e-3
# A rest further than this on some joint (rad) from where the latest place of rest began
# is at a new place; an arm this far from it has left it (``PositionSupervisor._learn_sag``).
REST_APART_RAD = 0.05

# Deeper than RETREAT_TOLERANCE_M inside a margin, a command that would be held (or the
# pose) moves out instead: the previous command changed by what regains RETREAT_FRACTION
# of the depth beyond the tolerance where the clearance grows as it does at the arm's
# pose, no joint more than RETREAT_RAD (``SegmentClearance.way_out``, forward differences
# of RETREAT_PROBE_RAD), inside the rate limits like any target. Within the tolerance an
# arm that lags or sags a little into the margin is held, and comes to rest there.
RETREAT_TOLERANCE_M = 0.02
RETREAT_FRACTION = 0.1
RETREAT_RAD = 0.01
RETREAT_PROBE_RAD = 1e-4

# Check bits as globals numba freezes in at compile time (SafetyCheck's own values).
_POSITION = int(POSITION_BIT)
_VELOCITY = int(VELOCITY_BIT)
_ACCELERATION = int(ACCELERATION_BIT)
_TORQUE = int(TORQUE_BIT)
_WORKSPACE = int(WORKSPACE_BIT)
_OBSTACLE = int(OBSTACLE_BIT)


class Packed:
    """One supervisor's constants as the kernel reads them."""

    __slots__ = ("geo", "groups", "joints", "key", "n", "obstacles")

    def __init__(
        self,
        joints: np.ndarray,
        geo: np.ndarray,
        obstacles: np.ndarray,
        groups: np.ndarray,
    ) -> None:
        self.joints = joints
        self.geo = geo
        self.obstacles = obstacles
        self.groups = groups
        self.n = joints.shape[0]
        # Equal keys: equal constants (supervisors under the same limits share a batch).
        self.key = b"|".join(
            (bytes(str(a.shape), "ascii") + a.tobytes()) for a in (joints, geo, obstacles, groups)
        )


def pack(
    envelope: Any,
    segment: Any,
    gravity: Any,
    half_over_brake: Any,
    coasting: float,
    way_out: bool,
) -> Packed:
    """The constants of ``envelope`` (:class:`CommandEnvelope`), ``segment``
    (:class:`SegmentClearance`, with a closed form when active) and ``gravity``
    (:class:`ChainGravity` or None: no gravity); ``way_out``: whether a held command
    takes the way out of a margin (``PositionSupervisorConfig.way_out``)."""
    n = envelope.n
    joints = np.zeros((n, _J))
    for i, row in enumerate(envelope._joints):
        (h_lo, h_hi, s_lo, s_hi, step, s, two_s, brake, two_b, far, kp, kd, tau, hard_in) = row
        joints[i, :_IN_LO] = (
            h_lo,
            h_hi,
            s_lo,
            s_hi,
            step,
            s,
            two_s,
            brake,
            two_b,
            far,
            kp,
            kd,
            tau,
        )
        joints[i, _IN_LO], joints[i, _IN_HI] = hard_in
        joints[i, _HALF_OVER_BRAKE] = half_over_brake[i]
    geo = np.zeros(_GEO)
    geo[_DT] = envelope.dt
    geo[_COASTING] = coasting
    geo[_WAY_OUT] = 1.0 if way_out else 0.0
    if gravity is not None:
        geo[_HAS_GRAVITY] = 1.0
        joints[: n - 1, _WEIGHT] = gravity.weights_nm
    obstacles = np.zeros((0, 5))
    groups = np.zeros((0, 4))
    if segment.active:
        chain = segment.chain
        geo[_CARTESIAN] = 1.0
        geo[_SPACING] = segment._spacing
        geo[_MAX_SAMPLES] = segment._max_samples
        joints[:, _REACH] = segment._reach
        joints[: n - 1, _LENGTH] = chain._lengths
        geo[_BASE] = chain._base
        geo[_EE_OFFSET] = chain._ee_offset
        geo[_COLUMN_BEST] = chain._column_best
        geo[_OBS_MARGIN] = chain._obstacle_margin
        geo[_WS_MARGIN] = chain._ws_margin
        # The checks, in the segment's order: the workspace (when the limits have one)
        # before the obstacles.
        geo[_HAS_WS] = 1.0 if segment.check_bits and segment.check_bits[0] == _WORKSPACE else 0.0
        geo[_HAS_OBS] = 1.0 if _OBSTACLE in segment.check_bits else 0.0
        if chain._ws is not None:
            geo[_WS_LX : _WS_HZ + 1] = chain._ws
        obstacles = np.array(chain._obstacles_k, dtype=np.float64).reshape(-1, 5)
        width = max((len(g[2]) for g in chain._groups_n), default=0)
        groups = np.zeros((len(chain._groups_n), 3 + width))
        for k, (link, radius, offsets, count) in enumerate(chain._groups_n):
            groups[k, 0] = link
            groups[k, 1] = radius
            groups[k, 2] = count
            groups[k, 3 : 3 + count] = offsets
    return Packed(
        np.ascontiguousarray(joints),
        geo,
        np.ascontiguousarray(obstacles),
        np.ascontiguousarray(groups),
    )


def new_anchors(n: int) -> np.ndarray:
    """Anchor state for one robot: per check (workspace, obstacles) a flag (1: set),
    its clearance and its pose (n)."""
    return np.zeros((2, n + 2))


# -- the kernel ------------------------------------------------------------------------


_jit = compiler(numba, error_model="python")


@_jit
def _inset(x: float) -> float:
    return 1e-6 * (1.0 + abs(x))


@_jit
def _edge(lo: float, hi: float, low_side: bool) -> float:
    mid = 0.5 * (lo + hi)
    if low_side:
        x = lo + _inset(lo)
        return x if x < mid else mid
    x = hi - _inset(hi)
    return x if x > mid else mid


@_jit
def _narrow(lo: float, hi: float, earlier: np.ndarray) -> float:
    y = 0.5 * (lo + hi)
    for k in range(0, earlier.shape[0], 2):
        a = earlier[k]
        b = earlier[k + 1]
        a += _inset(a)
        b -= _inset(b)
        if a > b:
            break
        y = a if y < a else b if y > b else y
    return y


@_jit
def _clip(
    joints: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    gravity: np.ndarray,
    reference: np.ndarray,
    change: np.ndarray,
    command: np.ndarray,
    sag: np.ndarray,
    exact: bool,
    out: np.ndarray,
    moved: np.ndarray,
    earlier: np.ndarray,
) -> tuple[bool, int]:
    """``CommandEnvelope.clip`` into ``out``; (inside, checks), the squared moves in
    ``moved``."""
    inside = exact
    checks = 0
    m_pos = 0.0
    m_vel = 0.0
    m_acc = 0.0
    m_tau = 0.0
    for i in range(joints.shape[0]):
        h_lo = joints[i, _H_LO]
        h_hi = joints[i, _H_HI]
        s_lo = joints[i, _S_LO]
        s_hi = joints[i, _S_HI]
        step = joints[i, _STEP]
        s = joints[i, _S]
        two_over_s = joints[i, _TWO_OVER_S]
        brake = joints[i, _BRAKE]
        two_over_b = joints[i, _TWO_OVER_B]
        far = joints[i, _FAR]
        kp = joints[i, _KP]
        kd = joints[i, _KD]
        tau = joints[i, _TAU]
        r = reference[i]
        dp = change[i]
        qi = q[i]
        vi = v[i]
        gi = gravity[i]
        x = command[i]
        sg = sag[i]
        if sg > 0.0:
            s_hi -= sg
        elif sg < 0.0:
            s_lo -= sg
        lo1 = h_lo
        hi1 = h_hi
        a = r - step
        b = r + step
        lo2 = a if a > lo1 else lo1
        hi2 = b if b < hi1 else hi1
        if lo2 > hi2:
            lo2 = hi2 = _edge(lo1, hi1, b < lo1)
        hi3 = hi2
        d = s_hi - r
        if d < far:
            b = r + brake * (math.sqrt(1.0 + d * two_over_b) - 1.0) if d > 0.0 else s_hi
            if b < hi3:
                hi3 = b
        lo3 = lo2
        d = r - s_lo
        if d < far:
            a = r - brake * (math.sqrt(1.0 + d * two_over_b) - 1.0) if d > 0.0 else s_lo
            if a > lo3:
                lo3 = a
        if lo3 > hi3:
            lo3 = hi3 = _edge(lo2, hi2, hi3 < lo2)
        center = r + dp
        a = center - s
        b = center + s
        lo4 = a if a > lo3 else lo3
        hi4 = b if b < hi3 else hi3
        if lo4 > hi4:
            lo4 = hi4 = _edge(lo3, hi3, b < lo3)
        bias = kd * vi - gi
        a = qi + (bias - tau) / kp
        b = qi + (bias + tau) / kp
        lo5 = a if a > lo4 else lo4
        hi5 = b if b < hi4 else hi4
        if lo5 > hi5:
            lo5 = hi5 = _edge(lo4, hi4, b < lo4)

        if exact and lo5 <= x <= hi5:
            out[i] = x
            continue
        inside = False
        y = lo1 if x < lo1 else hi1 if x > hi1 else x
        z = lo2 if y < lo2 else hi2 if y > hi2 else y
        if y != x:
            checks |= _POSITION
            m_pos += (y - x) * (y - x)
        if z != y:
            checks |= _VELOCITY
            m_vel += (z - y) * (z - y)
        y = lo3 if z < lo3 else hi3 if z > hi3 else z
        if y != z:
            checks |= _POSITION
            m_pos += (y - z) * (y - z)
        if y < lo4 or y > hi4:
            d = (lo1 if x < lo1 else hi1 if x > hi1 else x) - r
            ad = d if d > 0.0 else -d
            u = s * (math.sqrt(0.25 + ad * two_over_s) - 0.5)
            z = r + (d if ad <= u else u if d > 0.0 else -u)
            z = lo4 if z < lo4 else hi4 if z > hi4 else z
        else:
            z = y
        if z != y:
            checks |= _ACCELERATION
            m_acc += (z - y) * (z - y)
        y = lo5 if z < lo5 else hi5 if z > hi5 else z
        if y != z:
            checks |= _TORQUE
            m_tau += (y - z) * (y - z)
        lo_in = lo5 + 1e-6 * (1.0 + (lo5 if lo5 > 0.0 else -lo5))
        hi_in = hi5 - 1e-6 * (1.0 + (hi5 if hi5 > 0.0 else -hi5))
        if lo_in <= hi_in:
            y = lo_in if y < lo_in else hi_in if y > hi_in else y
        else:
            earlier[0] = lo1
            earlier[1] = hi1
            earlier[2] = lo2
            earlier[3] = hi2
            earlier[4] = lo3
            earlier[5] = hi3
            earlier[6] = lo4
            earlier[7] = hi4
            y = _narrow(lo5, hi5, earlier)
        h_lo = joints[i, _IN_LO]
        h_hi = joints[i, _IN_HI]
        out[i] = h_lo if y < h_lo else h_hi if y > h_hi else y
    moved[0] = m_pos
    moved[1] = m_vel
    moved[2] = m_acc
    moved[3] = m_tau
    return inside, checks


@_jit
def _hold(joints: np.ndarray, pose: np.ndarray, out: np.ndarray) -> None:
    for i in range(joints.shape[0]):
        lo = joints[i, _IN_LO]
        hi = joints[i, _IN_HI]
        x = pose[i]
        out[i] = lo if x < lo else hi if x > hi else x


@_jit
def _round32(values: np.ndarray) -> None:
    for i in range(values.shape[0]):
        values[i] = np.float64(np.float32(values[i]))


@_jit
def _gravity(joints: np.ndarray, geo: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:
    """``ChainGravity.torques`` (zeros without a closed form)."""
    n = joints.shape[0]
    for i in range(n):
        out[i] = 0.0
    if geo[_HAS_GRAVITY] == 0.0:
        return
    # pitch[link - 1] = q_1 + ... + q_link, accumulated left to right.
    pitch = np.empty(n - 1)
    total = 0.0
    for link in range(1, n):
        total = q[link] if link == 1 else total + q[link]
        pitch[link - 1] = total
    carried = 0.0
    for link in range(n - 1, 0, -1):
        carried += joints[link - 1, _WEIGHT] * math.sin(pitch[link - 1])
        out[link] = carried


@_jit
def _frames(
    joints: np.ndarray,
    geo: np.ndarray,
    q: np.ndarray,
    sin: np.ndarray,
    cos: np.ndarray,
    r0: np.ndarray,
    z0: np.ndarray,
) -> None:
    n = joints.shape[0]
    sin[0] = 0.0
    cos[0] = 1.0
    total = 0.0
    for link in range(1, n):
        total = q[link] if link == 1 else total + q[link]
        sin[link] = math.sin(total)
        cos[link] = math.cos(total)
    r0[0] = 0.0
    z0[0] = geo[_BASE]
    for link in range(n - 1):
        r0[link + 1] = r0[link] + joints[link, _LENGTH] * sin[link]
        z0[link + 1] = z0[link] + joints[link, _LENGTH] * cos[link]


@_jit
def _obstacles(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    q: np.ndarray,
    scratch: np.ndarray,
) -> float:
    """``ChainClearance.obstacles``."""
    sin = scratch[0]
    cos = scratch[1]
    r0 = scratch[2]
    z0 = scratch[3]
    _frames(joints, geo, q, sin, cos, r0, z0)
    yaw_cos = math.cos(q[0])
    yaw_sin = math.sin(q[0])
    best = geo[_COLUMN_BEST] if yaw_cos == yaw_cos else math.inf
    for o in range(obstacles.shape[0]):
        cx = obstacles[o, 0]
        cy = obstacles[o, 1]
        cz = obstacles[o, 2]
        radius = obstacles[o, 3]
        k = obstacles[o, 4]
        a = cx * yaw_cos + cy * yaw_sin
        for g in range(groups.shape[0]):
            link = int(groups[g, 0])
            sphere_radius = groups[g, 1]
            count = int(groups[g, 2])
            r = r0[link]
            dz = z0[link] - cz
            base = r * (r - 2.0 * a) + k + dz * dz
            slope = 2.0 * (sin[link] * (r - a) + cos[link] * dz)
            # bisect_left(offsets, -slope/2), as Python's bisect compares.
            target = -0.5 * slope
            lo = 0
            hi = count
            while lo < hi:
                mid = (lo + hi) // 2
                if groups[g, 3 + mid] < target:
                    lo = mid + 1
                else:
                    hi = mid
            i = lo
            d2 = math.inf
            offset = groups[g, 3 + (i - 1 if i else 0)]
            x = base + offset * (slope + offset)
            if x < d2:
                d2 = x
            if 0 < i < count:
                offset = groups[g, 3 + i]
                x = base + offset * (slope + offset)
                if x < d2:
                    d2 = x
            d = math.sqrt(d2 if d2 > 0.0 else 0.0) - sphere_radius - radius
            if d < best:
                best = d
    return float(best - geo[_OBS_MARGIN])


@_jit
def _workspace(joints: np.ndarray, geo: np.ndarray, q: np.ndarray, scratch: np.ndarray) -> float:
    """``ChainClearance.workspace`` (a workspace box is present)."""
    n = joints.shape[0]
    sin = scratch[0]
    cos = scratch[1]
    r0 = scratch[2]
    z0 = scratch[3]
    _frames(joints, geo, q, sin, cos, r0, z0)
    yaw_cos = math.cos(q[0])
    yaw_sin = math.sin(q[0])
    last = n - 1
    rr = r0[last] + geo[_EE_OFFSET] * sin[last]
    x = rr * yaw_cos
    y = rr * yaw_sin
    z = z0[last] + geo[_EE_OFFSET] * cos[last]
    # min() of Python: the first of the smallest, a NaN first stays.
    m = x - geo[_WS_LX]
    c = y - geo[_WS_LY]
    if c < m:
        m = c
    c = z - geo[_WS_LZ]
    if c < m:
        m = c
    c = geo[_WS_HX] - x
    if c < m:
        m = c
    c = geo[_WS_HY] - y
    if c < m:
        m = c
    c = geo[_WS_HZ] - z
    if c < m:
        m = c
    return float(m - geo[_WS_MARGIN])


@_jit
def _measure(
    check: int,
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    q: np.ndarray,
    scratch: np.ndarray,
) -> float:
    if check == 0:
        return _workspace(joints, geo, q, scratch)
    return _obstacles(joints, geo, obstacles, groups, q, scratch)


@_jit
def _check_kind(geo: np.ndarray, index: int) -> int:
    """Which measure check ``index`` is (0 workspace, 1 obstacles), in the segment's order."""
    if geo[_HAS_WS] != 0.0:
        return index
    return 1


@_jit
def _n_checks(geo: np.ndarray) -> int:
    return int(geo[_HAS_WS] != 0.0) + int(geo[_HAS_OBS] != 0.0)


@_jit
def _proves_clear(
    joints: np.ndarray, geo: np.ndarray, anchors: np.ndarray, poses: np.ndarray, count: int
) -> bool:
    """``SegmentClearance.proves_clear`` over ``poses[:count]``."""
    n = joints.shape[0]
    checks = _n_checks(geo)
    for index in range(checks):
        if anchors[index, 0] == 0.0:
            return False
    if checks == 2:
        c0 = anchors[0, 1]
        c1 = anchors[1, 1]
        for p in range(count):
            s0 = 0.0
            s1 = 0.0
            for j in range(n):
                r = joints[j, _REACH]
                x = poses[p, j]
                d = x - anchors[0, 2 + j]
                s0 += r * (d if d > 0.0 else -d)
                d = x - anchors[1, 2 + j]
                s1 += r * (d if d > 0.0 else -d)
            if not (c0 - s0 > SLACK_M and c1 - s1 > SLACK_M):
                return False
        return True
    for index in range(checks):
        c = anchors[index, 1]
        for p in range(count):
            total = 0.0
            for j in range(n):
                d = poses[p, j] - anchors[index, 2 + j]
                total += joints[j, _REACH] * (d if d > 0.0 else -d)
            if not c - total > SLACK_M:
                return False
    return True


@_jit
def _anchor_at(anchors: np.ndarray, index: int, pose: np.ndarray, clearance: float) -> None:
    if math.isfinite(clearance):
        anchors[index, 0] = 1.0
        anchors[index, 1] = clearance
        anchors[index, 2:] = pose
    else:
        anchors[index, 0] = 0.0
        anchors[index, 1] = 0.0


@_jit
def _sweep(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    anchors: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    kind: int,
    index: int,
    at_start: float,
    length: float,
    scratch: np.ndarray,
    pose: np.ndarray,
) -> float:
    """``SegmentClearance._sweep`` (with a reach bound)."""
    n = joints.shape[0]
    ahead = _measure(kind, joints, geo, obstacles, groups, end, scratch)
    if ahead - length > SLACK_M or (
        at_start > SLACK_M and ahead > SLACK_M and at_start + ahead - length > 2 * SLACK_M
    ):
        _anchor_at(anchors, index, end, ahead)
        return 1.0
    spacing = geo[_SPACING]
    max_samples = int(geo[_MAX_SAMPLES])
    # Python's integers do not overflow; int64 does: ratios at or past a bound are
    # clamped before ceil, where the Python path's min()/loop bound gives the same.
    count = 1
    if length > spacing:
        ratio = length / spacing
        count = max_samples if ratio >= max_samples else math.ceil(ratio)
    step = length / count
    end_clearance = ahead
    threshold = 0.0
    now_known = False
    now = 0.0
    last_set = False  # 1: the end, 2: the pose
    last_is_end = False
    last_clearance = 0.0
    clear = 1.0
    k = 1
    bounded = step > 0.0
    if bounded and at_start > SLACK_M:
        ratio = (at_start - SLACK_M) / step
        k = count + 1 if ratio > count else max(1, math.ceil(ratio))
    while k <= count:
        if bounded and end_clearance - (count - k) * step > threshold + SLACK_M:
            last_set = True
            last_is_end = True
            last_clearance = end_clearance
            break
        if k == count:
            for j in range(n):
                pose[j] = end[j]
        else:
            f = k / count
            for j in range(n):
                pose[j] = start[j] + f * (end[j] - start[j])
        ahead = _measure(kind, joints, geo, obstacles, groups, pose, scratch)
        last_set = True
        last_is_end = False
        last_clearance = ahead
        if not ahead > 0.0:
            if not now_known:
                now = _measure(kind, joints, geo, obstacles, groups, start, scratch)
                now_known = True
                if now < 0.0:
                    threshold = now
            if not ahead > now:
                clear = (k - 1) / count
                break
        k += 1
        if bounded and ahead - threshold > SLACK_M:
            ratio = (ahead - threshold - SLACK_M) / step
            k = count + 1 if ratio > count else k + max(0, math.ceil(ratio) - 1)
    if last_set:
        _anchor_at(anchors, index, end if last_is_end else pose, last_clearance)
    return clear


@_jit
def _clear_fraction(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    anchors: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    scratch: np.ndarray,
    pose: np.ndarray,
) -> tuple[int, float]:
    """``SegmentClearance.clear_fraction`` (bits, fraction)."""
    n = joints.shape[0]
    checks = _n_checks(geo)
    # _margins: the length and each anchor's distances to the ends, by the reach bound.
    length = 0.0
    s0 = 0.0
    e0 = 0.0
    s1 = 0.0
    e1 = 0.0
    for j in range(n):
        r = joints[j, _REACH]
        x = start[j]
        y = end[j]
        d = y - x
        length += r * (d if d > 0.0 else -d)
        if anchors[0, 0] != 0.0:
            d = x - anchors[0, 2 + j]
            s0 += r * (d if d > 0.0 else -d)
            d = y - anchors[0, 2 + j]
            e0 += r * (d if d > 0.0 else -d)
        if checks > 1 and anchors[1, 0] != 0.0:
            d = x - anchors[1, 2 + j]
            s1 += r * (d if d > 0.0 else -d)
            d = y - anchors[1, 2 + j]
            e1 += r * (d if d > 0.0 else -d)
    bits = 0
    fraction = 1.0
    for index in range(checks):
        if anchors[index, 0] == 0.0:
            at_start = -math.inf
            at_end = -math.inf
        elif index == 0:
            at_start = anchors[0, 1] - s0
            at_end = anchors[0, 1] - e0
        else:
            at_start = anchors[1, 1] - s1
            at_end = anchors[1, 1] - e1
        if at_start > SLACK_M and at_end > SLACK_M:
            continue
        kind = _check_kind(geo, index)
        clear = _sweep(
            joints,
            geo,
            obstacles,
            groups,
            anchors,
            start,
            end,
            kind,
            index,
            at_start,
            length,
            scratch,
            pose,
        )
        if clear < 1.0:
            bits |= _WORKSPACE if kind == 0 else _OBSTACLE
            fraction = clear if clear < fraction else fraction
    return bits, fraction


@_jit
def _way_out(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    q: np.ndarray,
    bits: int,
    scratch: np.ndarray,
    probed: np.ndarray,
    out: np.ndarray,
) -> bool:
    """``SegmentClearance.way_out`` with the ``RETREAT_*`` constants into ``out``; False
    for its None."""
    n = joints.shape[0]
    worst = -RETREAT_TOLERANCE_M
    chosen = -1
    for index in range(_n_checks(geo)):
        kind = _check_kind(geo, index)
        if bits & (_WORKSPACE if kind == 0 else _OBSTACLE):
            clearance = _measure(kind, joints, geo, obstacles, groups, q, scratch)
            if clearance < worst:
                worst = clearance
                chosen = kind
    if chosen < 0:
        return False
    probed[:] = q
    squared = 0.0
    for j in range(n):
        probed[j] = q[j] + RETREAT_PROBE_RAD
        grown = _measure(chosen, joints, geo, obstacles, groups, probed, scratch)
        g = (grown - worst) / RETREAT_PROBE_RAD
        probed[j] = q[j]
        out[j] = g
        squared += g * g
    if not squared > 0.0:
        return False
    scale = (-RETREAT_TOLERANCE_M - worst) * RETREAT_FRACTION / squared
    for j in range(n):
        out[j] = out[j] * scale
    # max() of Python: the first of the largest, a NaN first stays.
    largest = abs(out[0])
    for j in range(1, n):
        a = abs(out[j])
        if a > largest:
            largest = a
    if largest > RETREAT_RAD:
        shrink = RETREAT_RAD / largest
        for j in range(n):
            out[j] = out[j] * shrink
    return True


@_jit
def _cartesian(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    anchors: np.ndarray,
    q: np.ndarray,
    v: np.ndarray,
    gravity: np.ndarray,
    reference: np.ndarray,
    change: np.ndarray,
    held: bool,
    candidate: np.ndarray,
    sag: np.ndarray,
    work: np.ndarray,
    scratch: np.ndarray,
    moved: np.ndarray,
    earlier: np.ndarray,
) -> tuple[int, bool]:
    """``PositionSupervisor._cartesian``: the bits breached and whether the command
    was stopped outside the rate limits; ``candidate`` replaced by the command to execute
    when any bit is."""
    n = joints.shape[0]
    poses = work[:4]
    stop = work[4]
    trial = work[5]
    pose = work[6]
    fallback = work[7]
    settled = work[8]
    settled_reference = work[9]
    arrives = work[10]
    pose_command = work[11]
    retreat = work[12]
    probed = work[13]
    for j in range(n):
        settled[j] = candidate[j] + sag[j]
        settled_reference[j] = reference[j] + sag[j] if held else q[j]
        pose_command[j] = q[j] - sag[j]  # the command that holds the arm where it is
    speed = 0.0
    for j in range(n):
        a = abs(v[j])
        if j == 0 or a > speed:
            speed = a
    coasting_check = speed > geo[_COASTING]
    dt = geo[_DT]
    if coasting_check:
        for j in range(n):
            y = v[j]
            stop[j] = q[j] + y * (abs(y) * joints[j, _HALF_OVER_BRAKE] + dt)
    count = 2
    poses[0, :] = q
    poses[1, :] = settled
    if held:
        poses[count, :] = settled_reference
        count += 1
    if coasting_check:
        poses[count, :] = stop
        count += 1
    if _proves_clear(joints, geo, anchors, poses, count):
        return 0, False
    bits, fraction = _clear_fraction(
        joints, geo, obstacles, groups, anchors, q, settled, scratch, pose
    )
    if held:
        deeper, _ = _clear_fraction(
            joints, geo, obstacles, groups, anchors, settled_reference, settled, scratch, pose
        )
        if deeper:
            bits |= deeper
            fraction = 0.0
    coasting = False
    if coasting_check:
        coast_bits, _ = _clear_fraction(
            joints, geo, obstacles, groups, anchors, q, stop, scratch, pose
        )
        if coast_bits:
            bits |= coast_bits
            coasting = True
    if not bits:
        return 0, False
    if coasting:
        fraction = 0.0
    # A plain bool, not a literal (tether.compiled).
    not_exact = bool(False)  # noqa: UP018
    # The targets in turn, each made only when the one before it breached: backed off
    # along the segment, the previous command moved part of the way out of a margin the
    # arm is deep inside, the previous command, the pose (the command that holds the arm
    # there: the pose less the sag); each judged where the arm settles under it.
    for t in range(4):
        if t == 0:
            if not fraction > 0.0:
                continue
            for j in range(n):
                a = q[j]
                fallback[j] = a + fraction * (settled[j] - a) - sag[j]
            target = fallback
        elif t == 1:
            if (
                not held
                or geo[_WAY_OUT] == 0.0
                or not _way_out(joints, geo, obstacles, groups, q, bits, scratch, probed, retreat)
            ):
                continue
            for j in range(n):
                retreat[j] = reference[j] + retreat[j]
            target = retreat
        elif t == 2:
            if not held:
                continue
            target = reference
        else:
            target = pose_command
        _clip(
            joints, q, v, gravity, reference, change, target, sag, not_exact, trial, moved, earlier
        )
        _round32(trial)
        for j in range(n):
            arrives[j] = trial[j] + sag[j]
        args = (joints, geo, obstacles, groups, anchors)
        b1, _ = _clear_fraction(*args, q, arrives, scratch, pose)
        if not b1:
            if held:
                b2, _ = _clear_fraction(*args, settled_reference, arrives, scratch, pose)
                if b2:
                    continue
            candidate[:] = trial
            return bits, False
    if held:
        _hold(joints, reference, trial)
        _round32(trial)
        for j in range(n):
            arrives[j] = trial[j] + sag[j]
        b1, _ = _clear_fraction(joints, geo, obstacles, groups, anchors, q, arrives, scratch, pose)
        if not b1:
            candidate[:] = trial
            return bits, True
    _hold(joints, pose_command, trial)
    _round32(trial)
    candidate[:] = trial
    return bits, True


@_jit
def _step_into(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    anchors: np.ndarray,
    inputs: np.ndarray,
    exact: bool,
    held: bool,
    out: np.ndarray,
    gravity: np.ndarray,
    earlier: np.ndarray,
    work: np.ndarray,
    scratch: np.ndarray,
    spare: np.ndarray,
) -> None:
    """One command into ``out``; the last five arrays are work space (:func:`_buffers`),
    written before they are read."""
    n = joints.shape[0]
    q = inputs[:n]
    v = inputs[n : 2 * n]
    reference = inputs[2 * n : 3 * n]
    change = inputs[3 * n : 4 * n]
    command = inputs[4 * n : 5 * n]
    sag = inputs[5 * n : 6 * n]
    placed = out[:n]
    candidate = out[n : 2 * n]
    extra = out[2 * n :]
    _gravity(joints, geo, q, gravity)
    moved = extra[OUT_MOVED : OUT_MOVED + 4]
    inside, checks = _clip(
        joints, q, v, gravity, reference, change, command, sag, exact, placed, moved, earlier
    )
    if not inside:
        _round32(placed)
    extra[OUT_JOINT_CHECKS] = checks
    extra[OUT_INSIDE] = 1.0 if inside else 0.0
    candidate[:] = placed
    bits = 0
    stopped = False
    if geo[_CARTESIAN] != 0.0:
        bits, stopped = _cartesian(
            joints,
            geo,
            obstacles,
            groups,
            anchors,
            q,
            v,
            gravity,
            reference,
            change,
            held,
            candidate,
            sag,
            work,
            scratch,
            spare,
            earlier,
        )
    extra[OUT_CARTESIAN] = bits
    extra[OUT_STOPPED] = 1.0 if stopped else 0.0


@_jit
def _buffers(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Work space for :func:`_step_into`: gravity (n), earlier (8), work (14, n),
    scratch (4, n), spare (4)."""
    return np.empty(n), np.empty(8), np.empty((14, n)), np.empty((4, n)), np.empty(4)


@_jit
def step(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    anchors: np.ndarray,
    inputs: np.ndarray,
    exact: bool,
    held: bool,
) -> np.ndarray:
    """One command. ``inputs`` (6n,): q, q̇, reference, previous change, command (or a
    backup's target with ``exact`` False), the arm's sag, one after the other; ``held``:
    the reference is a previous command.
    Returns placed (n, float32 values), candidate (n), moved (4), joint checks, inside,
    Cartesian bits, stopped (``OUT_*``); ``anchors`` is updated."""
    n = joints.shape[0]
    out = np.empty(2 * n + OUT_EXTRA)
    gravity, earlier, work, scratch, spare = _buffers(n)
    _step_into(joints, geo, obstacles, groups, anchors, inputs, exact, held, out,
               gravity, earlier, work, scratch, spare)  # fmt: skip
    return out


@_jit
def step_batch(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    anchors: np.ndarray,
    inputs: np.ndarray,
    exact: np.ndarray,
    held: np.ndarray,
) -> np.ndarray:
    """:func:`step` for many robots under the same limits: row ``i`` of ``anchors``
    (rows, 2, n + 2), ``inputs`` (rows, 6n), ``exact`` and ``held`` (rows,) is robot
    ``i``'s; returns (rows, 2n + OUT_EXTRA), each row what :func:`step` returns for it."""
    rows = inputs.shape[0]
    n = joints.shape[0]
    out = np.empty((rows, 2 * n + OUT_EXTRA))
    gravity, earlier, work, scratch, spare = _buffers(n)
    for i in range(rows):
        _step_into(joints, geo, obstacles, groups, anchors[i], inputs[i], exact[i], held[i],
                   out[i], gravity, earlier, work, scratch, spare)  # fmt: skip
    return out


@_jit
def targets_batch(
    actions: np.ndarray, center: np.ndarray, half: np.ndarray, clamp: float
) -> np.ndarray:
    """The joint targets (float32) normalized ``actions`` (float32, rows × n) ask for:
    ``center + half · clamp(a)`` in float64 per element, a non-finite action kept as it
    is (``PositionActionSupervisor._to_target``, row by row)."""
    rows, n = actions.shape
    out = np.empty((rows, n), np.float32)
    for i in range(rows):
        for j in range(n):
            x = np.float64(actions[i, j])
            if np.isfinite(x):
                y = -clamp if x < -clamp else (clamp if x > clamp else x)
                out[i, j] = np.float32(center[j] + half[j] * y)
            else:
                out[i, j] = np.float32(x)
    return out


# Columns of the tables of tether.safety.position.states that filter_batch reads and writes.
FLAGS = 5
FLAG_HERE, FLAG_HAS_LAST, FLAG_HAS_POSE, FLAG_ACTION_HERE, FLAG_HAS_ACTION = range(FLAGS)
WIDE = 7  # float64 rows
WIDE_CANDIDATE, WIDE_CHANGE, WIDE_POSE, WIDE_SAG = range(4)
WIDE_REST_SAG, WIDE_EARLIER_SAG, WIDE_REST_POSE = range(4, WIDE)
NARROW = 3  # float32 rows
NARROW_OUT, NARROW_ACTION, NARROW_COMMAND = range(NARROW)

# What filter_batch found for each row (the CODE_KIND column of its ``codes``).
ROW_PASSED = 0  # passed, no check raised: the shared PASSED verdict
ROW_FLAGGED = 1  # passed as proposed, with checks raised
ROW_CORRECTED = 2  # moved by the joint or Cartesian stage
ROW_REFUSED = 3  # for the per-row path: a previous command not the robot's own, or an
# unreadable observation or non-finite proposal; nothing of it was written
ROW_OUTSIDE = 4  # its robot's state is not in its slot (nothing was done to any row)
# Columns of filter_batch's ``codes``: a row's kind and check bits. Its ``report`` row:
# the step row (2n + OUT_EXTRA values), then a corrected row's proposed command (n).
CODE_KIND, CODE_CHECKS = range(2)


def report_width(n: int) -> int:
    """Columns of a row of :func:`filter_batch`'s ``report`` for ``n`` joints."""
    return 3 * n + OUT_EXTRA


@_jit
def filter_batch(
    joints: np.ndarray,
    geo: np.ndarray,
    obstacles: np.ndarray,
    groups: np.ndarray,
    obs: np.ndarray,
    q_start: int,
    v_start: int,
    bounds: np.ndarray,
    dt: float,
    proposals: np.ndarray,
    has_previous: np.ndarray,
    handed: np.ndarray,
    acting: bool,
    center: np.ndarray,
    half: np.ndarray,
    clamp: float,
    slots: np.ndarray,
    flags: np.ndarray,
    wide: np.ndarray,
    narrow: np.ndarray,
    bits: np.ndarray,
    anchor_table: np.ndarray,
    codes: np.ndarray,
    report: np.ndarray,
) -> np.ndarray:
    """Many robots' commands, each row what ``PositionSupervisor.filter`` does with it:
    read, checked, answered and its robot's state written back to its slot
    (``tether.safety.position.states``: ``flags``, ``wide``, ``narrow`` with ``bits`` its
    bits, ``anchor_table``; columns ``FLAG_*``, ``WIDE_*``, ``NARROW_*``).

    Row ``i``: observation ``obs[i]`` (float32 or float64; joint positions and
    velocities from ``q_start`` and ``v_start``, plausible within ``bounds``: low, high,
    -vmax, vmax), proposal ``proposals[i]`` (float32: a command, or with ``acting`` a
    normalized action, mapped as :func:`targets_batch` maps it with ``center``, ``half``
    and ``clamp``), slot ``slots[i]``, and, where
    ``has_previous[i]``, the bits of its previous command (the next row of ``handed``;
    with ``acting``, of its previous action, the action level's own when it equals the
    slot's last action and the command behind it is the position supervisor's last). A
    row steering from its own last command holds its last change; one with no previous
    command steers from its pose and velocity × ``dt``; one whose previous command is
    not its own is refused (``ROW_REFUSED``: the per-row path steers from it). With
    ``acting`` the action returned is the proposal where passed, else the executed
    command mapped back, ``(command - center) / half``.

    Writes each row's kind (``ROW_*``) and check bits to ``codes[i]`` (``CODE_*``), its
    :func:`step` row and, for a ``ROW_CORRECTED`` row, its proposed command (as float64)
    to ``report[i]``
    (:func:`report_width`), both at least ``rows`` long (the caller's buffers: an array
    handed back to Python costs more than the arithmetic of a row). Returns the executed
    commands (float32), with ``acting`` the actions returned. When any row the kernel
    would not refuse unread has its state outside its slot, every such row is
    ``ROW_OUTSIDE`` and nothing else is done."""
    rows, n = proposals.shape
    command32 = targets_batch(proposals, center, half, clamp) if acting else proposals
    out = np.empty((rows, n), np.float32)
    returned = np.empty((rows, n), np.float32) if acting else out
    kinds = codes[:rows, CODE_KIND]
    checks = codes[:rows, CODE_CHECKS]
    stepped = 2 * n + OUT_EXTRA  # the report's step row, then the command
    for i in range(rows):
        kinds[i] = ROW_PASSED
        checks[i] = 0
    # First what needs no state: a row _read_state or _command refuses (an implausible
    # reading, a non-finite proposal; NaN fails every comparison) is refused whatever
    # its slot holds; then every other row's state must be in its slot.
    outside = False
    for i in range(rows):
        usable = True
        for j in range(n):
            q = np.float64(obs[i, q_start + j])
            v = np.float64(obs[i, v_start + j])
            if not (q >= bounds[0, j] and q <= bounds[1, j]):
                usable = False
            if not (v >= bounds[2, j] and v <= bounds[3, j]):
                usable = False
            if not np.isfinite(np.float64(command32[i, j])):
                usable = False
        slot = slots[i]
        if not usable:
            kinds[i] = ROW_REFUSED
        elif (
            slot < 0 or not flags[slot, FLAG_HERE] or (acting and not flags[slot, FLAG_ACTION_HERE])
        ):
            kinds[i] = ROW_OUTSIDE
            outside = True
    if outside:
        return returned
    inputs = np.empty(6 * n)
    gravity, earlier, work, scratch, spare = _buffers(n)
    steady = np.float64(STEADY_RAD)
    apart = np.float64(REST_APART_RAD)
    # A plain bool, not a literal (tether.compiled).
    exact = bool(True)  # noqa: UP018
    given = 0
    for i in range(rows):
        slot = slots[i]
        held = has_previous[i]
        if held:
            given += 1
        if kinds[i] == ROW_REFUSED:
            continue
        if held:
            own = flags[slot, FLAG_HAS_LAST] and (flags[slot, FLAG_HAS_ACTION] or not acting)
            for j in range(n):
                if acting:
                    if handed[given - 1, j] != bits[slot, NARROW_ACTION, j]:
                        own = False
                    if bits[slot, NARROW_COMMAND, j] != bits[slot, NARROW_OUT, j]:
                        own = False
                elif handed[given - 1, j] != bits[slot, NARROW_OUT, j]:
                    own = False
            if not own:
                kinds[i] = ROW_REFUSED
                continue
        for j in range(n):
            q = np.float64(obs[i, q_start + j])
            v = np.float64(obs[i, v_start + j])
            inputs[j] = q
            inputs[n + j] = v
            inputs[4 * n + j] = np.float64(command32[i, j])
            if held:
                inputs[2 * n + j] = wide[slot, WIDE_CANDIDATE, j]
                inputs[3 * n + j] = wide[slot, WIDE_CHANGE, j]
            else:
                inputs[2 * n + j] = q
                inputs[3 * n + j] = v * dt
        if held:  # PositionSupervisor._learn_sag
            rest = True
            far = False
            for j in range(n):
                if abs(inputs[n + j]) > geo[_COASTING] or abs(inputs[3 * n + j]) > steady:
                    rest = False
                if abs(inputs[j] - wide[slot, WIDE_REST_POSE, j]) > apart:
                    far = True
            for j in range(n):
                if rest:
                    if far:  # a new place of rest
                        wide[slot, WIDE_EARLIER_SAG, j] = wide[slot, WIDE_REST_SAG, j]
                        wide[slot, WIDE_REST_POSE, j] = inputs[j]
                    d = inputs[j] - inputs[2 * n + j]
                    bound = joints[j, _TAU] / joints[j, _KP]
                    d = -bound if d < -bound else bound if d > bound else d
                    wide[slot, WIDE_REST_SAG, j] = d
                    wide[slot, WIDE_SAG, j] = d
                elif far:
                    a = wide[slot, WIDE_REST_SAG, j]
                    b = wide[slot, WIDE_EARLIER_SAG, j]
                    wide[slot, WIDE_SAG, j] = (a if abs(a) < abs(b) else b) if a * b > 0.0 else 0.0
        for j in range(n):
            inputs[5 * n + j] = wide[slot, WIDE_SAG, j]
        row = report[i, :stepped]
        _step_into(joints, geo, obstacles, groups, anchor_table[slot], inputs, exact, held, row,
                   gravity, earlier, work, scratch, spare)  # fmt: skip
        # _finish: the candidate is the Cartesian stage's command where it moved one,
        # else the joint stage's; the executed command is the proposal itself where
        # both left it inside.
        cartesian = np.int64(row[2 * n + OUT_CARTESIAN])
        moved = cartesian != 0
        keep = row[2 * n + OUT_INSIDE] != 0.0 and not moved
        raised = np.int64(row[2 * n + OUT_JOINT_CHECKS]) | cartesian
        stopped = row[2 * n + OUT_STOPPED] != 0.0  # its change is remembered as none
        same = True
        for j in range(n):
            x = row[n + j] if moved else row[j]
            executed = command32[i, j] if keep else np.float32(x)
            out[i, j] = executed
            if x != inputs[4 * n + j]:
                same = False
            wide[slot, WIDE_CANDIDATE, j] = x
            wide[slot, WIDE_CHANGE, j] = 0.0 if stopped else x - inputs[2 * n + j]
            wide[slot, WIDE_POSE, j] = inputs[j]
            narrow[slot, NARROW_OUT, j] = executed
        flags[slot, FLAG_HAS_LAST] = True
        flags[slot, FLAG_HAS_POSE] = True
        checks[i] = raised
        if not same:
            kinds[i] = ROW_CORRECTED
            for j in range(n):  # the proposed command, which only a correction's verdict reads
                report[i, stepped + j] = np.float64(command32[i, j])
        elif raised != 0:
            kinds[i] = ROW_FLAGGED
        if acting:
            for j in range(n):
                if same:
                    returned[i, j] = proposals[i, j]
                else:
                    returned[i, j] = np.float32((np.float64(out[i, j]) - center[j]) / half[j])
                narrow[slot, NARROW_ACTION, j] = returned[i, j]
                narrow[slot, NARROW_COMMAND, j] = out[i, j]
            flags[slot, FLAG_HAS_ACTION] = True
    return returned


def _compile_all() -> None:
    """Compile every kernel function for the signatures serving uses."""
    n = 4
    joints = np.ones((n, _J))
    geo = np.zeros(_GEO)
    geo[_CARTESIAN] = 1.0
    geo[_HAS_WS] = geo[_HAS_OBS] = 1.0
    geo[_SPACING] = geo[_MAX_SAMPLES] = 1.0
    obstacles = np.zeros((1, 5))
    groups = np.zeros((1, 4))
    groups[0, 2] = 1.0
    inputs = np.zeros(6 * n)
    step(joints, geo, obstacles, groups, new_anchors(n), inputs, True, False)
    step_batch(
        joints,
        geo,
        obstacles,
        groups,
        new_anchors(n)[None],
        inputs[None],
        np.ones(1, np.bool_),
        np.zeros(1, np.bool_),
    )
    targets_batch(np.zeros((1, n), np.float32), np.zeros(n), np.ones(n), 1e6)
    # batch._array_group's argument layouts: observations of either float width.
    slots = np.zeros(1, np.intp)
    flags = np.ones((1, FLAGS), np.bool_)
    wide, narrow = np.zeros((1, WIDE, n)), np.zeros((1, NARROW, n), np.float32)
    proposals = np.zeros((1, n), np.float32)
    anchors = new_anchors(n)[None]
    codes, report = np.zeros((1, 2), np.int64), np.zeros((1, report_width(n)))
    for obs in (np.zeros((1, 2 * n)), np.zeros((1, 2 * n), np.float32)):
        filter_batch(joints, geo, obstacles, groups, obs, 0, n, np.zeros((4, n)), 0.01, proposals,
                     np.ones(1, np.bool_), proposals.view(np.uint32), True, np.zeros(n), np.ones(n), 1e6,
                     slots, flags, wide, narrow, narrow.view(np.uint32), anchors, codes, report)  # fmt: skip


warm = warm_once(AVAILABLE, _compile_all)
"""Compile the kernel (or load it from the cache) before it serves; seconds taken (0.0
after the first call, or when the compiled path is off)."""
