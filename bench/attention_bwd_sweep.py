"""Backward configs of the attention engine through the graph API (B=4, H=16, D=128,
bf16, S=4096, causal and not): the deterministic split (dK / dV, then dQ) against the
atomic-dQ variant (TMA=1: one bulk reduction per tile) and the split with the dQ kernel
on its own tiles, against PyTorch's cuDNN backend in the same run; gradients checked
against the cuDNN backend's. Run (GPU): PYTHONPATH=src python bench/attention_bwd_sweep.py
[d64 | d128: that head dim, S 4096 and 16384, 32-row query tiles, wider key tiles (session
13) [fwd: forward tiles too (with Stats) [nobwd: forward only, S 4096 / 8192 / 16384]]]
| s1024: forward tiles at S=1024, causal head dims 64 / 128 and head dim 64 unmasked"""
import math
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import opendnn.frontend as cudnn
from probe_common import lse_reference, planned  # bench/ (the script's folder)

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


# session 13, head dim 64: the dK / dV accumulators of 128 keys fit (64 x 128 x 2 float32);
# first run (probes/attn_d64-s13a.txt): 32 x 128, 4 warps, 3 stages best (365 / 284 / 378 /
# 332 TFLOP/s against 337 / 278 / 361 / 315 for 64 x 64), 64 x 128 with 4 warps spills
_dq = [dict(DQ_BLOCK_M=m, DQ_BLOCK_N=n, DQ_WARPS=w, DQ_STAGES=st) for m, n, w, st in
       ((128, 64, 8, 3), (128, 128, 8, 3), (64, 128, 4, 3), (128, 64, 4, 3), (64, 64, 4, 3))]
D64 = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2, **_DQ, **_SPLIT)] + [
    dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st, **_DQ, **_SPLIT)
    for m, n, w, st in ((32, 128, 4, 3), (32, 128, 4, 4), (32, 128, 4, 5), (16, 128, 4, 3),
                        (16, 128, 4, 4), (32, 64, 4, 3), (32, 64, 4, 4), (32, 128, 8, 3),
                        (32, 64, 2, 3))] + [
    dict(BLOCK_M=32, BLOCK_N=128, num_warps=4, num_stages=3, **dq, **_SPLIT) for dq in _dq[1:]
] + [dict(BLOCK_M=32, BLOCK_N=n, num_warps=4, num_stages=4, **_dq[3], **_SPLIT) for n in (64, 128)]
# the same 32-row query tiles at head dim 128 (dK / dV of 64 keys: 128 registers a thread)
D128 = [dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st, **_DQ, **_SPLIT)
        for m, n, w, st in ((64, 64, 4, 2), (32, 64, 4, 3), (32, 64, 4, 4), (32, 64, 4, 5),
                            (16, 64, 4, 4), (32, 128, 8, 3), (32, 128, 8, 4))]
FWD = [dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=st) for m, n, w, st in
       ((64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (64, 64, 4, 4), (128, 64, 4, 4),
        (64, 128, 4, 3), (64, 128, 4, 4), (128, 128, 8, 3), (64, 32, 4, 3), (128, 64, 8, 4))]


def forward(B, H, S, D, causal):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    fl = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"S={S} D={D} causal={causal} cudnn fwd: {fl / ms / 1e9:.0f} TFLOP/s", flush=True)
    for kn in FWD:
        g = cudnn.pygraph()
        tq, tk, tv = (g.tensor_like(x) for x in (q, k, v))
        o, st = g.sdpa(tq, tk, tv, generate_stats=True, attn_scale=1 / math.sqrt(D),
                      diagonal_band_right_bound=0 if causal else None)
        o.set_output(True)
        st.set_output(True)       # the training forward, as the bench family times it
        out = torch.empty_like(q)
        pack = {tq: q, tk: k, tv: v, o: out, st: torch.empty(B, H, S, 1, device="cuda")}
        try:
            fn = planned(g, 40, kn, pack)
            fn()
            torch.cuda.synchronize()
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ms = do_bench(fn)
        except Exception as e:   # noqa: BLE001 -- reported
            print(f"  {kn}: FAILED {str(e)[:100]}")
            continue
        print(f"  fwd {kn['BLOCK_M']}x{kn['BLOCK_N']} w{kn['num_warps']} s{kn['num_stages']}: "
              f"{ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s rel err {err:.1e}", flush=True)


def main():
    B, H = 4, 16
    if "s1024" in sys.argv:     # session 14: the short rows' forward tiles (0.87-0.89x)
        for d in (64, 128):
            forward(B, H, 1024, d, True)
        forward(B, H, 1024, 64, False)
        return
    for d, configs in ((64, D64), (128, D128)):
        if f"d{d}" not in sys.argv:
            continue
        for S in (4096, 8192, 16384) if "nobwd" in sys.argv else (4096, 16384):
            for causal in (False, True):
                if "fwd" in sys.argv:
                    forward(B, H, S, d, causal)
                if "nobwd" not in sys.argv:
                    backward(B, H, S, d, causal, configs)
    if "d64" in sys.argv or "d128" in sys.argv:
        return
    for causal in (False, True):
        backward(B, H, 4096, 128, causal, CONFIGS)


def backward(B, H, S, D, causal, configs):
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))
    qr, kr, vr = (t.clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
        ref = torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True)
        ms = do_bench(lambda: torch.autograd.grad(o, (qr, kr, vr), do, retain_graph=True))
    fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    print(f"S={S} D={D} causal={causal} cudnn bwd: {fl / ms / 1e9:.0f} TFLOP/s",
          flush=True)
    lse = lse_reference(q, k, 1 / math.sqrt(D), causal)[..., None]   # [B, H, S, 1]
    o = o.detach()
    for kn in configs:
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
            fn = planned(g, 40, kn, pack)
            fn()
            torch.cuda.synchronize()
            err = max(((a.float() - b.float()).norm() / b.float().norm()).item()
                      for a, b in zip(outs, ref))
            ms = do_bench(fn)
        except Exception as e:   # noqa: BLE001 -- reported
            print(f"  {kn}: FAILED {str(e)[:100]}")
            continue
        dq = "x".join(str(kn.get(f"DQ_{n}", 0)) for n in ("BLOCK_M", "BLOCK_N", "WARPS", "STAGES"))
        print(f"  {kn['BLOCK_M']}x{kn['BLOCK_N']} w{kn['num_warps']} s{kn['num_stages']} "
              f"atomic={kn['DQ_ATOMIC']} tma={kn['TMA']} dq={dq}: "
              f"{ms:.3f} ms {fl / ms / 1e9:.0f} TFLOP/s rel err {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
