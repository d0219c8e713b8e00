"""Backward configs of the attention engine through the graph API (B=4, H=16, D=128,
bf16, S=4096, causal and not): the deterministic split (dK / dV, then dQ) against the
atomic-dQ variant (TMA=1: one bulk reduction per tile) and the split with the dQ kernel
on its own tiles, against PyTorch's cuDNN backend in the same run; gradients checked
against the cuDNN backend's. Run (GPU): PYTHONPATH=src python bench/attention_bwd_sweep.py"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import opendnn.frontend as cudnn

_SPLIT = dict(TMA=0, DQ_ATOMIC=0)
_TMA_ATOMIC = dict(TMA=1, DQ_ATOMIC=1)
_DQ = dict(DQ_BLOCK_M=128, DQ_BLOCK_N=64, DQ_WARPS=8, DQ_STAGES=3)
CONFIGS = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_SPLIT),
           dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_DQ, **_SPLIT),
           dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, DQ_BLOCK_M=128,
                DQ_BLOCK_N=32, DQ_WARPS=8, DQ_STAGES=3, **_SPLIT),
           dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=3, **_DQ, **_SPLIT),
           dict(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=3, **_DQ, **_SPLIT),
           dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2, **_TMA_ATOMIC),
           dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=3, **_TMA_ATOMIC)]


def main():
    B, H, S, D = 4, 16, 4096, 128
    for causal in (False, True):
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(4))
        qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
            ref = torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True)
            ms = do_bench(lambda: torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True))
        fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
        print(f"causal={causal} cudnn bwd: {fl / ms / 1e9:.0f} TFLOP/s", flush=True)
        lse = torch.logsumexp((q.float() @ k.float().transpose(-1, -2)) / math.sqrt(D) +
                              (torch.full((S, S), float("-inf"), device="cuda").triu(1)
                               if causal else 0), -1, keepdim=True)
        o = o.detach()
        for kn in CONFIGS:
            g = cudnn.pygraph()
            t = {n: g.tensor_like(x) for n, x in (("q", q), ("k", k), ("v", v), ("o", o),
                                                     ("do", do), ("st", lse))}
            grads = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], t["st"],
                                    attn_scale=1 / math.sqrt(D),
                                    diagonal_band_right_bound=0 if causal else None)
            outs = [torch.empty_like(x) for x in (q, k, v)]
            for gt in grads:
                gt.set_output(True)
            pack = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o, t["do"]: do, t["st"]: lse,
                    **dict(zip(grads, outs))}
            try:
                g.validate()
                g.build_operation_graph()
                g.create_execution_plan(40, kn)
                g.check_support()
                g.build_plans()
                ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda",
                                 dtype=torch.uint8)
                g.execute(pack, ws)
                torch.cuda.synchronize()
                err = max(((a.float() - b.float()).norm() / b.float().norm()).item()
                          for a, b in zip(outs, ref))
                ms = do_bench(lambda: g.execute(pack, ws))
            except Exception as e:   # noqa: BLE001 -- reported
                print(f"  {kn}: FAILED {str(e)[:100]}")
                continue
            print(f"  {kn['BLOCK_M']}x{kn['BLOCK_N']} w{kn['num_warps']} s{kn['num_stages']} "
                  f"atomic={kn['DQ_ATOMIC']} tma={kn['TMA']} dq={kn.get('DQ_BLOCK_M', 0)}: "
                  f"{ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
