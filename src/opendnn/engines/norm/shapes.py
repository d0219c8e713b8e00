"""Normalization shapes shared by the tests and the benchmark runner, tagged by size.

- ``GPU``: the device tests' ``(kind, shape, groups)``: rows that fit in registers, long
  rows (two loops, split, one read by co-resident programs), instance and group norm.
- ``BENCH``: ``(rows, width)`` of the layer / RMS norm benchmark.

The interpreter (``ci``) cases force the engine's paths with knobs, so they stay beside
those knobs in ``tests/norm/test_norm.py``.
"""

GPU = [
    ("layernorm", (8192, 8192), 1),
    ("layernorm", (64, 65536), 1),
    ("layernorm", (4, 262144), 1),
    ("layernorm", (37, 1000), 1),
    ("layernorm", (7, 1), 1),
    ("layernorm", (37, 40000), 1),  # one read: 5 chunks, the last partial
    ("rmsnorm", (8192, 8192), 1),
    ("rmsnorm", (16, 262144), 1),
    ("rmsnorm", (33, 3000), 1),
    ("rmsnorm", (5, 20000), 1),
    ("instancenorm", (4, 32, 64, 64), 1),
    ("groupnorm", (8, 64, 32, 32), 32),
    ("groupnorm", (2, 12, 300, 300), 3),
]

BENCH = ((8192, 8192), (2048, 65536), (512, 262144))
