"""Helpers shared by the GPU probes in bench/."""
import torch
from triton.testing import do_bench


def copy_gbs() -> float:
    """The copy floor as the bench measures it: 1 GiB of float32, read + write, GB/s."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6


def colsum_input(M: int = 8192, N: int = 8192):
    """The column-sum probes' problem, with the copy floor printed: (copy GB/s, x [M, N]
    bfloat16, its column sums in float64 rounded to float32, x's bytes)."""
    copy = copy_gbs()
    x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    print(f"copy {copy:.0f} GB/s (1 GiB float32, as the bench)")
    return copy, x, x.double().sum(0).float(), x.numel() * 2
