"""From the Gaussian's ``(mu, log_std)`` to bounded actions and their log-probabilities.

Runs on the host in numpy float32 whatever the device: for the few hundred numbers of a
batch, numpy's per-call cost is a third of torch's, and one implementation serves CPU
and CUDA alike. The math is :meth:`tether.policy.networks.Actor.sample`'s (a test holds
them together), with ``z = noise`` used directly (it *is* ``(u - mu) / std``) and a
deterministic row being a row with zero noise.

Invariant: a row's result is bit-identical at any batch size: transcendental ufuncs run
on arrays padded to a SIMD multiple (see :mod:`tether.policy.uniform`) and the log-prob
adds columns in order instead of calling a vectorized ``sum``.
"""

from __future__ import annotations

import math

import numpy as np

from tether.policy.uniform import SIMD_MULTIPLE

_HALF_LOG_2PI = np.float32(0.5 * math.log(2 * math.pi))
_LOG_2 = np.float32(math.log(2.0))


def squash(
    mu: np.ndarray,
    log_std: np.ndarray,
    noise: np.ndarray | None,
    n: int,
    low: np.ndarray,
    half_range: np.ndarray,
    high: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Actions ``(n, act_dim)`` in ``[low, high]`` and log-probs ``(n,)`` for the first n rows.

    ``mu`` and ``log_std`` may hold more than ``n`` rows (padding); ``noise`` is ``(n,
    act_dim)`` standard normal with zero rows where the action must be deterministic, or
    ``None`` for an all-deterministic batch.
    """
    act_dim = mu.shape[1]
    rows = -(-n // SIMD_MULTIPLE) * SIMD_MULTIPLE  # rows * act_dim is a SIMD multiple
    mu = _rows(mu, n, rows)
    log_std = _rows(log_std, n, rows)
    if noise is None:
        u = mu
        gaussian = -log_std - _HALF_LOG_2PI
    else:
        z = _rows(noise, n, rows)
        u = mu + np.exp(log_std) * z
        gaussian = np.float32(-0.5) * z * z - log_std - _HALF_LOG_2PI
    softplus = np.logaddexp(np.float32(0.0), np.float32(-2.0) * u)
    terms = gaussian - np.float32(2.0) * (_LOG_2 - u - softplus)
    log_prob = terms[:n, 0].copy()
    for j in range(1, act_dim):
        log_prob += terms[:n, j]
    squashed = np.tanh(u)[:n]
    actions = np.minimum(np.maximum(low + (squashed + np.float32(1.0)) * half_range, low), high)
    return actions.astype(np.float32, copy=False), log_prob


def _rows(a: np.ndarray, n: int, rows: int) -> np.ndarray:
    """The first ``n`` rows of ``a`` in a fresh contiguous float32 array of ``rows`` rows."""
    out = np.zeros((rows, a.shape[1]), dtype=np.float32)
    out[:n] = a[:n]
    return out
