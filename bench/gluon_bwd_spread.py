"""Session 14: the spread of the Gluon backward at S=8192 D=128 bf16 (B=4, H=16,
non-causal; bench attention read 11.40 ms in one run and 13.38 ms in the next while cuDNN
read 10.67 / 10.44): four fresh input sets (new addresses), each timed three times
between cuDNN timings, the kernels split by the profiler, the clocks read after each.
Run (GPU): PYTHONPATH=src:bench python bench/gluon_bwd_spread.py"""
import math

import torch
from triton.testing import do_bench

from gluon_attn_bwd_probe import cudnn_backward, gluon_backward
from gluon_fwd_sweep import clocks
from probe_common import lse_reference


def main(S=8192, D=128, causal=False):
    B, H = 4, 16
    scale = 1 / math.sqrt(D)
    cfg = ((64, 2), (64, 3))
    fl = 2.5 * 4 * B * H * S * S * D * (0.5 if causal else 1) / 1e9
    for trial in range(4):
        q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                       for _ in range(4))
        o, ref, run_c = cudnn_backward(q, k, v, do, scale, causal)
        lse = lse_reference(q, k, scale, causal)
        launch, *_ = gluon_backward(q, k, v, o, do, lse, scale, causal, cfg)
        launch()
        for rep in range(3):
            c = do_bench(run_c, return_mode="median")
            ms = do_bench(launch, return_mode="median")
            print(f"trial {trial} rep {rep}: gluon {ms:.3f} ms ({fl / ms:.0f} TFLOP/s), cudnn "
                  f"{c:.3f} ms, ratio {c / ms:.3f} | q at {q.data_ptr() % (1 << 24):#x} | "
                  f"{clocks()}", flush=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                launch()
            torch.cuda.synchronize()
        print("    " + ", ".join(f"{e.key[:16]} {e.device_time_total / e.count / 1e3:.3f} ms"
                                 for e in prof.key_averages()
                                 if e.device_type == torch.autograd.DeviceType.CUDA), flush=True)
        del q, k, v, do, o, ref, run_c, lse, launch
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
