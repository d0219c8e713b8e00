"""Benchmark shapes (the ``bench`` tag of each family)."""
POINTWISE = [(8192, 8192)]
REDUCTION = [((8192, 8192), (8192, 1)), ((8192, 8192), (1, 8192))]
MATMUL = [  # (M, N, K)
    (4096, 4096, 4096), (8192, 8192, 8192), (16, 4096, 4096), (8192, 4096, 14336)]
