"""Session 14: the Gluon forward's knobs at the bench rows that missed 0.9x cuDNN (S=16384
D=128 non-causal: 0.84x in s14-attn against 0.97x in s13; S=1024 D=128 causal), each
config timed through execute() between two cuDNN timings, twice, with the GPU clocks read
after each. Run (GPU): PYTHONPATH=src:bench python bench/gluon_fwd_sweep.py"""
import os
import subprocess

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

from probe_common import sdpa_forward


def clocks() -> str:
    q = "clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()


def main(problems=((16384, 128, False), (1024, 128, True), (16384, 64, False))):
    B, H = 4, 16
    base = [dict(BLOCK_N=n, num_stages=st, PINGPONG=pp)
            for n, st, pp in ((128, 2, 1), (128, 2, 0), (64, 3, 0), (64, 3, 1), (128, 3, 0))]
    only = os.environ.get("ONLY")      # e.g. ONLY=PERSIST,LPT: configs with those knobs set
    for S, D, causal in problems:
        # causal: also query tiles longest first across heads (LPT=1, session 14)
        knobs = base + ([dict(kn, LPT=1) for kn in base[1:3] + base[4:]] if causal else [])
        # the persistent forward (session 15)
        knobs += [dict(BLOCK_N=n, num_stages=st, PINGPONG=0, PERSIST=1)
                  for n, st in ((64, 3), (64, 2), (128, 2)) + (((128, 3),) if D == 64 else ())]
        if only:
            knobs = [kn for kn in knobs if any(kn.get(n) for n in only.split(","))]
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        fl = 4 * B * H * S * S * D * (0.5 if causal else 1) / 1e9
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            def ref():
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            ref()
        out, lse = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda")
        for rep in range(2):
            for kn in knobs:
                run = sdpa_forward(q, k, v, out, lse, causal,
                                   dict(BLOCK_M=128, num_warps=4, GLUON=1, **kn))
                run()
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    c0 = do_bench(ref)
                ms = do_bench(run)
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    c1 = do_bench(ref)
                c = (c0 + c1) / 2
                print(f"S={S} D={D} causal={int(causal)} rep{rep} n{kn['BLOCK_N']} "
                      f"st{kn['num_stages']} pp{kn['PINGPONG']} lpt{kn.get('LPT', 0)} "
                      f"persist{kn.get('PERSIST', 0)}: "
                      f"{fl / ms:.0f} TFLOP/s, cudnn "
                      f"{fl / c0:.0f}/{fl / c1:.0f}, ratio {c / ms:.3f} | {clocks()}",
                      flush=True)


if __name__ == "__main__":
    import sys
    # optional problems "S,D,causal" (e.g. 1024,64,1)
    args = [tuple(int(x) for x in a.split(",")) for a in sys.argv[1:]]
    main([(s, d, bool(c)) for s, d, c in args] if args else main.__defaults__[0])
