"""Dropout's random stream and the reference forward / backward.

Element i (its row-major index over the logical dims, whatever the layout) draws the
32-bit integer r_i = Philox-4x32-10(key = seed, counter = (lo32(offset + i),
hi32(offset + i), 0, 0)) word 0 -- exactly what Triton's ``tl.randint(seed, offset + i)``
computes, compiled or interpreted -- and turns it into a uniform float32 in [0, 1) as
``tl.rand`` does: u_i = float32(r'_i) * 4.6566127342e-10, r'_i = r_i as int32 folded to
non-negative (r < 0 -> -r - 1). The element is kept when u_i >= p (float32 compare):

    mask_i = [u_i >= p],   y_i = x_i * mask_i / (1 - p),   dx_i = dy_i * mask_i / (1 - p)

(p = 1: everything dropped, y = 0.) The same (seed, offset) gives the same mask on every
device and in the interpreter: the stream is integer arithmetic plus one float32 rounding.
A forward over n elements consumes counters [offset, offset + n): the legacy API's states
advance the offset by n per call, so consecutive calls draw fresh masks.

This NumPy Philox is the reference the Triton kernels are tested against (bit for bit).
"""
from __future__ import annotations

import numpy as np

_M32 = np.uint64(0xFFFFFFFF)
ROUND_A, ROUND_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
KEY_A, KEY_B = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
TO_UNIFORM = np.float32(4.6566127342e-10)


def philox4x32(key: int, c0, c1, c2, c3, rounds: int = 10) -> tuple:
    """Philox-4x32 (Salmon et al., 2011) of uint32 counter words and a 64-bit key: the
    four uint32 output words (as uint64 arrays)."""
    key = int(key) & 0xFFFFFFFFFFFFFFFF
    k0, k1 = np.uint64(key & 0xFFFFFFFF), np.uint64(key >> 32)
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) & _M32 for c in (c0, c1, c2, c3))
    for _ in range(rounds):
        p0, p2 = ROUND_A * c0, ROUND_B * c2          # < 2**64: exact in uint64
        c0, c2, c1, c3 = ((p2 >> np.uint64(32)) ^ c1 ^ k0, (p0 >> np.uint64(32)) ^ c3 ^ k1,
                          p2 & _M32, p0 & _M32)
        k0, k1 = (k0 + KEY_A) & _M32, (k1 + KEY_B) & _M32
    return c0, c1, c2, c3


def philox_word0(seed: int, counter: np.ndarray, rounds: int = 10) -> np.ndarray:
    """Word 0 of Philox-4x32 for int64 ``counter`` (its two 32-bit halves in words 0 and
    1, words 2 and 3 zero) and key ``seed``: uint32 values (Triton's tl.randint)."""
    c = counter.astype(np.int64).view(np.uint64)
    zero = np.zeros_like(c)
    return philox4x32(seed, c & _M32, c >> np.uint64(32), zero, zero, rounds)[0].astype(
        np.uint32)


def uniform(seed: int, offset: int, shape) -> np.ndarray:
    """float32 uniforms in [0, 1) of the elements of a tensor of ``shape`` (row-major)."""
    n = int(np.prod(shape, dtype=np.int64))
    r = philox_word0(seed, np.arange(n, dtype=np.int64) + np.int64(offset)).view(np.int32)
    r = np.where(r < 0, -(r.astype(np.int64)) - 1, r.astype(np.int64))
    return (r.astype(np.float32) * TO_UNIFORM).reshape(shape)


def mask(seed: int, offset: int, shape, p: float) -> np.ndarray:
    """1.0 where an element is kept, 0.0 where dropped (float64)."""
    return (uniform(seed, offset, shape) >= np.float32(p)).astype(np.float64)


def scale(p: float) -> float:
    """The kept elements' factor 1 / (1 - p); 0 when everything is dropped."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def forward(x: np.ndarray, p: float, seed: int, offset: int) -> tuple:
    """(y, mask) of dropout with probability ``p``."""
    m = mask(seed, offset, x.shape, p)
    return x * m * scale(p), m


def backward(dy: np.ndarray, p: float, seed: int, offset: int) -> np.ndarray:
    return dy * mask(seed, offset, dy.shape, p) * scale(p)
