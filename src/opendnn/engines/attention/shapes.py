"""Attention benchmark shapes: ``BENCH_B`` x ``BENCH_H`` heads of packed BHSD bfloat16,
every sequence length in ``BENCH_SEQS`` and head dimension in ``BENCH_DIMS``, causal and
not. The tests' cases (masks, padding, GQA, dropout, odd lengths) are in
``tests/_attention_cases.py`` (CPU) and ``tests/attention/test_gpu_attention.py``.
"""

BENCH_B, BENCH_H = 4, 16
BENCH_SEQS = (1024, 4096, 8192, 16384)
BENCH_DIMS = (64, 128)
