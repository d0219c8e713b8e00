"""Session 14: host time per execute() of engine 40's plans (Gluon forward / backward and the
Triton kernels) on a problem so small the GPU never holds the host back, and the time per
call of the Gluon launch callable alone. Explains short-row ratios where launch cost is
not hidden behind the previous kernel (causal S=1024 D=128 read 0.25x through the engine).
Run (GPU): PYTHONPATH=src:bench python bench/gluon_host_probe.py"""
import math
import time

import torch

import opendnn.frontend as cudnn
from probe_common import planned, sdpa_forward

FWD_GLUON = dict(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=2, GLUON=1)
FWD_TRITON = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)
BWD_GLUON = dict(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=2, DQ_BLOCK_M=128,
                 DQ_BLOCK_N=64, DQ_WARPS=4, DQ_STAGES=3, GLUON=1)
BWD_TRITON = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)


def per_call_us(fn, n=2000):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main():
    B, H, S, D = 1, 1, 128, 128
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))
    out, lse = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda")
    for causal in (False, True):
        for name, kn in (("fwd gluon", FWD_GLUON), ("fwd triton", FWD_TRITON)):
            run = sdpa_forward(q, k, v, out, lse, causal, kn)
            print(f"causal={int(causal)} {name:11s} execute {per_call_us(run):6.1f} us/call",
                  flush=True)
        for name, kn in (("bwd gluon", BWD_GLUON), ("bwd triton", BWD_TRITON)):
            g = cudnn.pygraph()
            tq, tk, tv, to, tdo = (g.tensor_like(t) for t in (q, k, v, out, do))
            tst = g.tensor_like(lse)
            grads = g.sdpa_backward(tq, tk, tv, to, tdo, tst, attn_scale=1 / math.sqrt(D),
                                    diagonal_band_right_bound=0 if causal else None)
            bufs = [torch.empty_like(q) for _ in grads]
            for t in grads:
                t.set_output(True)
            pack = {tq: q, tk: k, tv: v, to: out, tdo: do, tst: lse,
                    **dict(zip(grads, bufs))}
            run = planned(g, 40, kn, pack)
            print(f"causal={int(causal)} {name:11s} execute {per_call_us(run):6.1f} us/call",
                  flush=True)
    from opendnn.engines.attention import _gluon_kernels as G
    launch = G.prepare(q, k, v, out, lse, (B, H, H, S, D, torch.bfloat16), 0.1, 128, 2, False,
                       True)
    print(f"gluon forward launch callable alone {per_call_us(launch):6.1f} us/call")




def short_causal():
    """B=4, H=16, S=1024, D=128 causal forward: cuDNN, the Gluon launch callable alone and
    execute() of the Gluon plan, each by do_bench; then the kernel times the profiler saw."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from opendnn.engines.attention import _gluon_kernels as G
    B, H, S, D = 4, 16, 1024, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out, lse = torch.empty_like(q), torch.empty(B, H, S, 1, device="cuda")
    fl = 4 * B * H * S * S * D * 0.5
    for causal in (True, False):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ms_c = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        launch = G.prepare(q, k, v, out, lse, (B, H, H, S, D, torch.bfloat16), 1 / math.sqrt(D),
                           128, 2, False, causal)
        launch()
        ms_l = do_bench(launch)
        run = sdpa_forward(q, k, v, out, lse, causal, FWD_GLUON)
        run()
        ms_e = do_bench(run)
        f = fl * (1 if causal else 2) / 1e9
        print(f"S=1024 D=128 causal={int(causal)}: cudnn {ms_c * 1e3:.1f} us ({f / ms_c:.0f} "
              f"TFLOP/s), launch alone {ms_l * 1e3:.1f} us ({ms_c / ms_l:.2f}x), execute "
              f"{ms_e * 1e3:.1f} us ({ms_c / ms_e:.2f}x)", flush=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                run()
            torch.cuda.synchronize()
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.count >= 20:
                print(f"    kernel {e.key[:50]:50s} x{e.count} avg "
                      f"{e.device_time_total / e.count:.1f} us", flush=True)


if __name__ == "__main__":
    main()
    short_causal()
