"""A pre-norm transformer block on opendnn, two ways:

- ``attention="mha"``: ``nn.MultiheadAttention``; ``opendnn.torch.convert`` swaps every
  module (LayerNorm, MultiheadAttention, Linear, GELU, Dropout) for its drop-in, and the
  converted block runs on opendnn with no other change;
- ``attention="sdpa"``: hand-written attention (one qkv Linear, then
  ``F.scaled_dot_product_attention``): ``convert`` swaps the modules, and the functional
  call goes to opendnn under ``opendnn.torch.enable()``.

    x = x + Attention(LayerNorm(x))          (causal when ``causal=True``)
    x = x + Dropout(Linear(GELU(Linear(LayerNorm(x)))))      hidden = mlp_ratio * dim

Shapes: x (N, L, dim), batch first; heads divide dim.

    PYTHONPATH=src python examples/transformer_block.py      # GPU: N=8, L=1024, 1024, bf16
    (on the CPU it runs a tiny block once and prints the difference to PyTorch)
"""
from __future__ import annotations

import argparse
import copy
import time
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["SelfAttention", "TransformerBlock", "main"]


class SelfAttention(nn.Module):
    """Multi-head self-attention written out: x (N, L, dim) -> (N, L, dim)."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if dim % heads:
            raise ValueError(f"heads ({heads}) must divide dim ({dim})")
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(dim, 3 * dim, bias=bias)
        self.proj = nn.Linear(dim, dim, bias=bias)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        n, length, dim = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, self.heads, dim // self.heads).permute(
            2, 0, 3, 1, 4)                              # each (N, H, L, D)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(o.transpose(1, 2).reshape(n, length, dim))


class TransformerBlock(nn.Module):
    """Pre-norm block (GPT-2 / ViT style). x (N, L, dim) -> (N, L, dim)."""

    def __init__(self, dim: int = 768, heads: int = 12, mlp_ratio: int = 4,
                 dropout: float = 0.0, attention: str = "mha", bias: bool = True):
        super().__init__()
        if attention not in ("mha", "sdpa"):
            raise ValueError(f"attention must be 'mha' or 'sdpa', got {attention!r}")
        self.attention = attention
        self.ln1 = nn.LayerNorm(dim)
        if attention == "mha":
            self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, bias=bias,
                                              batch_first=True)
        else:
            self.attn = SelfAttention(dim, heads, dropout, bias)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim, bias=bias), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim, bias=bias),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        h = self.ln1(x)
        if self.attention == "mha":
            # PyTorch's is_causal is a hint that needs the mask itself too
            mask = (nn.Transformer.generate_square_subsequent_mask(
                x.shape[1], device=x.device, dtype=x.dtype) if causal else None)
            a = self.attn(h, h, h, need_weights=False, attn_mask=mask, is_causal=causal)[0]
        else:
            a = self.attn(h, causal)
        x = x + a
        return x + self.mlp(self.ln2(x))


# ---------------------------------------------------------------- the demo

def _step_seconds(block: nn.Module, x: torch.Tensor, iters: int, enabled: bool) -> float:
    """Seconds per forward + backward (CUDA events on a GPU, wall clock on the CPU)."""
    import opendnn.torch as odt

    def step():
        with odt.enable() if enabled else odt.disable():
            y = block(x, causal=True)
        y.float().square().mean().backward()
    step()                                             # compiles the kernels
    if x.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    if x.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def main(argv: Sequence[str] | None = None) -> None:
    import opendnn.torch as odt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=None)
    args = p.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    n, length, dim, heads = (8, 1024, 1024, 16) if cuda else (2, 8, 32, 2)
    dtype = torch.bfloat16 if cuda else torch.float16     # attention: 16-bit types only
    iters = args.iters or (20 if cuda else 1)
    torch.manual_seed(0)
    x = torch.randn(n, length, dim, device=device, dtype=dtype)
    print(f"pre-norm transformer block on {device}: N={n}, L={length}, dim={dim}, "
          f"heads={heads}, {dtype}, causal, forward + backward")
    for attention in ("mha", "sdpa"):
        ref = TransformerBlock(dim, heads, attention=attention).to(device, dtype)
        block = odt.convert(copy.deepcopy(ref))
        enabled = attention == "sdpa"           # F.scaled_dot_product_attention: enable()
        with odt.enable() if enabled else odt.disable():
            y = block(x, causal=True)
        y_ref = ref(x, causal=True)
        err = ((y.float() - y_ref.float()).norm() / y_ref.float().norm()).item()
        ours = _step_seconds(block, x, iters, enabled)
        theirs = _step_seconds(ref, x, iters, False)
        print(f"  {attention:4s}: opendnn {ours * 1e3:9.2f} ms, PyTorch {theirs * 1e3:9.2f} ms "
              f"per step (x{theirs / ours:.2f}); output difference {err:.1e}")
    print("  opendnn fallbacks to PyTorch:", odt.fallbacks() or "none")


if __name__ == "__main__":
    main()
