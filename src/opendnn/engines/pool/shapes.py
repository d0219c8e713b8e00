"""Pooling shapes shared by the tests and the benchmark runner, tagged by size.

- ``GPU``: the device tests' ``(shape, window, stride, padding)``: ResNet's stem pooling,
  odd sizes, global pooling, windows too large to unroll, 3-D.
- ``BENCH``: ``(kind, window, stride, padding)`` over ``BENCH_SHAPE`` (NCHW dims), each in
  NHWC and NCHW.

The interpreter (``ci``) cases force the engine's paths with knobs, so they stay beside
those knobs in ``tests/pool/test_pool.py``.
"""

GPU = [
    ((32, 64, 56, 56), (3, 3), (2, 2), (1, 1)),
    ((8, 3, 33, 47), (2, 2), (2, 2), (0, 0)),
    ((4, 20, 7, 7), (7, 7), (1, 1), (0, 0)),  # global pooling
    ((4, 24, 14, 13), (12, 9), (2, 1), (3, 4)),  # run-time window loops
    ((2, 16, 9, 10, 11), (3, 3, 3), (2, 2, 2), (1, 1, 1)),
]
GPU_IDS = ["56x56", "odd", "global", "big", "3d"]

BENCH_SHAPE = (64, 256, 56, 56)
BENCH = (("max", 3, 2, 1), ("avg", 3, 2, 1), ("max", 2, 2, 0), ("avg", 2, 2, 0))
