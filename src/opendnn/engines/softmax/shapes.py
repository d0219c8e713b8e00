"""Softmax shapes shared by the tests and the benchmark runner, tagged by size.

- ``GPU``: the device tests' ``(shape, axis)``: rows in registers, long rows (two loops,
  one read by co-resident programs), a middle axis, a one-element row, more rows than
  programs.
- ``BENCH``: ``(rows, width)`` of the benchmark, softmax over the last axis.

The interpreter (``ci``) cases force the engine's paths with knobs, so they stay beside
those knobs in ``tests/softmax/test_softmax.py``.
"""

GPU = [
    ((8192, 8192), -1),
    ((64, 65536), -1),
    ((4, 262144), -1),
    ((32, 1000, 3), 1),
    ((7, 1), -1),
    ((600, 9000), -1),  # 264 programs walk the rows
]

BENCH = ((8192, 8192), (1024, 65536), (256, 262144))
