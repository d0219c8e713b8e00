"""LRN shapes shared by the tests and the benchmark runner, tagged by size.

- ``CI``: the interpreter tests' ``(shape, layout, window n)``: odd sizes, an even window
  with channels innermost, a window wider than C, one channel, 5-D.
- ``BENCH``: AlexNet's two LRN layers, ``(N, C, H, W)``.
"""

CI = [
    ((2, 7, 3, 5), "nchw", 5),
    ((2, 6, 3, 4), "nhwc", 4),  # even window, channels innermost
    ((1, 9, 2, 3), "strided", 16),  # window wider than C
    ((3, 1, 2, 2), "nchw", 1),  # one channel, window of one
    ((2, 5, 2, 3, 3), "nchw", 3),  # 5-D
    ((1, 4, 3, 2, 2), "ndhwc", 2),
]

BENCH = ((32, 96, 55, 55), (64, 256, 27, 27))
