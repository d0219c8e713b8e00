"""Dropout's random stream and the reference forward / backward.

Element i (its row-major index over the logical dims, whatever the layout) takes word
i mod 4 of Philox-4x32-10(key = seed, counter = (lo32(c), hi32(c), 0, 0)), c = offset +
floor(i / 4) -- exactly the four words Triton's ``tl.randint4x(seed, c)`` gives, one
Philox evaluation per four elements, as cuRAND's uniform4 does -- and turns it into a
uniform float32 in [0, 1) as ``tl.rand`` does: u_i = float32(r'_i) * 4.6566127342e-10,
r'_i = the word as int32 folded to non-negative (r < 0 -> -r - 1). The element is kept
when u_i >= p (float32 compare):

    mask_i = [u_i >= p],   y_i = x_i * mask_i / (1 - p),   dx_i = dy_i * mask_i / (1 - p)

(p = 1: everything dropped, y = 0.) The same (seed, offset) gives the same mask on every
device and in the interpreter: the stream is integer arithmetic plus one float32 rounding.
A call over n elements consumes counters [offset, offset + ceil(n / 4)) (``counters``):
the legacy API's states advance the offset by that much per call, so consecutive calls
draw fresh masks.

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
        p0, p2 = ROUND_A * c0, ROUND_B * c2  # < 2**64: exact in uint64
        c0, c2, c1, c3 = (
            (p2 >> np.uint64(32)) ^ c1 ^ k0,
            (p0 >> np.uint64(32)) ^ c3 ^ k1,
            p2 & _M32,
            p0 & _M32,
        )
        k0, k1 = (k0 + KEY_A) & _M32, (k1 + KEY_B) & _M32
    return c0, c1, c2, c3


def counters(n: int) -> int:
    """Philox counters a call over ``n`` elements consumes."""
    return -(-int(n) // 4)


def uniform_at(seed: int, offset: int, index: np.ndarray) -> np.ndarray:
    """float32 uniforms in [0, 1) of the elements with logical indices ``index``."""
    index = np.asarray(index, dtype=np.int64)
    c = (index // 4 + np.int64(offset)).view(np.uint64)
    zero = np.zeros_like(c)
    words = philox4x32(seed, c & _M32, c >> np.uint64(32), zero, zero)
    r = np.choose((index % 4).astype(np.int64), words).astype(np.uint32).view(np.int32)
    r = np.where(r < 0, -(r.astype(np.int64)) - 1, r.astype(np.int64))
    return r.astype(np.float32) * TO_UNIFORM


def uniform(seed: int, offset: int, shape) -> np.ndarray:
    """float32 uniforms in [0, 1) of the elements of a tensor of ``shape`` (row-major)."""
    n = int(np.prod(shape, dtype=np.int64))
    return uniform_at(seed, offset, np.arange(n, dtype=np.int64)).reshape(shape)


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
