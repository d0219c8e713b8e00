"""The Gluon attention backward (src/opendnn/engines/attention/_gluon_bwd_kernels.py) against
cuDNN SDPA's backward, launched directly (no graph), on an H100.

    PYTHONPATH=src:bench python bench/gluon_attn_bwd_probe.py [accuracy]

Default: B=4, H=16, S in (1024, 4096, 8192, 16384), D in (64, 128), causal and not, bf16:
three configs per head dim, each checked against cuDNN's gradients (relative error in norm
and in max) and timed (TFLOP/s counted as 2.5 x 4 B H S^2 D, halved for causal).
``accuracy``: B=1, H=4, S=1024, both head dims: cuDNN's and the Gluon kernels' gradients
against float64 PyTorch, to tell which of the two a disagreement comes from.
"""
import math
import sys
import traceback

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

from opendnn.engines.attention import _gluon_bwd_kernels as GB
from probe_common import lse_reference

# name -> ((dK / dV BLOCK_M, stages), (dQ BLOCK_N, stages)), per head dim
CONFIGS = {
    128: {"a_st2__b_n64_st3": ((64, 2), (64, 3)), "a_st3__b_n64_st3": ((64, 3), (64, 3)),
          "a_st2__b_n128_st2": ((64, 2), (128, 2))},
    64: {"a_st3__b_n64_st3": ((64, 3), (64, 3)), "a_st4__b_n128_st2": ((64, 4), (128, 2)),
         "a_st2__b_n128_st3": ((64, 2), (128, 3))},
}


def gluon_backward(q, k, v, o, do, lse, scale, causal, cfg):
    """(launch, dq, dk, dv): the engine's Gluon backward on packed BHSD tensors."""
    B, H, S, D = q.shape
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    delta = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    dims = (B, H, k.shape[1], S, D, q.dtype)
    launch = GB.prepare(q, k, v, o.contiguous(), do, lse.contiguous(), dq, dk, dv, delta,
                        dims, scale, cfg, causal)
    return launch, dq, dk, dv


def cudnn_backward(q, k, v, do, scale, causal):
    """(out, grads, timed callable) of cuDNN SDPA through PyTorch."""
    qr, kr, vr = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(qr, kr, vr, is_causal=causal, scale=scale)
        ref = torch.autograd.grad(out, (qr, kr, vr), do, retain_graph=True)

    def run():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.autograd.grad(out, (qr, kr, vr), do, retain_graph=True)
    return out.detach(), ref, run


def _rel(a, b):
    """(relative error in norm, max |a - b| / max |b|)."""
    d = a.double() - b.double()
    return (d.norm() / b.double().norm()).item(), (d.abs().max() / b.double().abs().max()).item()


def accuracy():
    """cuDNN's and the Gluon backward's gradients against float64 PyTorch."""
    torch.manual_seed(1)
    B, H, S = 1, 4, 1024
    for D in (64, 128):
        for causal in (False, True):
            scale = 1.0 / math.sqrt(D)
            q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                           for _ in range(4))
            o, ref_cudnn, _ = cudnn_backward(q, k, v, do, scale, causal)
            q64, k64, v64 = (t.double().requires_grad_(True) for t in (q, k, v))
            o64 = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal, scale=scale)
            ref64 = torch.autograd.grad(o64, (q64, k64, v64), do.double())
            lse = lse_reference(q, k, scale, causal)
            cfg = next(iter(CONFIGS[D].values()))
            launch, *got = gluon_backward(q, k, v, o, do, lse, scale, causal, cfg)
            launch()
            torch.cuda.synchronize()
            for who, grads in (("cudnn", ref_cudnn), ("gluon", got)):
                txt = " ".join(f"{n}:{e[0]:.1e}/{e[1]:.1e}" for n, e in zip(
                    ("dQ", "dK", "dV"), (_rel(a, b) for a, b in zip(grads, ref64))))
                print(f"D={D:3d} causal={int(causal)} {who:6s} vs float64 {txt}", flush=True)


def main(seqs=(1024, 4096, 8192, 16384)):
    torch.manual_seed(0)
    B, H = 4, 16
    print(f"device: {torch.cuda.get_device_name()}  triton {triton.__version__}", flush=True)
    for S in seqs:
        for D in (64, 128):
            scale = 1.0 / math.sqrt(D)
            q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                           for _ in range(4))
            for causal in (False, True):
                tag = f"S={S:5d} D={D:3d} causal={int(causal)}"
                flops = 2.5 * 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
                o, ref, run = cudnn_backward(q, k, v, do, scale, causal)
                ms_ref = triton.testing.do_bench(run)
                tf_ref = flops / ms_ref * 1e-9
                print(f"{tag} cudnn bwd: {ms_ref:.3f} ms {tf_ref:6.1f} TFLOP/s", flush=True)
                lse = lse_reference(q, k, scale, causal)
                for name, cfg in CONFIGS[D].items():
                    try:
                        launch, *got = gluon_backward(q, k, v, o, do, lse, scale, causal, cfg)
                        launch()
                        torch.cuda.synchronize()
                        errs = [_rel(a, b) for a, b in zip(got, ref)]
                        ok = "OK" if all(e[0] < 2e-2 for e in errs) else "WRONG"
                        txt = " ".join(f"{n}:{e[0]:.1e}/{e[1]:.1e}"
                                       for n, e in zip(("dQ", "dK", "dV"), errs))
                        ms = triton.testing.do_bench(launch)
                        tf = flops / ms * 1e-9
                        print(f"{tag} {name:18s} rel(norm/max) {txt} {ok:5s} {ms:.3f} ms "
                              f"{tf:6.1f} TFLOP/s ratio vs cudnn {tf / tf_ref:.3f}",
                              flush=True)
                    except Exception as e:  # noqa: BLE001 - report and go on
                        print(f"{tag} {name:18s} FAILED: {type(e).__name__}: {e}"[:2000],
                              flush=True)
                        traceback.print_exc()
                del o, ref, run, lse
                torch.cuda.empty_cache()


if __name__ == "__main__":
    if sys.argv[1:] == ["accuracy"]:
        accuracy()
    else:
        main()
