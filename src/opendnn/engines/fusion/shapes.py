"""Shapes of the runtime-fusion engine shared by the tests and the benchmark runner.

- ``BENCH_POINTWISE``: the fused pointwise DAG's tensor shapes.
- ``BENCH_REDUCTION``: ``(input shape, output shape)`` of the row and column sums.

The CPU tests (``tests/fusion/``) use ``tests/_util.REDUCE_SHAPES`` and per-rule cases.
"""

BENCH_POINTWISE = [(8192, 8192)]
BENCH_REDUCTION = [((8192, 8192), (8192, 1)), ((8192, 8192), (1, 8192))]
