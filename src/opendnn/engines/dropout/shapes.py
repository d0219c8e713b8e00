"""Dropout shapes shared by the tests and the benchmark runner, tagged by size.

- ``CI``: the interpreter tests' ``(shape, layout)``: odd, NHWC, strided, one element.
- ``BENCH``: one flat bfloat16 tensor of 2^26 elements (128 MB), large enough that the L2
  holds none of it.
"""

CI = [((4, 7), "nchw"), ((2, 3, 4, 5), "nhwc"), ((3, 1, 5), "strided"), ((1,), "nchw")]

BENCH = (1 << 26,)
