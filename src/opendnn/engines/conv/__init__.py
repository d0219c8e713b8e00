"""Convolution engines (forward, backward data, backward filter), one folder per algorithm
family, each with its public engine modules and private ``_kernels`` source generators:

=================  =========================================================  ==============
folder             algorithm                                                  cuDNN name
=================  =========================================================  ==============
``implicit_gemm``  gather-on-the-fly GEMM, fused prologue/epilogue; the        IMPLICIT_GEMM,
                   index-table variant (``precomp``)                          ..._PRECOMP_GEMM
``tma``            the NHWC Hopper fast path of the implicit GEMM: slabs as   (configs of the
                   TMA boxes, persistent grid, phase-packed stem              implicit GEMM)
``split_k``        backward passes whose reduction is split over programs     BWD_DATA_ALGO_0,
                   (atomics or fixed-order partial sums)                      BWD_FILTER_0/3
``winograd``       F(2x2, 3x3) and F(4x4, 3x3), fused and non-fused           WINOGRAD(_NONFUSED)
``fft``            whole-image and tiled FFT convolution                      FFT, FFT_TILING
``gemm``           explicit im2col + the matmul engine                        GEMM
``direct``         CUDA-core rank-1 updates for depthwise / few channels      DIRECT
``depthwise``      pixels x channels tiles across all groups, one load per    (DIRECT-class)
                   tap, float32 FMAs: depthwise and channel multipliers
=================  =========================================================  ==============

``analysis.py`` reads the problem off the operation graph once for all of them
(``analyze``) and emits the fused pointwise code around the convolution. The engines are
listed, fastest family first, in ``engines/registry.py``; ``docs/design/conv.md`` explains
the algorithms, what was measured and why each family is where it is.
"""
