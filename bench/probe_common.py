"""Helpers shared by the GPU probes in bench/."""
import torch
from triton.testing import do_bench


def copy_gbs() -> float:
    """The copy floor as the bench measures it: 1 GiB of float32, read + write, GB/s."""
    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / do_bench(lambda: dst.copy_(src), return_mode="median") / 1e6
