"""Session 13: the engine's Gluon forward (GLUON=1) against its heuristic plan and cuDNN, per
execute() through the graph API (host launch included), at the short rows where launch
cost matters. Run (GPU): PYTHONPATH=src:bench python bench/gluon_launch_probe.py"""
import torch
from triton.testing import do_bench
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from probe_common import sdpa_forward
B, H = 4, 16
for S, D, causal in ((1024, 128, False), (1024, 128, True), (1024, 64, False), (4096, 128, False)):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ms_c = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    fl = 4 * B * H * S * S * D * (0.5 if causal else 1)
    row = [f"S={S} D={D} causal={causal} cudnn {fl/ms_c/1e9:.0f}"]
    for kn in (dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, GLUON=1), None):
        out, lse = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda")
        run = sdpa_forward(q, k, v, out, lse, causal, kn)
        run()
        torch.cuda.synchronize()
        err = (out.float() - ref.float()).abs().max().item()
        ms = do_bench(run)
        tf = fl / ms / 1e9
        row.append(f"{'gluon' if kn else 'heur'} {tf:.0f} ({tf / (fl / ms_c / 1e9):.2f}x) "
                   f"err {err:.1e}")
    print(" | ".join(row), flush=True)
