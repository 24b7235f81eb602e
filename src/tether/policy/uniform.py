"""Elementwise math whose result for a value does not depend on where it sits in a tensor.

ATen computes transcendental functions (exp, tanh, softplus, ...) with SIMD over the
body of a contiguous tensor and with scalar code over the tail, and the two differ in the
last bit; so does numpy. A row's value would then depend on the batch size. Padding the
flattened tensor to a multiple of the SIMD chunk puts every element in the SIMD body; if
the op is large enough to be split across threads, the padding also keeps every thread's
chunk boundary on a SIMD boundary. Exact ops (add, mul, max, clamp, relu) need none of this.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

SIMD_MULTIPLE = 64  # two AVX-512 float32 vectors (ATen's unroll) rounded up to a power of 2
PARALLEL_GRAIN = 32768  # at::internal::GRAIN_SIZE: below this ATen never splits an op


def parallel_multiple(num_threads: int) -> int:
    """A padding multiple that keeps chunk boundaries aligned for any split up to ``num_threads``."""
    return SIMD_MULTIPLE * math.lcm(*range(1, max(1, num_threads) + 1))


def row_multiple(numel: int, par_multiple: int) -> int:
    """Pad to a multiple of this many elements (or rows) so ``numel`` real ones take the SIMD path."""
    return SIMD_MULTIPLE if numel < PARALLEL_GRAIN else par_multiple


def apply_uniform(
    fn: Callable[[torch.Tensor], torch.Tensor], t: torch.Tensor, par_multiple: int
) -> torch.Tensor:
    """``fn(t)`` for an elementwise ``fn``, computed so that no element hits a scalar tail."""
    flat = t.reshape(-1)
    multiple = row_multiple(flat.shape[0], par_multiple)
    total = -(-flat.shape[0] // multiple) * multiple
    if total > flat.shape[0]:
        flat = torch.cat([flat, flat.new_zeros(total - flat.shape[0])])
    return fn(flat)[: t.numel()].reshape(t.shape)


def apply_uniform_np(fn: Callable[[np.ndarray], np.ndarray], a: np.ndarray) -> np.ndarray:
    """The numpy twin of :func:`apply_uniform` (numpy ufuncs are single-threaded)."""
    flat = a.reshape(-1)
    total = -(-flat.shape[0] // SIMD_MULTIPLE) * SIMD_MULTIPLE
    if total > flat.shape[0]:
        flat = np.concatenate([flat, np.zeros(total - flat.shape[0], dtype=flat.dtype)])
    return fn(flat)[: a.size].reshape(a.shape)
