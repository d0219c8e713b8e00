"""Matmul shapes of the benchmark runner: ``(M, N, K)``; a square GEMM, a large one, a
16-row (decode-like) one and an MLP up-projection. The CPU tests (``tests/matmul/``) run
small odd-sized problems through the interpreter.
"""

BENCH = [
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16, 4096, 4096),
    (8192, 4096, 14336),
]
