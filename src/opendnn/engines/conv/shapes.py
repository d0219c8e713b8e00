"""Convolution shapes shared by the tests and the benchmark runner, tagged by size.

- ``GPU``: the device tests' problems, ``(N, C, H (=W), K, R (=S), stride, pad)``;
  ``GPU_TMA`` / ``GPU_DGRAD_TMA`` the NHWC fast path's forward and backward-data problems
  (same format), ``GPU_FLAT`` its 1x1 flat-row problems ``(N, C, H, K, R, pad)``.
- ``BENCH``: ResNet-50's convolution layers at ``BENCH_N`` images,
  ``(name, C, K, H (=W), R (=S), stride, pad)``.

The CPU tests (``tests/conv/``) run their own small odd-sized cases through the
interpreter; each engine's test module lists those beside the rule it checks.
"""

GPU = [
    (8, 64, 28, 64, 3, 1, 1),
    (4, 3, 56, 32, 7, 2, 3),
    (8, 128, 14, 256, 1, 1, 0),
    (2, 32, 15, 48, 3, 1, 1),
]
GPU_TMA = [(8, 64, 28, 64, 3, 1, 1), (4, 128, 14, 96, 3, 2, 1), (8, 64, 13, 128, 1, 1, 0)]
GPU_DGRAD_TMA = [(8, 64, 28, 64, 3, 1, 1), (4, 64, 15, 128, 3, 2, 1), (2, 3, 56, 64, 7, 2, 3)]
GPU_FLAT = [
    (8, 64, 14, 128, 1, 0),
    (4, 128, 7, 256, 1, 0),
    (3, 64, 9, 64, 1, 0),
    (32, 512, 7, 2048, 1, 0),
    (32, 1024, 14, 256, 1, 0),
]

BENCH_N = 32
BENCH = [
    ("conv1_7x7s2", 3, 64, 224, 7, 2, 3),
    ("l1_1x1_64_64", 64, 64, 56, 1, 1, 0),
    ("l1_3x3_64", 64, 64, 56, 3, 1, 1),
    ("l1_1x1_64_256", 64, 256, 56, 1, 1, 0),
    ("l2_3x3_128s2", 128, 128, 56, 3, 2, 1),
    ("l2_3x3_128", 128, 128, 28, 3, 1, 1),
    ("l3_3x3_256", 256, 256, 14, 3, 1, 1),
    ("l3_1x1_1024_256", 1024, 256, 14, 1, 1, 0),
    ("l4_3x3_512", 512, 512, 7, 3, 1, 1),
    ("l4_1x1_512_2048", 512, 2048, 7, 1, 1, 0),
]
