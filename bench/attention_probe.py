"""First probe of the attention engine's forward kernel (engines/attention/_kernels.py),
launched directly: B=4, H=16, D=128 bf16, S in {1024, 4096}, causal and not, over a few
tiles / warps / stages, against PyTorch's scaled_dot_product_attention with the cuDNN and
the flash backends in the same run (issue 5's goal: >= 0.9x cuDNN forward). Each config's
output is checked against the cuDNN backend's.
Run (GPU): PYTHONPATH=src python bench/attention_probe.py"""
import dataclasses
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from opendnn.engines.attention import _kernels as K
from opendnn.enums import DataType
from opendnn.runtime.launch import kernel_from_source


@dataclasses.dataclass(frozen=True)
class Kn:
    BLOCK_M: int
    BLOCK_N: int


def main():
    B, H, Dh = 4, 16, 128
    for S in (1024, 4096):
        for causal in (False, True):
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
            for bm, bn, warps, stages in ((128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3),
                                          (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 4, 4)):
                src = K.fwd_source("attn_probe", p, Kn(bm, bn), interpret=False)
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
                    print(f"  {bm}x{bn} w{warps} s{stages}: FAILED {str(e)[:120]}")
                    continue
                print(f"  opendnn {bm}x{bn} w{warps} s{stages}: {ms:.3f} ms "
                      f"{flops / ms / 1e9:.0f} TFLOP/s  max err {err:.3f}", flush=True)


if __name__ == "__main__":
    main()
