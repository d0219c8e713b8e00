"""MoE grouped matmul shapes shared by the tests and the benchmark runner, tagged by size.

A case is ``(E, T, K, N, offsets)``: experts, routed token rows, hidden size, output
size, and the first row of each group (G = len(offsets) = batch x experts; None: T
split evenly over E groups).

- ``CI``: the interpreter's cases (``tests/moe/test_moe.py``): odd sizes, a group with no
  rows, offsets not starting at 0, two batches of experts.
- ``GPU``: the device tests', cudnn-frontend's among them (``test_moe_grouped_matmul.py``:
  E 36, T 2000, H 520, N 248 bf16 with its offsets; ``test_moe_grouped_matmul_op.py``:
  Mixtral-like E 8, T 1024, K 512, N 512 fp16, even groups).
- ``BENCH``: the benchmark's (Mixtral- and DeepSeek-like expert sizes).
"""

# cudnn-frontend's offsets for E = 36, T = 2000 (19 one-row groups, then 100-row ones)
FRONTEND_OFFSETS = tuple(range(19)) + (
    127, 255, 383, 483, 515, 643, 718, 924, 1100, 1200, 1300, 1400, 1500, 1600, 1700, 1800,
    1900,
)  # fmt: skip

CI = [
    (3, 13, 37, 19, (0, 4, 4)),  # odd sizes; group 1 has no rows
    (2, 20, 16, 24, (3, 9)),  # rows 0-2 belong to no group
    (2, 11, 21, 9, (0, 2, 5, 5)),  # two batches of two experts (G = 4), an empty group
]

GPU = [
    (36, 2000, 520, 248, FRONTEND_OFFSETS),
    (8, 1024, 512, 512, None),
    (4, 512, 256, 256, None),
    (3, 777, 100, 60, (5, 300, 300)),  # odd sizes, an empty group, rows before the first
]

BENCH = [
    (8, 4096, 4096, 14336, None),  # Mixtral 8x7B's w1 (top-2 of 2048 tokens)
    (64, 8192, 2048, 1408, None),  # DeepSeek-MoE-16B-like experts
]


def offsets_for(case) -> list[int]:
    """The case's group offsets (even groups when it gives None)."""
    experts, rows, _, _, off = case
    if off is not None:
        return list(off)
    per = rows // experts
    return [g * per for g in range(experts)]
