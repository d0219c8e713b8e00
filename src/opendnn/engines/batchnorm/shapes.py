"""Batch-norm shapes shared by the tests and the benchmark runner, tagged by size.

- ``GPU``: the device tests' NCHW dims: ResNet layers, odd sizes, one pixel per channel,
  many channels; ``GPU_BACKWARD`` leaves out (2, 3, 1, 1), whose two values per channel
  make dx ~ 0 (x - mean = +-std exactly), a relative error of nothing.
- ``BENCH``: the benchmark's NCHW dims (ResNet-50's first bottleneck at N=64).

The interpreter (``ci``) cases force the engine's paths with knobs, so they stay beside
those knobs in ``tests/batchnorm/test_batchnorm.py``.
"""

GPU = [(64, 256, 56, 56), (32, 64, 28, 28), (7, 37, 13, 11), (2, 3, 1, 1), (16, 2048, 7, 7)]
GPU_BACKWARD = [s for s in GPU if s != (2, 3, 1, 1)]

BENCH = (64, 256, 56, 56)
