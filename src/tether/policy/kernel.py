"""An ``mlp_gaussian`` policy's whole row, observation in, bounded action out, as one
compiled call.

:func:`act_rows` does for every row what the engine's other paths do in several numpy
and torch calls: normalize the raw observation, apply the goal shift (if the version has
one), run the trunk and the fused head, clamp the log-std, sample (``u = mu + std * z``
with the caller's noise), squash, compute the log-prob, scale to the action bounds and
apply the command-step frame (if the bundle has one). It runs in numba with the GIL
released; the constants come packed once per weight version by :func:`pack`.

Invariant: a row's result is bit-identical whatever batch it arrives in, and on every
x86_64 CPU, by construction: every number of a row is computed from that row alone, by
the same sequence of IEEE operations.

- A dense layer computes ``out[j] = b[j] + x[0] W[0, j] + x[1] W[1, j] + ...`` with
  ``k`` ascending, each product rounded, then added (no fused multiply-add: numba emits
  separate ``fmul`` and ``fadd`` with no fast-math flags, and LLVM does not contract
  those; ``tests/policy/test_compiled_path.py`` checks the machine code for ``vfmadd``).
  The compiler vectorises across the output units ``j`` and the vector body and its
  scalar tail perform the same two operations per unit, so no unit depends on where it
  falls. Rows go through the layers four at a time to share each weight load (a last
  group of two or three beside rows whose results are dropped); a lone row takes the
  same operations one row at a time.
- Transcendental functions (``exp``, ``expm1``, ``tanh``, the softplus' ``log1p``) are
  the double-precision routines below, made of additions, multiplications, divisions
  and an exact ``ldexp`` only, then rounded to float32: no C library (whose x86_64 builds
  choose FMA variants by CPU) and no SIMD math (whose body and tail differ).
- Everything else mirrors the numpy paths operation for operation: float32 for the
  normalization, the goal shift, the squash and the scaling; float64 for the frame
  (``CommandStepFrame.actions``), so those stages give the numpy paths' bits for the same
  inputs; only the layers' summation order and the transcendentals' last bit differ
  from them.

``tests/policy/test_compiled_path.py`` holds the compiled code to its Python twin bit for
bit, and to itself compiled for other x86_64 targets (the SSE2 baseline; AVX2 with FMA
on offer).

The compiled path is used where numba imports and ``TETHER_POLICY_COMPILED`` is not
``0`` (:data:`AVAILABLE`); without it these functions are plain Python over numpy
float32 scalars and compute the same bits, far too slowly to serve (the engine refuses
``execution="compiled"`` then, and ``auto`` does not consider it).

Beside the row, :func:`all_within` checks a batch's observations in one compiled pass
(every entry finite and within a bound): the engine's check on every path, and the
serving pipeline's bound check; without numba it is the numpy expression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tether.compiled import compiler, import_numba, warm_once, writable

numba: Any = import_numba("TETHER_POLICY_COMPILED")  # None: plain Python (see tether.compiled)
AVAILABLE = numba is not None

ACTIVATION_CODES = {"relu": 0, "tanh": 1, "elu": 2, "silu": 3}

# Slots of the int64 layout header; the layers' (in, out, weight offset, bias offset)
# follow from _LAYERS on, the trunk and head first, then the goal shift's.
(
    _OBS_DIM,
    _ACT_DIM,
    _ACTIVATION,
    _N_LAYERS,
    _N_GOAL_LAYERS,
    _GOAL_START,
    _GOAL_STOP,
    _FRAME_COMMAND,
    _FRAME_CHANGE,
    _WIDTH,
) = range(10)
_LAYERS = 10
# Rows that go through the layers together, sharing each weight load (_dense_four).
LANES = 4

_jit = compiler(numba)


# -- transcendental functions in double precision from + - * / and ldexp ---------------

_LN2_HI = 6.93147180369123816490e-01  # ln 2 with its low 32 bits zero: k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_HALF_LN2 = 0.34657359027997264


@_jit
def _expm1_small(r: float) -> float:
    """``exp(r) - 1`` for ``|r| <= ln(2) / 2``: Taylor to ``r**14 / 14!`` (< 1e-17 of it)."""
    p = 1.0 / 87178291200.0
    p = 1.0 / 6227020800.0 + r * p
    p = 1.0 / 479001600.0 + r * p
    p = 1.0 / 39916800.0 + r * p
    p = 1.0 / 3628800.0 + r * p
    p = 1.0 / 362880.0 + r * p
    p = 1.0 / 40320.0 + r * p
    p = 1.0 / 5040.0 + r * p
    p = 1.0 / 720.0 + r * p
    p = 1.0 / 120.0 + r * p
    p = 1.0 / 24.0 + r * p
    p = 1.0 / 6.0 + r * p
    p = 0.5 + r * p
    return r + (r * r) * p


@_jit
def exp64(x: float) -> float:
    """``e**x`` in double precision (relative error a few 1e-16)."""
    if x != x:
        return x
    if x > 709.0:
        return math.inf
    if x < -745.0:
        return 0.0
    k = math.floor(x * _INV_LN2 + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    return math.ldexp(1.0 + _expm1_small(r), int(k))


@_jit
def expm1_64(x: float) -> float:
    """``e**x - 1`` in double precision, accurate near zero."""
    if -_HALF_LN2 <= x <= _HALF_LN2:
        return _expm1_small(x)
    return exp64(x) - 1.0


@_jit
def tanh64(x: float) -> float:
    """``tanh(x)`` in double precision (odd, exactly ±1 beyond ``|x| = 20``)."""
    if x != x:
        return x
    a = x if x >= 0.0 else -x
    if a > 20.0:
        t = 1.0
    else:
        e = expm1_64(2.0 * a)
        t = e / (e + 2.0)
    return t if x >= 0.0 else -t


@_jit
def _log1p_unit(y: float) -> float:
    """``log(1 + y)`` for ``0 <= y <= 1``: ``2 atanh(s)``, ``s = y / (2 + y) <= 1/3``."""
    s = y / (2.0 + y)
    s2 = s * s
    p = 1.0 / 37.0
    for i in range(17, -1, -1):
        p = 1.0 / (2 * i + 1) + s2 * p
    return 2.0 * s * p


@_jit
def softplus64(x: float) -> float:
    """``log(1 + e**x)`` in double precision, as ``max(x, 0) + log1p(e**-|x|)``."""
    if x != x:
        return x
    a = x if x >= 0.0 else -x
    return (x if x > 0.0 else 0.0) + _log1p_unit(exp64(-a))


@_jit
def activation64(code: int, x: float) -> float:
    """A hidden layer's activation (tanh, elu or silu) in double precision."""
    if code == 1:
        return tanh64(x)
    if code == 2:
        return x if x > 0.0 else expm1_64(x)
    return x / (1.0 + exp64(-x))


# -- the row pipeline ----------------------------------------------------------------


@_jit
def _dense_one(x: Any, w: Any, w_off: int, b_off: int, n_in: int, n_out: int, out: Any) -> None:
    """``out = b + x W`` for one row; ``W`` is ``(n_in, n_out)`` row-major at ``w_off``.

    The weight rows are taken as views: indexing the flat buffer directly left LLVM
    unable to vectorise the loop over ``j`` (the output might alias the weights).
    """
    weight = w[w_off : w_off + n_in * n_out].reshape((n_in, n_out))
    bias = w[b_off : b_off + n_out]
    for j in range(n_out):
        out[j] = bias[j]
    k4 = n_in - n_in % 4
    for k in range(0, k4, 4):
        x0 = x[k]
        x1 = x[k + 1]
        x2 = x[k + 2]
        x3 = x[k + 3]
        w0 = weight[k]
        w1 = weight[k + 1]
        w2 = weight[k + 2]
        w3 = weight[k + 3]
        for j in range(n_out):
            out[j] = (((out[j] + x0 * w0[j]) + x1 * w1[j]) + x2 * w2[j]) + x3 * w3[j]
    for k in range(k4, n_in):
        xk = x[k]
        wk = weight[k]
        for j in range(n_out):
            out[j] = out[j] + xk * wk[j]


@_jit
def _dense_four(
    x: Any, y: Any, u: Any, t: Any, w: Any, w_off: int, b_off: int, n_in: int, n_out: int,
    ox: Any, oy: Any, ou: Any, ot: Any,
) -> None:  # fmt: skip
    """:func:`_dense_one` for four rows at once, each weight loaded once for all four:
    every output takes exactly the operations it takes alone."""
    weight = w[w_off : w_off + n_in * n_out].reshape((n_in, n_out))
    bias = w[b_off : b_off + n_out]
    for j in range(n_out):
        ox[j] = bias[j]
        oy[j] = bias[j]
        ou[j] = bias[j]
        ot[j] = bias[j]
    k4 = n_in - n_in % 4
    for k in range(0, k4, 4):
        x0, x1, x2, x3 = x[k], x[k + 1], x[k + 2], x[k + 3]
        y0, y1, y2, y3 = y[k], y[k + 1], y[k + 2], y[k + 3]
        u0, u1, u2, u3 = u[k], u[k + 1], u[k + 2], u[k + 3]
        t0, t1, t2, t3 = t[k], t[k + 1], t[k + 2], t[k + 3]
        w0, w1, w2, w3 = weight[k], weight[k + 1], weight[k + 2], weight[k + 3]
        for j in range(n_out):
            a0, a1, a2, a3 = w0[j], w1[j], w2[j], w3[j]
            ox[j] = (((ox[j] + x0 * a0) + x1 * a1) + x2 * a2) + x3 * a3
            oy[j] = (((oy[j] + y0 * a0) + y1 * a1) + y2 * a2) + y3 * a3
            ou[j] = (((ou[j] + u0 * a0) + u1 * a1) + u2 * a2) + u3 * a3
            ot[j] = (((ot[j] + t0 * a0) + t1 * a1) + t2 * a2) + t3 * a3
    for k in range(k4, n_in):
        xk, yk, uk, tk = x[k], y[k], u[k], t[k]
        wk = weight[k]
        for j in range(n_out):
            ox[j] = ox[j] + xk * wk[j]
            oy[j] = oy[j] + yk * wk[j]
            ou[j] = ou[j] + uk * wk[j]
            ot[j] = ot[j] + tk * wk[j]


@_jit
def _activate(code: int, h: Any, n: int) -> None:
    """The hidden activation in place on ``h[:n]`` (ReLU exactly, the others via float64)."""
    if code == 0:
        for j in range(n):
            if h[j] < 0.0:
                h[j] = 0.0
    else:
        for j in range(n):
            h[j] = np.float32(activation64(code, float(h[j])))


@_jit
def _network(
    layout: Any, weights: Any, first: int, count: int, rows: int, bufs: Any, code: int
) -> int:
    """Run ``count`` layers from layout slot ``first`` on the rows held in ``bufs[r, 0]``:
    one row, or all ``LANES`` (``rows`` > 1); hidden layers get ``code``'s activation, the
    last none. Returns the ping-pong index of the buffer holding the output."""
    src = 0
    for i in range(count):
        at = first + 4 * i
        n_in = layout[at]
        n_out = layout[at + 1]
        w_off = layout[at + 2]
        b_off = layout[at + 3]
        dst = 1 - src
        if rows > 1:
            _dense_four(
                bufs[0, src], bufs[1, src], bufs[2, src], bufs[3, src], weights, w_off, b_off,
                n_in, n_out, bufs[0, dst], bufs[1, dst], bufs[2, dst], bufs[3, dst],
            )  # fmt: skip
            lanes = LANES
        else:
            _dense_one(bufs[0, src], weights, w_off, b_off, n_in, n_out, bufs[0, dst])
            lanes = 1
        if i < count - 1:
            for r in range(lanes):
                _activate(code, bufs[r, dst], n_out)
        src = dst
    return src


@_jit
def _rows(
    obs: Any,
    noise: Any,
    weights: Any,
    layout: Any,
    consts: Any,
    frame: Any,
    start: int,
    rows: int,
    bufs: Any,
    x: Any,
    actions: Any,
    log_probs: Any,
) -> None:
    """Rows ``start .. start + rows - 1`` (``rows`` 1 to ``LANES``) of :func:`act_rows`;
    with more than one, the layers run on all ``LANES`` rows of ``bufs``, the ones past
    ``rows`` holding whatever they held (their results are never read)."""
    obs_dim = layout[_OBS_DIM]
    act_dim = layout[_ACT_DIM]
    code = layout[_ACTIVATION]
    n_layers = layout[_N_LAYERS]
    n_goal = layout[_N_GOAL_LAYERS]
    g_start = layout[_GOAL_START]
    g_stop = layout[_GOAL_STOP]
    c_mean = 0
    c_inv = obs_dim
    c_clip = 2 * obs_dim
    c_low = c_clip + 1
    c_half = c_low + act_dim
    c_high = c_half + act_dim
    c_scale = c_high + act_dim
    c_ls = c_scale + (g_stop - g_start)
    clip = consts[c_clip]
    neg_clip = -clip
    # normalization, as ObservationNormalizer: subtract, multiply, max, min (float32)
    for r in range(rows):
        for k in range(obs_dim):
            v = (obs[start + r, k] - consts[c_mean + k]) * consts[c_inv + k]
            if v < neg_clip:
                v = neg_clip
            if v > clip:
                v = clip
            x[r, k] = v
            bufs[r, 0, k] = v
    # Plain ints, not literals: both calls share one compile of _network (tether.compiled).
    relu, first = int(0), int(_LAYERS)  # noqa: UP018, RUF046
    if n_goal > 0:  # the goal shift, as GoalShiftStage: relu net, tanh, * scale, added
        out = _network(layout, weights, _LAYERS + 4 * n_layers, n_goal, rows, bufs, relu)
        for r in range(rows):
            for j in range(g_stop - g_start):
                t = np.float32(tanh64(float(bufs[r, out, j])))
                x[r, g_start + j] = x[r, g_start + j] + t * consts[c_scale + j]
            for k in range(obs_dim):
                bufs[r, 0, k] = x[r, k]
    out = _network(layout, weights, first, n_layers, rows, bufs, code)
    ls_min = consts[c_ls]
    ls_max = consts[c_ls + 1]
    f_cmd = layout[_FRAME_COMMAND]
    f_chg = layout[_FRAME_CHANGE]
    zero = np.float32(0.0)
    one = np.float32(1.0)
    two = np.float32(2.0)
    minus_two = np.float32(-2.0)
    minus_half = np.float32(-0.5)
    half_log_2pi = np.float32(0.5 * math.log(2.0 * math.pi))
    log_2 = np.float32(math.log(2.0))
    for r in range(rows):
        i = start + r
        h = bufs[r, out]
        total = zero
        for j in range(act_dim):
            mu = h[j]
            ls = h[act_dim + j]
            if ls < ls_min:
                ls = ls_min
            if ls > ls_max:
                ls = ls_max
            z = noise[i, j] if noise.shape[0] > 0 else zero
            # the squash, as squash(): float32 with each transcendental rounded from float64
            u = mu + np.float32(exp64(float(ls))) * z
            gaussian = minus_half * z * z - ls - half_log_2pi
            softplus = np.float32(softplus64(float(minus_two * u)))
            term = gaussian - two * (log_2 - u - softplus)
            total = term if j == 0 else total + term
            squashed = np.float32(tanh64(float(u)))
            low = consts[c_low + j]
            high = consts[c_high + j]
            a = low + (squashed + one) * consts[c_half + j]
            if not a >= low:
                a = low
            if not a <= high:
                a = high
            if f_cmd >= 0:  # the frame, as CommandStepFrame.actions (float64)
                velocity = frame[3 * act_dim + j]
                change = float(obs[i, f_chg + j]) + frame[2 * act_dim + j] * float(a)
                if change < -velocity:
                    change = -velocity
                if change > velocity:
                    change = velocity
                target = float(obs[i, f_cmd + j]) + change
                framed = (target - frame[j]) / frame[act_dim + j]
                if framed < -1.0:
                    framed = -1.0
                if framed > 1.0:
                    framed = 1.0
                actions[i, j] = framed
            else:
                actions[i, j] = a
        log_probs[i] = total


@_jit
def act_rows(
    obs: Any,
    noise: Any,
    weights: Any,
    layout: Any,
    consts: Any,
    frame: Any,
    actions: Any,
    log_probs: Any,
) -> None:
    """Actions ``(n, act_dim)`` and log-probs ``(n,)`` for raw float32 observations
    ``(n, obs_dim)``, written into ``actions`` and ``log_probs``.

    ``noise`` is ``(n, act_dim)`` standard normal (zero rows: deterministic) or
    ``(0, act_dim)`` for an all-deterministic batch; the packed constants are
    :func:`pack`'s.
    """
    n = obs.shape[0]
    width = layout[_WIDTH]
    bufs = np.zeros((LANES, 2, width), dtype=np.float32)
    x = np.empty((LANES, layout[_OBS_DIM]), dtype=np.float32)
    for start in range(0, n, LANES):
        rows = min(LANES, n - start)
        _rows(obs, noise, weights, layout, consts, frame, start, rows, bufs, x, actions, log_probs)


# -- packing ---------------------------------------------------------------------------


class Packed(NamedTuple):
    """One version's constants as :func:`act_rows` reads them."""

    weights: np.ndarray  # float32: every layer's (in, out) weights, then its bias
    layout: np.ndarray  # int64: the header slots, then (in, out, w_off, b_off) per layer
    consts: np.ndarray  # float32: mean, inv_std, clip, low, half_range, high, scale, log-std bounds
    frame: np.ndarray  # float64: center, half_range, acceleration and velocity steps (or empty)


class FrameConstants(NamedTuple):
    """A command-step frame's slices and per-joint constants (``CommandStepFrame``)."""

    command: int
    command_change: int
    center: Sequence[float]
    half_range: Sequence[float]
    acceleration_step: Sequence[float]
    velocity_step: Sequence[float]


def pack(
    *,
    layers: Sequence[tuple[np.ndarray, np.ndarray]],
    goal_layers: Sequence[tuple[np.ndarray, np.ndarray]],
    goal: tuple[int, int],
    goal_scale: np.ndarray,
    activation: str,
    mean: np.ndarray,
    inv_std: np.ndarray,
    clip: float,
    low: np.ndarray,
    half_range: np.ndarray,
    high: np.ndarray,
    log_std_bounds: tuple[float, float],
    frame: FrameConstants | None,
) -> Packed:
    """Pack ``layers`` (``(weight (out, in), bias)`` each, the fused head last), the goal
    shift's ``goal_layers`` (none: no shift) and the stages' constants for :func:`act_rows`."""
    obs_dim = int(mean.shape[0])
    act_dim = int(low.shape[0])
    chunks: list[np.ndarray] = []
    slots: list[int] = []
    offset = 0
    width = obs_dim
    for w, b in (*layers, *goal_layers):
        n_out, n_in = w.shape
        w_t = np.ascontiguousarray(np.asarray(w, dtype=np.float32).T).reshape(-1)
        bias = np.asarray(b, dtype=np.float32).reshape(-1)
        slots += [n_in, n_out, offset, offset + w_t.size]
        chunks += [w_t, bias]
        offset += w_t.size + bias.size
        width = max(width, n_out)
    header = [0] * _LAYERS
    header[_OBS_DIM] = obs_dim
    header[_ACT_DIM] = act_dim
    header[_ACTIVATION] = ACTIVATION_CODES[activation]
    header[_N_LAYERS] = len(layers)
    header[_N_GOAL_LAYERS] = len(goal_layers)
    header[_GOAL_START], header[_GOAL_STOP] = goal
    header[_FRAME_COMMAND] = frame.command if frame is not None else -1
    header[_FRAME_CHANGE] = frame.command_change if frame is not None else -1
    header[_WIDTH] = width
    consts = np.concatenate(
        [
            np.asarray(mean, dtype=np.float32),
            np.asarray(inv_std, dtype=np.float32),
            np.asarray([clip], dtype=np.float32),
            np.asarray(low, dtype=np.float32),
            np.asarray(half_range, dtype=np.float32),
            np.asarray(high, dtype=np.float32),
            np.asarray(goal_scale, dtype=np.float32).reshape(-1),
            np.asarray(log_std_bounds, dtype=np.float32),
        ]
    )
    frame_consts = (
        np.zeros(0)
        if frame is None
        else np.concatenate(
            [
                np.asarray(v, dtype=np.float64)
                for v in (
                    frame.center,
                    frame.half_range,
                    frame.acceleration_step,
                    frame.velocity_step,
                )
            ]
        )
    )
    return Packed(
        weights=np.concatenate(chunks) if chunks else np.zeros(0, np.float32),
        layout=np.asarray(header + slots, dtype=np.int64),
        consts=consts,
        frame=frame_consts,
    )


def run(packed: Packed, obs: np.ndarray, noise: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``act_rows`` on C-contiguous float32 ``obs``: ``(actions, log_probs)``, fresh arrays."""
    obs = writable(obs)
    n = obs.shape[0]
    act_dim = int(packed.layout[_ACT_DIM])
    actions = np.empty((n, act_dim), dtype=np.float32)
    log_probs = np.empty(n, dtype=np.float32)
    z = _NO_NOISE[act_dim] if noise is None else noise
    act_rows(obs, z, packed.weights, *packed[1:], actions, log_probs)
    return actions, log_probs


@_jit
def _all_within(values: Any, bound: float) -> bool:
    for x in values.reshape(-1):  # noqa: SIM110 - a loop that returns early, for numba
        if not abs(x) <= bound:  # NaN compares false
            return False
    return True


_FLOAT32 = np.dtype(np.float32)


def all_within(values: np.ndarray, bound: float) -> bool:
    """Whether every entry of ``values`` has a magnitude of at most ``bound``: NaN never
    has, nor has ±Inf below an infinite bound. One compiled pass for the float32 batches
    serving checks (C-contiguous, writable: the layout warmed up), numpy for any other."""
    flags = values.flags
    if AVAILABLE and flags.c_contiguous and flags.writeable and values.dtype == _FLOAT32:
        return bool(_all_within(values, bound))
    return bool(np.abs(values).max(initial=0.0) <= bound)


class _NoNoise(dict[int, np.ndarray]):
    def __missing__(self, act_dim: int) -> np.ndarray:
        empty = np.zeros((0, act_dim), dtype=np.float32)
        self[act_dim] = empty
        return empty


_NO_NOISE = _NoNoise()


def _compile_all() -> None:
    """Compile :func:`act_rows` and :func:`all_within` for the signatures serving uses."""
    w = np.zeros((2, 2), dtype=np.float32)
    b = np.zeros(2, dtype=np.float32)
    two = np.ones(2, dtype=np.float32)
    packed = pack(
        layers=[(w, b), (w, b)],
        goal_layers=[(w, b), (w[:1], b[:1])],
        goal=(0, 1),
        goal_scale=two[:1],
        activation="relu",
        mean=two * 0,
        inv_std=two,
        clip=5.0,
        low=-two[:1],
        half_range=two[:1],
        high=two[:1],
        log_std_bounds=(-5.0, 2.0),
        frame=FrameConstants(0, 1, (0.0,), (1.0,), (0.1,), (0.1,)),
    )
    obs = np.zeros((3, 2), dtype=np.float32)
    all_within(obs, 1.0)
    run(packed, obs, None)
    run(packed, obs, np.zeros((3, 1), dtype=np.float32))


warm = warm_once(AVAILABLE, _compile_all)
"""Compile :func:`act_rows` and :func:`all_within` (or load them from numba's cache)
before they serve; seconds taken (0.0 after the first call, or without numba)."""
