"""First probe of the attention engine's forward kernel (engines/attention/_kernels.py),
launched directly: B=4, H=16, D=128 bf16, S in {1024, 4096}, causal and not, over a few
tiles / warps / stages, against PyTorch's scaled_dot_product_attention with the cuDNN and
the flash backends in the same run (issue 5's goal: >= 0.9x cuDNN forward). Each config's
output is checked against the cuDNN backend's.
Run (GPU): PYTHONPATH=src python bench/attention_probe.py [bwd]"""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from opendnn.engines.attention import _kernels as K
from opendnn.engines.matmul._kernels import ensure_allocator
from opendnn.enums import DataType
from opendnn.runtime.launch import kernel_from_source


@dataclasses.dataclass(frozen=True)
class Kn:
    BLOCK_M: int
    BLOCK_N: int
    TMA: int = 0


FWD_CONFIGS = ((128, 64, 8, 3, 0), (64, 64, 4, 3, 0), (128, 64, 8, 3, 1),
               (128, 128, 8, 3, 1), (64, 64, 4, 3, 1), (128, 64, 8, 4, 1),
               (128, 128, 8, 2, 1))


def main(configs=FWD_CONFIGS, causals=(False, True)):
    ensure_allocator()
    B, H, Dh = 4, 16, 128
    for S in (1024, 4096):
        for causal in causals:
            q, k, v = (torch.randn(B, H, S, Dh, device="cuda", dtype=torch.bfloat16)
                       for _ in range(3))
            flops = 4 * B * H * S * S * Dh * (0.5 if causal else 1.0)
            ref = None
            for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                             ("flash", SDPBackend.FLASH_ATTENTION)):
                with sdpa_kernel(be):
                    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    ref = out if ref is None else ref
                    ms = do_bench(lambda: F.scaled_dot_product_attention(
                        q, k, v, is_causal=causal), warmup=10, rep=50)
                print(f"S={S} causal={causal} torch-{name}: {ms:.3f} ms "
                      f"{flops / ms / 1e9:.0f} TFLOP/s", flush=True)
            o = torch.empty_like(q)
            st = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
            p = K.Problem(B, H, H, S, S, Dh, Dh, q.stride(), k.stride(), v.stride(),
                          o.stride(), DataType.BFLOAT16, DataType.BFLOAT16,
                          stats=tuple(st.stride()) + (0,), right=0 if causal else None)
            for bm, bn, warps, stages, tma in configs:
                src = K.fwd_source("attn_probe", p, Kn(bm, bn, tma), interpret=False)
                kern = kernel_from_source(src, "attn_probe").compiled
                grid = (math.ceil(S / bm), B * H)

                def fn():
                    kern[grid](q, k, v, o, st, 1 / math.sqrt(Dh), num_warps=warps,
                               num_stages=stages)
                try:
                    fn()
                    torch.cuda.synchronize()
                    err = ((o.float() - ref.float()).abs().max()).item()
                    ms = do_bench(fn, warmup=10, rep=50)
                except Exception as e:   # noqa: BLE001 -- reported
                    print(f"  {bm}x{bn} w{warps} s{stages} tma{tma}: FAILED {str(e)[:120]}")
                    continue
                print(f"  opendnn {bm}x{bn} w{warps} s{stages} tma{tma}: {ms:.3f} ms "
                      f"{flops / ms / 1e9:.0f} TFLOP/s  max err {err:.3f}", flush=True)


def backward():
    """Backward at S=4096 (D=128, causal and not): delta + dK/dV + dQ kernels, against
    the cuDNN and flash backends' backward (FLOPs: 2.5x the forward's)."""
    from opendnn.engines.attention import _bwd_kernels as KB
    B, H, Dh, S = 4, 16, 128, 4096
    for causal in (False, True):
        q, k, v = (torch.randn(B, H, S, Dh, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        do = torch.randn(B, H, S, Dh, device="cuda", dtype=torch.bfloat16)
        flops = 2.5 * 4 * B * H * S * S * Dh * (0.5 if causal else 1.0)
        grads = None
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel(be):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                g = torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
                grads = g if grads is None else grads
                ms = do_bench(lambda: torch.autograd.grad(out, (q, k, v), do,
                                                          retain_graph=True), warmup=10, rep=50)
            print(f"bwd S={S} causal={causal} torch-{name}: {ms:.3f} ms "
                  f"{flops / ms / 1e9:.0f} TFLOP/s", flush=True)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal).detach()
        qd, kd, vd = (t.detach() for t in (q, k, v))
        st = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
        p = K.Problem(B, H, H, S, S, Dh, Dh, qd.stride(), kd.stride(), vd.stride(),
                      o.stride(), DataType.BFLOAT16, DataType.BFLOAT16,
                      stats=tuple(st.stride()) + (0,), right=0 if causal else None)
        fsrc = K.fwd_source("attn_probe_f", p, Kn(128, 64), interpret=False)
        fk = kernel_from_source(fsrc, "attn_probe_f").compiled
        fk[(S // 128, B * H)](qd, kd, vd, o, st, 1 / math.sqrt(Dh), num_warps=8, num_stages=3)
        dq, dk, dv = (torch.empty_like(t) for t in (qd, kd, vd))
        gr = KB.Grads(do.stride(), dq.stride(), dk.stride(), dv.stride(), DataType.BFLOAT16,
                      DataType.BFLOAT16, DataType.BFLOAT16, DataType.BFLOAT16)
        ws = torch.empty(B * H * S, device="cuda", dtype=torch.float32)
        sc = 1 / math.sqrt(Dh)
        dl_k = kernel_from_source(KB.delta_source("attn_dl_p", p, gr, Kn(64, 64)),
                                  "attn_dl_p").compiled
        dl_k[(S // 64, B * H)](o, do, ws, num_warps=4)
        ms = do_bench(lambda: dl_k[(S // 64, B * H)](o, do, ws, num_warps=4), warmup=10, rep=50)
        print(f"  delta: {ms:.3f} ms", flush=True)
        # each kernel alone over its own tiles (the tutorial's shapes: dK / dV with 32 query
        # rows x 128 keys, dQ with 128 query rows x 32 keys)
        for kind, src_fn, configs in (
                ("dkdv", KB.dkdv_source, ((64, 64, 4, 2), (64, 64, 4, 3), (32, 128, 4, 3),
                                          (32, 128, 4, 4), (32, 128, 4, 5), (32, 128, 8, 3),
                                          (64, 128, 8, 2), (64, 128, 8, 3), (32, 64, 4, 3))),
                ("dq", KB.dq_source, ((64, 64, 4, 2), (64, 64, 4, 3), (128, 32, 4, 3),
                                      (128, 32, 4, 4), (128, 32, 4, 5), (128, 32, 8, 3),
                                      (128, 64, 8, 2), (128, 64, 8, 3), (64, 32, 4, 3)))):
            for bm, bn, warps, stages in configs:
                try:
                    kern = kernel_from_source(src_fn("attn_bwd_p", p, gr, Kn(bm, bn), False),
                                              "attn_bwd_p").compiled
                    if kind == "dkdv":
                        outs, refs = (dk, dv), grads[1:]

                        def fn():
                            kern[(S // bn, B * H)](qd, kd, vd, do, st, dk, dv, ws, sc,
                                                   num_warps=warps, num_stages=stages)
                    else:
                        outs, refs = (dq,), grads[:1]

                        def fn():
                            kern[(S // bm, B * H)](qd, kd, vd, do, st, dq, ws, sc,
                                                   num_warps=warps, num_stages=stages)
                    for t in outs:
                        t.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    err = max(((a.float() - b.float()).abs().max() / b.float().abs().max())
                              .item() for a, b in zip(outs, refs))
                    ms = do_bench(fn, warmup=10, rep=50)
                except Exception as e:   # noqa: BLE001 -- reported
                    print(f"  {kind} {bm}x{bn} w{warps} s{stages}: FAILED {str(e)[:120]}")
                    continue
                print(f"  {kind} {bm}x{bn} w{warps} s{stages}: {ms:.3f} ms  rel err {err:.3f}",
                      flush=True)


if __name__ == "__main__":
    import sys
    if "bwd" in sys.argv:
        backward()
    else:
        main()
